// DeepSpeed dynamic loss scaling, stepped through sequences whose expected scales are worked out by hand in
// the comments (rule in optim/loss_scaler.h); overflow detection over f32/bf16/f16 spans.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "optim/loss_scaler.h"
#include "runtime/check.h"

namespace zt::optim {
namespace {

struct Expect {
  bool overflow;         // input of this step
  double scale_after;    // scale() after update()
  int hysteresis_after;  // hysteresis_left() after update()
};

void run_sequence(LossScaler& scaler, const std::vector<Expect>& steps) {
  int64_t skipped = scaler.skipped_steps();
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("sequence step " + std::to_string(i));
    EXPECT_EQ(scaler.update(steps[i].overflow), !steps[i].overflow);
    if (steps[i].overflow) ++skipped;
    EXPECT_EQ(scaler.scale(), steps[i].scale_after);
    EXPECT_EQ(scaler.hysteresis_left(), steps[i].hysteresis_after);
    EXPECT_EQ(scaler.skipped_steps(), skipped);
  }
}

TEST(LossScaler, DefaultsAreDeepSpeeds) {
  LossScaler s;
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0);  // 2^16
  EXPECT_EQ(s.hysteresis_left(), 2);
  EXPECT_EQ(s.config().scale_window, 1000);
  EXPECT_EQ(s.config().min_scale, 1.0);
}

TEST(LossScaler, DoublesAfterAFullWindowOfCleanSteps) {
  // Default window 1000. Iterations 0..999: stable = iter - (-1) - 1 = iter, and only stable = 1000 (at iter
  // 1000, the 1001st clean step) is a positive multiple of the window. So 1000 clean updates leave 2^16 and
  // the 1001st doubles it; the next doubling is at iter 2000.
  LossScaler s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 131072.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 262144.0);
  EXPECT_EQ(s.skipped_steps(), 0);
  EXPECT_EQ(s.iteration(), 2001);
}

TEST(LossScaler, HysteresisIsRefilledOnlyWhenTheScaleGrows) {
  // window 3, hysteresis 2, start 2^4 = 16, consecutive_hysteresis false (DeepSpeed's default).
  LossScaler s(LossScalerConfig{.initial_scale_power = 4, .scale_window = 3, .hysteresis = 2});
  run_sequence(s, {
                      {false, 16, 2},  // iter 0: stable 0
                      {false, 16, 2},  // iter 1: stable 1
                      {false, 16, 2},  // iter 2: stable 2
                      {false, 32, 2},  // iter 3: stable 3 = window: x2, hysteresis refilled
                      {true, 32, 1},   // iter 4: overflow, hysteresis 2 -> 1, scale kept, step skipped
                      {false, 32, 1},  // iter 5: stable 0; a clean step does not refill hysteresis
                      {true, 16, 1},   // iter 6: overflow with hysteresis 1: halve
                      {true, 8, 1},    // iter 7: again: halve
                      {false, 8, 1},   // iter 8: stable 0
                      {false, 8, 1},   // iter 9: stable 1
                      {false, 8, 1},   // iter 10: stable 2
                      {false, 16, 2},  // iter 11: stable 3: x2 and refill
                      {true, 16, 1},   // iter 12: overflow only uses up hysteresis again
                  });
  EXPECT_EQ(s.skipped_steps(), 4);
  EXPECT_EQ(s.iteration(), 13);
}

TEST(LossScaler, ConsecutiveHysteresisNeedsBackToBackOverflows) {
  // consecutive_hysteresis true: every clean step refills hysteresis, so only 2 overflows in a row halve.
  LossScaler s(LossScalerConfig{
      .initial_scale_power = 4, .scale_window = 100, .hysteresis = 2, .consecutive_hysteresis = true});
  run_sequence(s, {
                      {true, 16, 1},   // iter 0: 2 -> 1
                      {false, 16, 2},  // iter 1: refilled
                      {true, 16, 1},   // iter 2: 2 -> 1 again, no halving
                      {true, 8, 1},    // iter 3: second in a row: halve
                      {true, 4, 1},    // iter 4: and again
                      {false, 4, 2},   // iter 5: refilled
                  });
}

TEST(LossScaler, HysteresisOneHalvesOnEveryOverflow) {
  // DeepSpeed's delayed_shift == 1 path. Window 2: after the overflow at iter 1, stable counts from iter 2.
  LossScaler s(LossScalerConfig{.initial_scale_power = 10, .scale_window = 2, .hysteresis = 1});
  run_sequence(s, {
                      {false, 1024, 1},  // iter 0: stable 0
                      {true, 512, 1},    // iter 1: halve
                      {true, 256, 1},    // iter 2: halve
                      {false, 256, 1},   // iter 3: stable 0
                      {false, 256, 1},   // iter 4: stable 1
                      {false, 512, 1},   // iter 5: stable 2 = window
                      {false, 512, 1},   // iter 6: stable 3
                      {false, 1024, 1},  // iter 7: stable 4 = 2 windows
                  });
}

TEST(LossScaler, HalvingStopsAtMinScaleThenRaises) {
  // Start 8, min 5, hysteresis 1: 8 -> max(4, 5) = 5; another overflow at the minimum ends the run.
  LossScaler s(LossScalerConfig{.initial_scale_power = 3, .hysteresis = 1, .min_scale = 5});
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 5.0);
  EXPECT_THROW(s.update(true), Error);

  // Without raising, it stays at the floor and keeps skipping.
  LossScaler quiet(LossScalerConfig{
      .initial_scale_power = 1, .hysteresis = 1, .min_scale = 1, .raise_error_at_min_scale = false});
  run_sequence(quiet, {{true, 1, 1}, {true, 1, 1}, {true, 1, 1}});
  EXPECT_EQ(quiet.skipped_steps(), 3);
}

