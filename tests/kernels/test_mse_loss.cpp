// Mean squared error of the regression head: forward against the formula, ignored (NaN) rows, the
// all-ignored case and the backward against finite differences.
#include "kernels/mse_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

float run_forward(std::vector<float>& z, std::vector<float>& y) {
  const auto rows = static_cast<int64_t>(y.size());
  std::vector<float> loss(1, -1.0f);
  mse_loss_forward(f32_view(z, {rows, 1}), f32_view(y, {rows}), f32_view(loss, {1}));
  return loss[0];
}

TEST(MseLoss, ForwardIsTheMeanSquaredErrorOverKeptRows) {
  std::vector<float> z{1.0f, 2.0f, -1.0f, 4.0f};
  std::vector<float> y{0.5f, kNan, 1.0f, 4.0f};
  // (0.25 + 4 + 0) / 3
  EXPECT_FLOAT_EQ(run_forward(z, y), 4.25f / 3.0f);
  std::vector<float> all{kNan, kNan, kNan, kNan};
  EXPECT_EQ(run_forward(z, all), 0.0f);
}

TEST(MseLoss, BackwardMatchesFiniteDifferencesAndZeroesIgnoredRows) {
  std::vector<float> z = test::random_uniform(6, 91, -2.0f, 2.0f);
  std::vector<float> y = test::random_uniform(6, 92, 0.0f, 5.0f);
  y[3] = kNan;
  const float dloss = 1.3f;
  std::vector<float> dz(z.size(), 9.0f);
  mse_loss_backward(f32_view(z, {6, 1}), f32_view(y, {6}), dloss, f32_view(dz, {6, 1}));
  EXPECT_EQ(dz[3], 0.0f);
  EXPECT_FLOAT_EQ(dz[0], dloss * 2.0f * (z[0] - y[0]) / 5.0f);
  auto loss = [&] { return static_cast<double>(dloss) * run_forward(z, y); };
  EXPECT_TRUE(
      test::check_gradient("dpredictions", z, dz, loss, {.step = 1e-2, .atol = 5e-4, .max_elements = 0}));
}

TEST(MseLoss, RejectsPredictionsWithMoreThanOneColumn) {
  std::vector<float> z(4), y(2), loss(1);
  EXPECT_THROW(mse_loss_forward(f32_view(z, {2, 2}), f32_view(y, {2}), f32_view(loss, {1})), Error);
}

}  // namespace
}  // namespace zt::kernels
