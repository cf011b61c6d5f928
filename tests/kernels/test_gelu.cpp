// GELU (erf form): forward against the definition evaluated in double, backward against finite differences.
#include "kernels/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/linear.h"
#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;

TEST(Gelu, ForwardMatchesErfDefinition) {
  std::vector<float> x = test::random_uniform(35, 21, -6.0f, 6.0f);
  x[0] = 0.0f;
  x[1] = -10.0f;  // deep negative tail: gelu -> 0 from below
  x[2] = 10.0f;   // gelu -> x
  std::vector<float> y(x.size()), y_ref(x.size());
  gelu_forward(f32_view(x, {5, 7}), f32_view(y, {5, 7}));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    y_ref[i] = static_cast<float>(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
  EXPECT_TRUE(test::all_close("gelu", y, y_ref, {1e-6, 1e-5}));
}

TEST(Gelu, ForwardIsNotTheTanhApproximation) {
  std::vector<float> x{1.5f}, y(1);
  gelu_forward(f32_view(x, {1}), f32_view(y, {1}));
  const double tanh_form =
      0.5 * 1.5 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (1.5 + 0.044715 * 1.5 * 1.5 * 1.5)));
  const double erf_form = 0.5 * 1.5 * (1 + std::erf(1.5 / std::sqrt(2.0)));
  ASSERT_GT(std::abs(tanh_form - erf_form), 1e-4);
  EXPECT_NEAR(y[0], erf_form, 1e-6);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  std::vector<float> x = test::random_uniform(35, 22, -4.0f, 4.0f);
  const std::vector<float> r = test::random_uniform(35, 23);
  std::vector<float> y(x.size()), dy = r, dx(x.size(), 7.0f);
  gelu_backward(f32_view(dy, {5, 7}), f32_view(x, {5, 7}), f32_view(dx, {5, 7}));
  auto loss = [&] {
    gelu_forward(f32_view(x, {5, 7}), f32_view(y, {5, 7}));
    return test::dot(y, r);
  };
  EXPECT_TRUE(test::check_gradient("dx", x, dx, loss, {.step = 1e-3}));
}

TEST(Gelu, InPlaceForwardAndBackward) {
  std::vector<float> x = test::random_uniform(12, 24, -3.0f, 3.0f);
  std::vector<float> y(12), dy = test::random_uniform(12, 25), dx(12);
  gelu_forward(f32_view(x, {12}), f32_view(y, {12}));
  gelu_backward(f32_view(dy, {12}), f32_view(x, {12}), f32_view(dx, {12}));
  std::vector<float> x_inplace = x, dy_inplace = dy;
  gelu_forward(f32_view(x_inplace, {12}), f32_view(x_inplace, {12}));
  gelu_backward(f32_view(dy_inplace, {12}), f32_view(x, {12}), f32_view(dy_inplace, {12}));
  EXPECT_TRUE(test::all_close("y in place", x_inplace, y, {0, 0}));
  EXPECT_TRUE(test::all_close("dx in place", dy_inplace, dx, {0, 0}));
}

TEST(Gelu, RecomputeAndBackwardEqualsForwardThenBackward) {
  std::vector<float> x = test::random_uniform(35, 26, -4.0f, 4.0f);
  std::vector<float> dy = test::random_uniform(35, 27);
  std::vector<float> y_ref(35), dx_ref(35);
  gelu_forward(f32_view(x, {5, 7}), f32_view(y_ref, {5, 7}));
  gelu_backward(f32_view(dy, {5, 7}), f32_view(x, {5, 7}), f32_view(dx_ref, {5, 7}));
  std::vector<float> y(35, 3.0f), d = dy;  // dx written over dy, as the FFN backward does
  gelu_recompute_and_backward(f32_view(d, {5, 7}), f32_view(x, {5, 7}), f32_view(y, {5, 7}),
                              f32_view(d, {5, 7}));
  EXPECT_TRUE(test::all_close("y", y, y_ref, {0, 0}));
  EXPECT_TRUE(test::all_close("dx", d, dx_ref, {0, 0}));
  // y over x would destroy the input the gradient still needs.
  EXPECT_THROW(gelu_recompute_and_backward(f32_view(d, {5, 7}), f32_view(x, {5, 7}), f32_view(x, {5, 7}),
                                           f32_view(d, {5, 7})),
               Error);
}

// With the column sums of dx: the bias gradient linear_backward computes from that dx, accumulated and
// written, bit for bit; a sum buffer of the wrong width is refused.
TEST(Gelu, RecomputeAndBackwardSumsDxLikeTheLinearBiasGradient) {
  const Shape shape{5, 7}, one_feature{5, 1};
  std::vector<float> x = test::random_uniform(35, 28, -4.0f, 4.0f), dy = test::random_uniform(35, 29);
  std::vector<float> y(35), dx(35), ones(5, 1.0f), weight(7, 1.0f);
  for (GradWrite write : {GradWrite::accumulate, GradWrite::overwrite}) {
    std::vector<float> sums(7, 0.25f), reference(7, 0.25f);
    gelu_recompute_and_backward(f32_view(dy, shape), f32_view(x, shape), f32_view(y, shape),
                                f32_view(dx, shape), f32_view(sums, {7}), write);
    linear_backward(f32_view(dx, shape), f32_view(ones, one_feature), f32_view(weight, {7, 1}), Tensor(),
                    Tensor(), f32_view(reference, {7}), false, write);
    EXPECT_TRUE(test::all_close("column sums", sums, reference, {0, 0}));
    EXPECT_NE(sums, std::vector<float>(7, 0.25f));  // written
  }
  std::vector<float> wrong(8);
  EXPECT_THROW(gelu_recompute_and_backward(f32_view(dy, shape), f32_view(x, shape), f32_view(y, shape),
                                           f32_view(dx, shape), f32_view(wrong, {8})),
               Error);
}

TEST(Gelu, RejectsMismatchedShapes) {
  std::vector<float> x(12), y(12);
  EXPECT_THROW(gelu_forward(f32_view(x, {3, 4}), f32_view(y, {4, 3})), Error);
}

}  // namespace
}  // namespace zt::kernels
