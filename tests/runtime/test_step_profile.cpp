// StepProfile on the host clock (this test's machine has no GPU, or the profile falls back to it): segments
// are charged the time since the previous mark, summed by name, nothing across a mark_start, and nothing at
// all while disabled.
#include "runtime/step_profile.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "runtime/device.h"

namespace zt {
namespace {

void busy_for(std::chrono::milliseconds ms) {
  std::this_thread::sleep_for(ms);
}

TEST(StepProfile, ChargesSegmentsBetweenMarksAndSumsThemByName) {
  StepProfile& p = StepProfile::global();
  p.enable(true);
  p.reset();
  for (int step = 0; step < 2; ++step) {
    p.mark_start();
    busy_for(std::chrono::milliseconds(20));
    p.mark("alpha");
    busy_for(std::chrono::milliseconds(5));
    p.mark("beta");
    p.collect();
  }
  const std::string report = p.report();
  p.enable(false);
  EXPECT_NE(report.find("alpha"), std::string::npos) << report;
  EXPECT_NE(report.find("beta"), std::string::npos) << report;
  EXPECT_NE(report.find("(2 steps"), std::string::npos) << report;
  // alpha (2 x 20 ms) sorts above beta (2 x 5 ms); on the host clock both are at least their sleeps.
  EXPECT_LT(report.find("alpha"), report.find("beta")) << report;
  if (!cuda_available()) {
    const size_t at = report.find("alpha");
    const double alpha_ms = std::stod(report.substr(at + 5));
    EXPECT_GE(alpha_ms, 40.0) << report;
  }
}

TEST(StepProfile, DisabledRecordsNothing) {
  StepProfile& p = StepProfile::global();
  p.enable(false);
  p.reset();
  p.mark_start();
  p.mark("gamma");
  p.collect();
  EXPECT_EQ(p.report().find("gamma"), std::string::npos);
}

}  // namespace
}  // namespace zt
