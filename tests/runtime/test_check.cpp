// ZT_CHECK's error: the user's message apart from the developer's report, and the text tools print.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "tests/support/scoped_env.h"

namespace zt {
namespace {

Error failed_check(int batch) {
  try {
    ZT_CHECK(batch > 0, "batch size must be positive, got ", batch);
  } catch (const Error& e) {
    return e;
  }
  throw std::logic_error("ZT_CHECK did not throw");
}

TEST(Check, ErrorKeepsTheMessageApartFromTheReport) {
  const Error e = failed_check(0);
  EXPECT_EQ(e.message(), "batch size must be positive, got 0");
  const std::string report = e.what();
  EXPECT_NE(report.find("batch size must be positive, got 0"), std::string::npos) << report;
  EXPECT_NE(report.find("[check failed: batch > 0]"), std::string::npos) << report;
  EXPECT_NE(report.find("test_check.cpp:"), std::string::npos) << report;
}

TEST(Check, ToolsPrintTheMessageUnlessVerboseErrorsIsSet) {
  const Error e = failed_check(-3);
  {
    const test::ScopedEnv unset("ZT_VERBOSE_ERRORS", nullptr);
    EXPECT_EQ(error_text(e), "batch size must be positive, got -3");
  }
  {
    const test::ScopedEnv off("ZT_VERBOSE_ERRORS", "0");
    EXPECT_EQ(error_text(e), "batch size must be positive, got -3");
  }
  {
    const test::ScopedEnv on("ZT_VERBOSE_ERRORS", "1");
    EXPECT_EQ(error_text(e), std::string(e.what()));
  }
  const std::runtime_error other("not one of ours");
  EXPECT_EQ(error_text(other), "not one of ours");
  const Error plain("a message without a report");
  EXPECT_EQ(error_text(plain), "a message without a report");
}

TEST(Check, ToolMainReturnsTheBodysCodeOrTwoOnAnError) {
  EXPECT_EQ(run_tool_main("tool", 0, nullptr, [](int, char**) { return 3; }), 3);
  testing::internal::CaptureStderr();
  const int code = run_tool_main("tool", 0, nullptr, [](int, char**) -> int { ZT_FAIL("no such file 'x'"); });
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 2);
  EXPECT_EQ(printed, "tool: error: no such file 'x'\n");
}

// Under ulimit -f a write past the limit raised SIGXFSZ, which killed the tool without a word. The tool main
// ignores it, so the write fails (EFBIG, as on a full disk) and the tool ends with its one error line and
// code 2. In a child process, since the limit and the signal disposition are process-wide.
TEST(Check, ToolMainTurnsAFileSizeLimitIntoAnErrorLine) {
  const std::string path = str(std::filesystem::temp_directory_path().string(), "/zt_fsize_", getpid());
  std::fflush(nullptr);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_DFL);
    rlimit limit{};
    getrlimit(RLIMIT_FSIZE, &limit);
    limit.rlim_cur = 4096;
    setrlimit(RLIMIT_FSIZE, &limit);
    static std::string target;
    target = path;
    if (std::freopen("/dev/null", "w", stderr) == nullptr) _exit(3);
    _exit(run_tool_main("tool", 0, nullptr, [](int, char**) {
      std::ofstream out(target, std::ios::binary);
      out << std::string(1 << 20, 'x');
      out.close();
      ZT_CHECK(!out.fail(), "cannot write ", target, " (disk full?)");
      return 0;
    }));
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  std::filesystem::remove(path);
  ASSERT_TRUE(WIFEXITED(status)) << "the tool died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

TEST(Check, WithContextPrefixesTheMessageAndTheReport) {
  const Error inner = failed_check(-1);
  const Error outer = with_context("in config.json: ", inner);
  EXPECT_EQ(outer.message(), "in config.json: batch size must be positive, got -1");
  EXPECT_EQ(std::string(outer.what()), "in config.json: " + std::string(inner.what()));
}

}  // namespace
}  // namespace zt
