// HF get_scheduler semantics: hand-worked values, and the values HF itself produced (adamw_torch.h5).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optim/lr_schedule.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt::optim {
namespace {

std::vector<double> factors(const LrSchedule& s, int64_t count) {
  std::vector<double> out;
  for (int64_t step = 0; step < count; ++step) out.push_back(s.factor_at(step));
  return out;
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "step " << i;
}

TEST(LrSchedule, LinearWarmsUpThenDecaysToZero) {
  // W = 2, T = 6: warmup s/2 for s < 2, then (6 - s)/4, clamped at 0 past T.
  const LrSchedule s{
      .kind = ScheduleKind::linear, .base_lr = 1.0, .num_warmup_steps = 2, .num_training_steps = 6};
  expect_values(factors(s, 8), {0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0, 0.0});
  const LrSchedule scaled{
      .kind = ScheduleKind::linear, .base_lr = 2e-5, .num_warmup_steps = 2, .num_training_steps = 6};
  EXPECT_DOUBLE_EQ(scaled.lr_at(3), 2e-5 * 0.75);
}

TEST(LrSchedule, LinearWithoutWarmupStartsAtFullRate) {
  // W = 0: (T - s) / max(1, T - 0).
  const LrSchedule s{
      .kind = ScheduleKind::linear, .base_lr = 1.0, .num_warmup_steps = 0, .num_training_steps = 4};
  expect_values(factors(s, 5), {1.0, 0.75, 0.5, 0.25, 0.0});
}

TEST(LrSchedule, CosineFollowsHalfAWave) {
  // W = 2, T = 6: after warmup progress = (s - 2)/4 and factor = 0.5 (1 + cos(pi progress)):
  // s=2: 1; s=3: 0.5 + sqrt(2)/4; s=4: 0.5; s=5: 0.5 - sqrt(2)/4; s=6: 0.
  const LrSchedule s{
      .kind = ScheduleKind::cosine, .base_lr = 1.0, .num_warmup_steps = 2, .num_training_steps = 6};
  const double r2 = std::sqrt(2.0) / 4;
  expect_values(factors(s, 7), {0.0, 0.5, 1.0, 0.5 + r2, 0.5, 0.5 - r2, 0.0});
}

TEST(LrSchedule, ConstantAndConstantWithWarmup) {
  const LrSchedule c{.kind = ScheduleKind::constant, .base_lr = 3e-4, .num_warmup_steps = 5};
  for (int64_t step : {0, 1, 7, 1000000}) EXPECT_EQ(c.lr_at(step), 3e-4);
  const LrSchedule w{.kind = ScheduleKind::constant_with_warmup, .base_lr = 1.0, .num_warmup_steps = 4};
  expect_values(factors(w, 7), {0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0});
}

TEST(LrSchedule, MatchesHuggingFaceGetScheduler) {
  test::Fixture f("adamw_torch.h5");
  const auto warmup = static_cast<int64_t>(f.attr_f64("sched_warmup_steps"));
  const auto total = static_cast<int64_t>(f.attr_f64("sched_training_steps"));
  for (const std::string name : {"linear", "cosine", "constant", "constant_with_warmup"}) {
    SCOPED_TRACE(name);
    const std::vector<float> hf = f.read_f32("schedules/" + name);  // HF's values at steps 0, 1, ...
    const LrSchedule s{.kind = parse_schedule_kind(name),
                       .base_lr = 1.0,
                       .num_warmup_steps = warmup,
                       .num_training_steps = total};
    for (size_t step = 0; step < hf.size(); ++step) {
      EXPECT_NEAR(s.lr_at(static_cast<int64_t>(step)), hf[step], 1e-7) << "step " << step;
    }
  }
}

TEST(LrSchedule, ParsesHuggingFaceNames) {
  for (ScheduleKind k : {ScheduleKind::linear, ScheduleKind::cosine, ScheduleKind::constant,
                         ScheduleKind::constant_with_warmup}) {
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(k)), k);
  }
  EXPECT_EQ(parse_schedule_kind("constant_with_warmup"), ScheduleKind::constant_with_warmup);
  EXPECT_THROW(parse_schedule_kind("Linear"), Error);
  EXPECT_THROW(parse_schedule_kind("linear "), Error);
  EXPECT_THROW(parse_schedule_kind(""), Error);
  try {
    parse_schedule_kind("polynomial");
    FAIL() << "polynomial was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not implemented"), std::string::npos) << e.what();
  }
  try {
    parse_schedule_kind("cosine_annealing");
    FAIL() << "an unknown name was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, RejectsInvalidSettings) {
  EXPECT_THROW((LrSchedule{.kind = ScheduleKind::linear, .base_lr = 1, .num_warmup_steps = -1}.validate()),
               Error);
  EXPECT_THROW((LrSchedule{.kind = ScheduleKind::linear, .base_lr = -1}.validate()), Error);
  EXPECT_THROW((LrSchedule{.kind = ScheduleKind::cosine, .base_lr = 1, .num_training_steps = -3}.validate()),
               Error);
  EXPECT_NO_THROW(
      (LrSchedule{.kind = ScheduleKind::linear, .base_lr = 1, .num_training_steps = 10}.validate()));
  EXPECT_THROW(LrSchedule{}.factor_at(-1), Error);
}

// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR (deepspeed/runtime/lr_schedules.py) at edge values,
// hand-worked from its formulas: the first optimizer step at the rate the scheduler is built with
// (warmup_min_lr; 0 for the cosine), then step k at the formula's k - 1; W = max(2, warmup_num_steps), decay
// to warmup_min_lr, cosine progress one step ahead and clamped at 1.
std::vector<double> deepspeed_lrs(const DeepSpeedSchedule& s, int64_t count, double optimizer_lr = 0) {
  std::vector<double> out;
  for (int64_t step = 0; step < count; ++step) out.push_back(s.lr_at(step, optimizer_lr));
  return out;
}

