// Tests of the disk tier run over both I/O backends (io_uring, thread pool) and both file modes (O_DIRECT
// required, buffered): a temp-dir fixture parameterized by (backend, mode) that skips, with the reason, the
// io_uring cases where io_uring cannot be set up.
//
//   class MyTest : public test::IoBackendTest {};
//   TEST_P(MyTest, Works) { AsyncFileIo io({.backend = backend()}); ... mode() ... }
//   ZT_INSTANTIATE_IO_BACKEND_TESTS(MyTest);
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "runtime/direct_io.h"
#include "tests/support/temp_dir_test.h"

namespace zt::test {

using IoBackendAndMode = std::tuple<IoBackendChoice, DirectIoMode>;

class IoBackendTest : public TempDirTest, public ::testing::WithParamInterface<IoBackendAndMode> {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    if (backend() == IoBackendChoice::io_uring) {
      const std::string reason = io_uring_unavailable_reason();
      if (!reason.empty()) GTEST_SKIP() << "io_uring unavailable: " << reason;
    }
  }
  IoBackendChoice backend() const { return std::get<0>(GetParam()); }
  DirectIoMode mode() const { return std::get<1>(GetParam()); }
};

inline std::string io_backend_and_mode_name(const ::testing::TestParamInfo<IoBackendAndMode>& info) {
  return str(std::get<0>(info.param) == IoBackendChoice::io_uring ? "io_uring" : "thread_pool", "_",
             direct_io_mode_name(std::get<1>(info.param)));
}

}  // namespace zt::test

#define ZT_INSTANTIATE_IO_BACKEND_TESTS(suite)                                                    \
  INSTANTIATE_TEST_SUITE_P(                                                                       \
      BackendsAndModes, suite,                                                                    \
      ::testing::Combine(                                                                         \
          ::testing::Values(::zt::IoBackendChoice::io_uring, ::zt::IoBackendChoice::thread_pool), \
          ::testing::Values(::zt::DirectIoMode::required, ::zt::DirectIoMode::off)),              \
      ::zt::test::io_backend_and_mode_name)
