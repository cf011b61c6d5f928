#include <gtest/gtest.h>

#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt {
namespace {

TEST(MemorySize, ParsesBinaryDecimalAndPlainUnits) {
  EXPECT_EQ(parse_memory_size("24GiB"), 24ull << 30);
  EXPECT_EQ(parse_memory_size("24GB"), 24'000'000'000ull);
  EXPECT_EQ(parse_memory_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_memory_size("1.5GiB"), 3ull << 29);
  EXPECT_EQ(parse_memory_size("4096"), 4096u);
  EXPECT_EQ(parse_memory_size("0"), 0u);
  EXPECT_EQ(parse_memory_size("7B"), 7u);
  EXPECT_EQ(parse_memory_size("2kib"), 2048u);  // case-insensitive
  EXPECT_EQ(parse_memory_size("16G"), 16ull << 30);
  EXPECT_EQ(parse_memory_size(" 24 GiB "), 24ull << 30);  // what format_memory_size prints, padded
  EXPECT_EQ(parse_memory_size("18446744073709551615"), 18446744073709551615ull);  // exact, no double
}

TEST(MemorySize, RejectsGarbage) {
  for (const char* bad : {"", "GiB", "-1GiB", "12XB", "1.5", "1..5GiB", "abc", "1e3", "24 GiB extra", ".GiB",
                          "18446744073709551616", "99999999999TiB"}) {
    EXPECT_THROW(parse_memory_size(bad), Error) << "'" << bad << "'";
  }
}

TEST(MemorySize, ErrorNamesTheInput) {
  try {
    parse_memory_size("24 GiBs");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("24 GiBs"), std::string::npos) << e.what();
  }
}

TEST(MemorySize, FormatsHumanReadably) {
  EXPECT_EQ(format_memory_size(0), "0 B");
  EXPECT_EQ(format_memory_size(1023), "1023 B");
  EXPECT_EQ(format_memory_size(1536), "1.5 KiB");
  EXPECT_EQ(format_memory_size(24ull << 30), "24 GiB");
  EXPECT_EQ(format_memory_size((3ull << 40) / 4 * 3), "2.25 TiB");
  EXPECT_EQ(format_memory_size(1'700'000'000), "1.58 GiB");
}

TEST(MemorySize, FormatParsesBack) {
  for (size_t n : {size_t{0}, size_t{512}, size_t{1} << 20, size_t{24} << 30, size_t{3} << 29})
    EXPECT_EQ(parse_memory_size(format_memory_size(n)), n) << format_memory_size(n);
}

}  // namespace
}  // namespace zt
