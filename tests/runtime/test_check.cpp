// ZT_CHECK's error: the user's message apart from the developer's report, and the text tools print.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/check.h"

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

// Sets ZT_VERBOSE_ERRORS for one scope, restoring what was there.
class VerboseErrors {
 public:
  explicit VerboseErrors(const char* value) {
    if (const char* old = std::getenv("ZT_VERBOSE_ERRORS")) saved_ = old, had_ = true;
    if (value != nullptr) {
      setenv("ZT_VERBOSE_ERRORS", value, 1);
    } else {
      unsetenv("ZT_VERBOSE_ERRORS");
    }
  }
  ~VerboseErrors() {
    if (had_) {
      setenv("ZT_VERBOSE_ERRORS", saved_.c_str(), 1);
    } else {
      unsetenv("ZT_VERBOSE_ERRORS");
    }
  }

 private:
  std::string saved_;
  bool had_ = false;
};

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
    const VerboseErrors unset(nullptr);
    EXPECT_EQ(error_text(e), "batch size must be positive, got -3");
  }
  {
    const VerboseErrors off("0");
    EXPECT_EQ(error_text(e), "batch size must be positive, got -3");
  }
  {
    const VerboseErrors on("1");
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

}  // namespace
}  // namespace zt