TEST(LossScaler, StaticScaleNeverChangesButOverflowsAreSkipped) {
  LossScaler s(LossScalerConfig{.static_scale = 128, .scale_window = 2});
  EXPECT_FALSE(s.dynamic());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_FALSE(s.update(true));
  EXPECT_FALSE(s.update(true));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.skipped_steps(), 3);

  LossScaler off = LossScaler::disabled();
  EXPECT_FALSE(off.dynamic());
  EXPECT_EQ(off.scale(), 1.0);
}

TEST(LossScaler, ResumesFromSavedStateExactly) {
  const LossScalerConfig config{.initial_scale_power = 4, .scale_window = 3, .hysteresis = 2};
  const std::vector<bool> pattern = {false, false, false, false, true, false, true,  true,
                                     false, false, false, false, true, false, false, true};
  LossScaler straight(config), first(config);
  for (bool o : pattern) straight.update(o);
  for (size_t i = 0; i < 7; ++i) first.update(pattern[i]);
  LossScaler resumed(config);
  resumed.load_state(first.state());
  for (size_t i = 7; i < pattern.size(); ++i) resumed.update(pattern[i]);
  EXPECT_EQ(resumed.scale(), straight.scale());
  EXPECT_EQ(resumed.hysteresis_left(), straight.hysteresis_left());
  EXPECT_EQ(resumed.skipped_steps(), straight.skipped_steps());
  EXPECT_EQ(resumed.iteration(), straight.iteration());
  EXPECT_EQ(resumed.state().last_overflow_iteration, straight.state().last_overflow_iteration);

  LossScalerState bad = first.state();
  bad.hysteresis_left = 3;
  EXPECT_THROW(resumed.load_state(bad), Error);
  bad = first.state();
  bad.scale = 0;
  EXPECT_THROW(resumed.load_state(bad), Error);
}

TEST(LossScaler, RejectsInvalidConfig) {
  EXPECT_THROW(LossScaler(LossScalerConfig{.static_scale = -1}), Error);
  EXPECT_THROW(LossScaler(LossScalerConfig{.initial_scale_power = -1}), Error);
  EXPECT_THROW(LossScaler(LossScalerConfig{.scale_window = 0}), Error);
  EXPECT_THROW(LossScaler(LossScalerConfig{.hysteresis = 0}), Error);
  EXPECT_THROW(LossScaler(LossScalerConfig{.min_scale = 0}), Error);
}

TEST(OverflowCheck, FindsInfAndNanAnywhereInFloatSpans) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(100003, 1.0f);
  v[7] = std::numeric_limits<float>::max();
  v[8] = std::numeric_limits<float>::denorm_min();
  v[9] = -0.0f;
  for (int threads : {1, 3}) EXPECT_FALSE(has_inf_or_nan(v, threads));
  for (size_t where : {size_t{0}, size_t{40000}, v.size() - 1}) {  // first, middle block, ragged tail
    for (float bad : {inf, -inf, nan, -nan}) {
      std::vector<float> w = v;
      w[where] = bad;
      EXPECT_TRUE(has_inf_or_nan(w, 1)) << where;
      EXPECT_TRUE(has_inf_or_nan(w, 3)) << where;
    }
  }
  EXPECT_FALSE(has_inf_or_nan(std::vector<float>{}));
}

TEST(OverflowCheck, SixteenBitSpans) {
  // bf16: 0x7F80 +inf, 0xFF80 -inf, 0x7FC0 NaN, 0x7F7F the largest finite.
  std::vector<bf16> b = {bf16{0x3F80}, bf16{0x7F7F}, bf16{0xFF7F}, bf16{0x0001}};
  EXPECT_FALSE(has_inf_or_nan(std::span<const bf16>(b)));
  for (uint16_t bad : {0x7F80, 0xFF80, 0x7FC0, 0x7F81}) {
    std::vector<bf16> w = b;
    w[2] = bf16{bad};
    EXPECT_TRUE(has_inf_or_nan(std::span<const bf16>(w))) << bad;
  }
  // f16: 0x7C00 +inf, 0xFC00 -inf, 0x7E00 NaN, 0x7BFF = 65504 the largest finite.
  std::vector<f16> h = {f16{0x3C00}, f16{0x7BFF}, f16{0xFBFF}, f16{0x0001}};
  EXPECT_FALSE(has_inf_or_nan(std::span<const f16>(h)));
  for (uint16_t bad : {0x7C00, 0xFC00, 0x7E00, 0x7C01}) {
    std::vector<f16> w = h;
    w[3] = f16{bad};
    EXPECT_TRUE(has_inf_or_nan(std::span<const f16>(w))) << bad;
  }
}

TEST(OverflowCheck, ReportsCountsAndFirstIndex) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {1.0f, 2.0f, nan, -inf, 3.0f, inf, nan, nan};
  const NonFiniteReport r = find_non_finite(v);
  EXPECT_EQ(r.inf_count, 2);
  EXPECT_EQ(r.nan_count, 3);
  EXPECT_EQ(r.first_index, 2);
  const NonFiniteReport clean = find_non_finite(std::vector<float>{1.0f, -2.0f});
  EXPECT_EQ(clean.inf_count + clean.nan_count, 0);
  EXPECT_EQ(clean.first_index, -1);
}

}  // namespace
}  // namespace zt::optim
