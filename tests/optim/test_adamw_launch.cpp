// ZT_OVERLAP_ADAMW_GRID's parsing (optim/adamw_launch.h): empty is the default launch, "BLOCKS,THREADS" a
// bounded one, and every malformed value an error naming the variable and the expected form, never a silent
// fallback to the default. The process reads the variable once.
#include "optim/adamw_launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/check.h"

namespace zt::optim {
namespace {

void expect_launch(std::string_view text, int blocks, int threads) {
  const AdamWLaunch launch = parse_adamw_grid(text, "ZT_OVERLAP_ADAMW_GRID");
  EXPECT_EQ(launch.blocks, blocks) << "'" << text << "'";
  EXPECT_EQ(launch.threads, threads) << "'" << text << "'";
}

void expect_error(std::string_view text, const std::string& part) {
  try {
    parse_adamw_grid(text, "ZT_OVERLAP_ADAMW_GRID");
    ADD_FAILURE() << "expected an error for '" << text << "'";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_NE(message.find("ZT_OVERLAP_ADAMW_GRID"), std::string::npos) << message;
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' missing from: " << message;
  }
}

TEST(AdamWLaunchParse, EmptyIsTheDefaultLaunch) {
  expect_launch("", 0, 0);
}

TEST(AdamWLaunchParse, AcceptsTwoPositiveIntegers) {
  expect_launch("33,512", 33, 512);
  expect_launch("66,256", 66, 256);
  expect_launch("1,32", 1, 32);
  expect_launch("65535,1024", 65535, 1024);
  expect_launch("007,0064", 7, 64);  // leading zeros are still decimal
}

TEST(AdamWLaunchParse, RejectsMalformedText) {
  for (const char* text :
       {"33", "33,", ",512", ",", "33;512", "33 512", " 33,512", "33,512 ", "33, 512", "33,512,1", "+33,512",
        "-33,512", "33,-512", "a,512", "33,5x2", "3.5,512", "0x21,512"}) {
    expect_error(text, "must be BLOCKS,THREADS (two positive integers separated by a comma, e.g. 33,512)");
  }
}

TEST(AdamWLaunchParse, RejectsZeroAndOutOfRangeShapes) {
  expect_error("0,512", "two positive integers");
  expect_error("33,0", "two positive integers");
  expect_error("99999999999999999999999,512", "two positive integers");  // past int64
  expect_error("65536,512", "BLOCKS must be at most 65535");
  expect_error("4294967329,512", "BLOCKS must be at most 65535");  // 2^32 + 33: no wrap to 33
  expect_error("33,500", "THREADS must be a multiple of 32 in [32, 1024]");
  expect_error("33,16", "THREADS must be a multiple of 32 in [32, 1024]");
  expect_error("33,1056", "THREADS must be a multiple of 32 in [32, 1024]");
  expect_error("33,4294967808", "THREADS must be a multiple of 32 in [32, 1024]");  // 2^32 + 512
}

TEST(AdamWLaunchEnvironment, ReadOncePerProcess) {
  ASSERT_EQ(setenv("ZT_OVERLAP_ADAMW_GRID", "33,512", 1), 0);
  const AdamWLaunch first = overlap_adamw_launch();
  EXPECT_EQ(first.blocks, 33);
  EXPECT_EQ(first.threads, 512);
  ASSERT_EQ(setenv("ZT_OVERLAP_ADAMW_GRID", "garbage", 1), 0);  // not read again
  const AdamWLaunch second = overlap_adamw_launch();
  EXPECT_EQ(second.blocks, 33);
  EXPECT_EQ(second.threads, 512);
  ASSERT_EQ(unsetenv("ZT_OVERLAP_ADAMW_GRID"), 0);
}

}  // namespace
}  // namespace zt::optim
