// WallClockBreakdown on the host clock: segments are charged the time since the previous mark, summed per
// name over a step, averaged over the steps since the last take; marks on a thread without one are no-ops.
#include "runtime/wall_clock_breakdown.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace zt {
namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(WallClockBreakdown, ChargesTheTimeSinceThePreviousMarkPerSegmentAndAveragesOverSteps) {
  WallClockBreakdown breakdown(/*synchronize_device=*/false);
  WallClockScope scope(&breakdown);
  for (int step = 0; step < 2; ++step) {
    breakdown.start_step();
    for (int micro = 0; micro < 2; ++micro) {
      sleep_ms(20);
      mark_wall_clock("forward");
      sleep_ms(5);
      mark_wall_clock("backward");
    }
    sleep_ms(30);
    mark_wall_clock("optimizer");
  }
  const auto mean = breakdown.take_mean_ms();
  ASSERT_EQ(mean.size(), 3u);
  EXPECT_EQ(mean[0].first, "forward");  // in the order first marked
  EXPECT_EQ(mean[1].first, "backward");
  EXPECT_EQ(mean[2].first, "optimizer");
  EXPECT_GE(mean[0].second, 40.0);  // two micro-batches of >= 20 ms per step
  EXPECT_GE(mean[1].second, 10.0);
  EXPECT_LT(mean[1].second, mean[0].second);
  EXPECT_GE(mean[2].second, 30.0);
  EXPECT_TRUE(breakdown.take_mean_ms().empty());  // taken: cleared
}

TEST(WallClockBreakdown, MarksOnAThreadWithoutABreakdownChangeNothing) {
  WallClockBreakdown breakdown(false);
  {
    WallClockScope scope(&breakdown);
    EXPECT_EQ(current_wall_clock_breakdown(), &breakdown);
    std::thread other([] {
      EXPECT_EQ(current_wall_clock_breakdown(), nullptr);
      mark_wall_clock("reduce");
    });
    other.join();
  }
  EXPECT_EQ(current_wall_clock_breakdown(), nullptr);
  mark_wall_clock("reduce");
  EXPECT_TRUE(breakdown.take_mean_ms().empty());
}

}  // namespace
}  // namespace zt