TEST(DeepSpeedSchedule, WarmupDecayEndsAtWarmupMinLr) {
  const DeepSpeedSchedule s{.type = DeepSpeedSchedule::Type::warmup_decay_lr,
                            .warmup_min_lr = 0.1,
                            .warmup_max_lr = 1.1,
                            .warmup_num_steps = 4,
                            .total_num_steps = 10,
                            .warmup_log = false};
  // Built at 0.1; warmup 0.1 + s/4; then 0.1 + (10 - s)/6, which reaches warmup_min_lr (not 0) at s = 10.
  expect_values(deepspeed_lrs(s, 13), {0.1, 0.1, 0.35, 0.6, 0.85, 1.1, 0.1 + 5.0 / 6, 0.1 + 4.0 / 6, 0.6,
                                       0.1 + 2.0 / 6, 0.1 + 1.0 / 6, 0.1, 0.1});
}

TEST(DeepSpeedSchedule, OneStepRunsAtTheBuiltRate) {
  const DeepSpeedSchedule warmup{.type = DeepSpeedSchedule::Type::warmup_lr,
                                 .warmup_min_lr = 0.25,
                                 .warmup_max_lr = 1.0,
                                 .warmup_num_steps = 10};
  EXPECT_EQ(warmup.lr_at(0, 5.0), 0.25);
  const DeepSpeedSchedule cosine{
      .type = DeepSpeedSchedule::Type::warmup_cosine_lr, .warmup_num_steps = 10, .warmup_min_ratio = 0.5};
  EXPECT_EQ(cosine.lr_at(0, 5.0), 0.0);
  EXPECT_EQ(cosine.lr_at(1, 5.0), 2.5);  // s = 0: warmup_min_ratio x lr
}

TEST(DeepSpeedSchedule, WarmupOfOneStepLastsTwo) {
  // DeepSpeed warms up over max(2, warmup_num_steps) steps: log(s + 1) / log(2) is 0 then 1 (a warmup of 1
  // would divide by log(1) = 0).
  DeepSpeedSchedule log_warmup{.type = DeepSpeedSchedule::Type::warmup_lr,
                               .warmup_min_lr = 0.0,
                               .warmup_max_lr = 2.0,
                               .warmup_num_steps = 1};
  expect_values(deepspeed_lrs(log_warmup, 4), {0.0, 0.0, 2.0, 2.0});
  DeepSpeedSchedule linear = log_warmup;
  linear.warmup_log = false;
  expect_values(deepspeed_lrs(linear, 4), {0.0, 0.0, 1.0, 2.0});
  // Decay with total == warmup: the warmup's last step, then warmup_min_lr.
  const DeepSpeedSchedule decay{.type = DeepSpeedSchedule::Type::warmup_decay_lr,
                                .warmup_min_lr = 0.5,
                                .warmup_max_lr = 2.5,
                                .warmup_num_steps = 3,
                                .total_num_steps = 3,
                                .warmup_log = false};
  expect_values(deepspeed_lrs(decay, 5), {0.5, 0.5, 0.5 + 2.0 / 3, 0.5 + 4.0 / 3, 0.5});
}

TEST(DeepSpeedSchedule, NoWarmupStartsAtTheTop) {
  // warmup_num_steps 0 (from --num_warmup_steps 0 through "auto"): past the built rate, the peak at once.
  const DeepSpeedSchedule warmup{.type = DeepSpeedSchedule::Type::warmup_lr,
                                 .warmup_min_lr = 0.0,
                                 .warmup_max_lr = 3.0,
                                 .warmup_num_steps = 0};
  expect_values(deepspeed_lrs(warmup, 2), {0.0, 3.0});
  const DeepSpeedSchedule decay{.type = DeepSpeedSchedule::Type::warmup_decay_lr,
                                .warmup_min_lr = 1.0,
                                .warmup_max_lr = 3.0,
                                .warmup_num_steps = 0,
                                .total_num_steps = 2};
  expect_values(deepspeed_lrs(decay, 4), {1.0, 3.0, 2.0, 1.0});
}

TEST(DeepSpeedSchedule, CosineProgressIsOneStepAheadAndClamped) {
  const DeepSpeedSchedule s{.type = DeepSpeedSchedule::Type::warmup_cosine_lr,
                            .warmup_num_steps = 4,
                            .total_num_steps = 8,
                            .warmup_log = false,
                            .warmup_min_ratio = 0.2,
                            .cos_min_ratio = 0.1};
  // Built at 0; warmup ratio 0.2 + 0.8 s/4; then progress (s - 3)/4: s = 4 -> 1/4, s >= 7 -> 1 (ratio 0.1),
  // times lr 2.
  const double k1 = (1 + std::cos(std::acos(-1.0) * 0.25)) / 2, k2 = 0.5,
               k3 = (1 + std::cos(std::acos(-1.0) * 0.75)) / 2;
  expect_values(deepspeed_lrs(s, 11, 2.0), {0.0, 0.4, 0.8, 1.2, 1.6, 2 * (0.1 + 0.9 * k1),
                                            2 * (0.1 + 0.9 * k2), 2 * (0.1 + 0.9 * k3), 0.2, 0.2, 0.2});
  // total == warmup: straight to cos_min_ratio after the warmup.
  DeepSpeedSchedule equal = s;
  equal.total_num_steps = 4;
  EXPECT_NEAR(equal.lr_at(5, 2.0), 0.2, 1e-12);
  EXPECT_NEAR(equal.lr_at(4, 2.0), 1.6, 1e-12);
}

}  // namespace
}  // namespace zt::optim
