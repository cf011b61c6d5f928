// Elementwise helpers: each against plain loops on awkward shapes, backwards against finite differences.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;
using test::i64_view;

constexpr int kB = 2, kL = 3, kD = 5, kN = kB * kL * kD;
const Shape kShape{kB, kL, kD};

TEST(Elementwise, AddAndAddInplace) {
  std::vector<float> a = test::random_uniform(kN, 81), b = test::random_uniform(kN, 82), out(kN), ref(kN);
  for (int i = 0; i < kN; ++i) ref[i] = a[i] + b[i];
  add(f32_view(a, kShape), f32_view(b, kShape), f32_view(out, kShape));
  EXPECT_TRUE(test::all_close("a + b", out, ref, {0, 0}));
  add_inplace(f32_view(a, kShape), f32_view(b, kShape));
  EXPECT_TRUE(test::all_close("a += b", a, ref, {0, 0}));
  std::vector<float> wrong(kN);
  EXPECT_THROW(add(f32_view(a, kShape), f32_view(wrong, {kB * kL, kD}), f32_view(out, kShape)), Error);
}

TEST(Elementwise, ScaleAndItsGradient) {
  std::vector<float> x = test::random_uniform(kN, 83), y(kN), ref(kN), r = test::random_uniform(kN, 84);
  const float alpha = -0.37f;
  for (int i = 0; i < kN; ++i) ref[i] = alpha * x[i];
  scale(f32_view(x, kShape), alpha, f32_view(y, kShape));
  EXPECT_TRUE(test::all_close("alpha x", y, ref, {0, 0}));
  std::vector<float> dx(kN);
  scale(f32_view(r, kShape), alpha, f32_view(dx, kShape));
  auto loss = [&] {
    scale(f32_view(x, kShape), alpha, f32_view(y, kShape));
    return test::dot(y, r);
  };
  EXPECT_TRUE(test::check_gradient("dx", x, dx, loss));
}

TEST(Elementwise, CopyAndFill) {
  std::vector<float> src = test::random_uniform(kN, 85), dst(kN, 0.0f);
  copy(f32_view(src, kShape), f32_view(dst, kShape));
  EXPECT_TRUE(test::all_close("copy", dst, src, {0, 0}));
  fill(f32_view(dst, kShape), 2.5f);
  for (float v : dst) EXPECT_EQ(v, 2.5f);
}

TEST(Elementwise, MaskRowsWithFloatAndIntegerMasks) {
  std::vector<float> x = test::random_uniform(kN, 86), out(kN), ref(kN);
  std::vector<int64_t> mask_i{1, 1, 0, 1, 0, 0};
  std::vector<float> mask_f{1, 1, 0, 1, 0, 0};
  for (int r = 0; r < kB * kL; ++r) {
    for (int j = 0; j < kD; ++j) ref[r * kD + j] = mask_i[r] ? x[r * kD + j] : 0.0f;
  }
  mask_rows_forward(f32_view(x, kShape), i64_view(mask_i, {kB, kL}), f32_view(out, kShape));
  EXPECT_TRUE(test::all_close("masked (i64)", out, ref, {0, 0}));
  std::fill(out.begin(), out.end(), 9.0f);
  mask_rows_forward(f32_view(x, kShape), f32_view(mask_f, {kB, kL}), f32_view(out, kShape));
  EXPECT_TRUE(test::all_close("masked (f32)", out, ref, {0, 0}));

  std::vector<float> r = test::random_uniform(kN, 87), dx(kN, 4.0f);
  mask_rows_backward(f32_view(r, kShape), i64_view(mask_i, {kB, kL}), f32_view(dx, kShape));
  auto loss = [&] {
    mask_rows_forward(f32_view(x, kShape), i64_view(mask_i, {kB, kL}), f32_view(out, kShape));
    return test::dot(out, r);
  };
  EXPECT_TRUE(test::check_gradient("dx", x, dx, loss, {.max_elements = 0}));

  std::vector<int64_t> mask_wrong(kB * kL);
  EXPECT_THROW(mask_rows_forward(f32_view(x, kShape), i64_view(mask_wrong, {kL, kB}), f32_view(out, kShape)),
               Error);
}

TEST(Elementwise, SelectTokenAndItsGradient) {
  const int token = 1;
  std::vector<float> x = test::random_uniform(kN, 88), out(kB * kD), ref(kB * kD);
  for (int b = 0; b < kB; ++b) {
    for (int j = 0; j < kD; ++j) ref[b * kD + j] = x[(b * kL + token) * kD + j];
  }
  select_token_forward(f32_view(x, kShape), token, f32_view(out, {kB, kD}));
  EXPECT_TRUE(test::all_close("selected rows", out, ref, {0, 0}));

  std::vector<float> r = test::random_uniform(kB * kD, 89), dx(kN, 3.0f);
  select_token_backward(f32_view(r, {kB, kD}), token, f32_view(dx, kShape));
  auto loss = [&] {
    select_token_forward(f32_view(x, kShape), token, f32_view(out, {kB, kD}));
    return test::dot(out, r);
  };
  EXPECT_TRUE(test::check_gradient("dx", x, dx, loss, {.max_elements = 0}));
  EXPECT_THROW(select_token_forward(f32_view(x, kShape), kL, f32_view(out, {kB, kD})), Error);
}

}  // namespace
}  // namespace zt::kernels
