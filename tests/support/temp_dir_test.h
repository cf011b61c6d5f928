// A GoogleTest fixture with a fresh directory per test (removed afterwards) and a helper that expects a
// zt::Error whose message names every given part — for tests of code that writes and rejects files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <initializer_list>
#include <string>

#include "runtime/check.h"

namespace zt::test {

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           str("zt_test_", getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Expects `fn` to throw a zt::Error whose message contains every one of `parts`.
  template <typename Fn>
  static void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
    try {
      fn();
      ADD_FAILURE() << "expected a zt::Error";
    } catch (const Error& e) {
      for (const std::string& part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "missing '" << part << "' in: " << e.what();
    }
  }

  std::filesystem::path dir_;
};

}  // namespace zt::test
