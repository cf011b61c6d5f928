// A GoogleTest fixture with a fresh directory per test (removed afterwards), its sorted entry names, a dead
// process id for stale-temp-file tests, and a helper that expects a
// zt::Error whose message names every given part — for tests of code that writes and rejects files.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

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
  // The names of the entries of the test's directory, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      out.push_back(entry.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  // A pid that belonged to a process which has exited and been reaped (stale temp files name one).
  static pid_t dead_pid() {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    return child;
  }

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
