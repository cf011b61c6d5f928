// Cross-entropy with ignored labels: forward against the textbook formula, stability on large logits,
// the all-ignored case, backward against finite differences, and label validation.
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;
using test::i64_view;

constexpr int kRows = 5, kClasses = 3;

float run_forward(std::vector<float>& z, std::vector<int64_t>& y, int rows, int classes) {
  std::vector<float> loss(1, -1.0f);
  cross_entropy_forward(f32_view(z, {rows, classes}), i64_view(y, {rows}), f32_view(loss, {1}));
  return loss[0];
}

TEST(CrossEntropy, ForwardMatchesTextbookFormulaSkippingIgnoredRows) {
  std::vector<float> z = test::random_uniform(kRows * kClasses, 71, -3.0f, 3.0f);
  std::vector<int64_t> y{2, -100, 0, 1, -1};
  // -log( exp(z_y) / sum_c exp(z_c) ), averaged over the three kept rows.
  long double total = 0;
  for (int n : {0, 2, 3}) {
    long double denom = 0;
    for (int c = 0; c < kClasses; ++c) denom += std::exp(static_cast<long double>(z[n * kClasses + c]));
    total += -std::log(std::exp(static_cast<long double>(z[n * kClasses + y[n]])) / denom);
  }
  EXPECT_NEAR(run_forward(z, y, kRows, kClasses), static_cast<double>(total / 3), 1e-6);
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  // softmax([1000, 1000 + ln 3]) = [1/4, 3/4]: loss of label 0 is ln 4, of label 1 is ln(4/3).
  std::vector<float> z{1000.0f, 1000.0f + std::log(3.0f), -1000.0f, -1000.0f + std::log(3.0f)};
  std::vector<int64_t> y{0, 1};
  EXPECT_NEAR(run_forward(z, y, 2, 2), 0.5 * (std::log(4.0) + std::log(4.0 / 3.0)), 1e-4);
  std::vector<float> dz(4);
  cross_entropy_backward(f32_view(z, {2, 2}), i64_view(y, {2}), 1.0f, f32_view(dz, {2, 2}));
  const std::vector<float> dz_want{(0.25f - 1) / 2, 0.75f / 2, 0.25f / 2, (0.75f - 1) / 2};
  EXPECT_TRUE(test::all_close("dz", dz, dz_want, {1e-4, 1e-4}));
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndGradient) {
  std::vector<float> z = test::random_uniform(kRows * kClasses, 72);
  std::vector<int64_t> y(kRows, -100);
  EXPECT_EQ(run_forward(z, y, kRows, kClasses), 0.0f);
  std::vector<float> dz(z.size(), 5.0f);
  cross_entropy_backward(f32_view(z, {kRows, kClasses}), i64_view(y, {kRows}), 1.0f,
                         f32_view(dz, {kRows, kClasses}));
  for (float v : dz) EXPECT_EQ(v, 0.0f);
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  std::vector<float> z = test::random_uniform(kRows * kClasses, 73, -2.0f, 2.0f);
  std::vector<int64_t> y{1, 2, -100, 0, 2};
  const float dloss = 1.7f;
  std::vector<float> dz(z.size(), 9.0f);
  cross_entropy_backward(f32_view(z, {kRows, kClasses}), i64_view(y, {kRows}), dloss,
                         f32_view(dz, {kRows, kClasses}));
  for (int c = 0; c < kClasses; ++c) EXPECT_EQ(dz[2 * kClasses + c], 0.0f) << "ignored row, class " << c;
  auto loss = [&] { return static_cast<double>(dloss) * run_forward(z, y, kRows, kClasses); };
  EXPECT_TRUE(test::check_gradient("dlogits", z, dz, loss, {.step = 1e-2, .atol = 5e-4, .max_elements = 0}));
}

TEST(CrossEntropy, RejectsLabelsAtOrAboveClassCount) {
  std::vector<float> z(kRows * kClasses, 0.0f);
  std::vector<int64_t> y{0, 1, 3, 0, 0};
  std::vector<float> loss(1);
  EXPECT_THROW(
      cross_entropy_forward(f32_view(z, {kRows, kClasses}), i64_view(y, {kRows}), f32_view(loss, {1})),
      Error);
}

}  // namespace
}  // namespace zt::kernels
