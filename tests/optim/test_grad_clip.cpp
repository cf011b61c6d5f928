// Global gradient norm and torch's clipping rule; DeepSpeed's combined unscale-and-clip factor.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "optim/grad_clip.h"
#include "runtime/check.h"

namespace zt::optim {
namespace {

TEST(GradClip, NormOfAPythagoreanTriple) {
  const std::vector<float> g = {3.0f, -4.0f};
  EXPECT_EQ(sum_of_squares(g), 25.0);
  EXPECT_EQ(global_l2_norm(g), 5.0);
  EXPECT_EQ(global_l2_norm(std::vector<float>{}), 0.0);
}

TEST(GradClip, SumsManyBlocksExactlyInDouble) {
  // 0.5^2 * 300001 = 75000.25 is exact in double; a float accumulator would have drifted off it.
  const std::vector<float> g(300001, 0.5f);
  EXPECT_EQ(sum_of_squares(g, 1), 75000.25);
  EXPECT_EQ(sum_of_squares(g, 4), 75000.25);
}

TEST(GradClip, NormDoesNotDependOnThreadCount) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> g(250003);
  for (float& x : g) x = dist(rng);
  const double one = sum_of_squares(g, 1);
  EXPECT_EQ(one, sum_of_squares(g, 2));
  EXPECT_EQ(one, sum_of_squares(g, 7));
  EXPECT_NEAR(one, 9.0 * g.size(), 0.02 * 9.0 * g.size());  // E[g^2] = sigma^2
}

TEST(GradClip, ClipsToMaxNormWithTorchsEpsilon) {
  // norm 5, max 1: coef = 1 / (5 + 1e-6), so g becomes (3, -4) / 5.000001, norm just under 1.
  std::vector<float> g = {3.0f, -4.0f};
  EXPECT_EQ(clip_grad_norm(g, 1.0), 5.0);
  EXPECT_FLOAT_EQ(g[0], static_cast<float>(3.0 / 5.000001));
  EXPECT_FLOAT_EQ(g[1], static_cast<float>(-4.0 / 5.000001));
  EXPECT_LT(global_l2_norm(g), 1.0);
  EXPECT_NEAR(global_l2_norm(g), 1.0, 1e-6);
}

TEST(GradClip, NormEqualToMaxStillScalesByTheEpsilon) {
  // coef = 5 / 5.000001 < 1: torch scales even at equality.
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_EQ(clip_grad_norm(g, 5.0), 5.0);
  EXPECT_FLOAT_EQ(g[1], static_cast<float>(4.0 * 5.0 / 5.000001));
  EXPECT_LT(g[1], 4.0f);
}

TEST(GradClip, LeavesSmallGradientsAlone) {
  std::vector<float> g = {0.3f, -0.4f, 0.0f};
  const std::vector<float> before = g;
  EXPECT_NEAR(clip_grad_norm(g, 1.0), 0.5, 1e-7);
  EXPECT_EQ(g, before);  // coef > 1 is not applied: bitwise unchanged
}

TEST(GradClip, NonFiniteNormIsReportedAndGradientsAreKept) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> with_inf = {1.0f, inf, 2.0f};
  const std::vector<float> before_inf = with_inf;
  EXPECT_TRUE(std::isinf(clip_grad_norm(with_inf, 1.0)));
  EXPECT_EQ(with_inf, before_inf);

  std::vector<float> with_nan = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(clip_grad_norm(with_nan, 1.0)));
  EXPECT_EQ(with_nan[0], 1.0f);
  EXPECT_EQ(with_nan[1], 2.0f);

  // A finite float whose square overflows float still has a finite norm in double.
  std::vector<float> huge = {3e37f, 3e37f};
  EXPECT_NEAR(clip_grad_norm(huge, 1.0), 3e37 * std::sqrt(2.0), 1e32);
  EXPECT_NEAR(huge[0], 1.0 / std::sqrt(2.0), 1e-6);
}

TEST(GradClip, Coefficient) {
  EXPECT_DOUBLE_EQ(clip_coefficient(9.0, 3.0), 3.0 / (9.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);  // 1 / 1e-6 capped at 1
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nan(""), 1.0)));
  EXPECT_THROW(clip_coefficient(1.0, 0.0), Error);
  std::vector<float> g = {1.0f};
  EXPECT_THROW(clip_grad_norm(g, -1.0), Error);
}

TEST(GradClip, ScaleInPlace) {
  std::vector<float> g(70001, 2.0f);
  scale_in_place(g, 0.25f, 3);
  for (float x : g) ASSERT_EQ(x, 0.5f);
}

TEST(GradClip, DeepSpeedUnscaleAndClipFactor) {
  // Scaled norm 10240 at loss scale 1024 is an unscaled norm of 10; with max 1 the clip ratio is
  // (10 + 1e-6) / 1, so grads are multiplied by 1 / (1024 * 10.000001).
  EXPECT_DOUBLE_EQ(unscale_and_clip_factor(10240.0, 1024.0, 1.0), 1.0 / (1024.0 * 10.000001));
  // Unscaled norm 0.5 < 1: unscale only.
  EXPECT_DOUBLE_EQ(unscale_and_clip_factor(512.0, 1024.0, 1.0), 1.0 / 1024.0);
  // max_norm 0 disables clipping.
  EXPECT_DOUBLE_EQ(unscale_and_clip_factor(1e9, 1024.0, 0.0), 1.0 / 1024.0);
  EXPECT_THROW(unscale_and_clip_factor(1.0, 0.0, 1.0), Error);
}

}  // namespace
}  // namespace zt::optim
