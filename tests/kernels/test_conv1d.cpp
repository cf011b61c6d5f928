// Conv1d (DeBERTa ConvLayer core): forward against the cross-correlation written as loops with per-item zero
// padding, backward against finite differences, and the gradient conventions.
#include "kernels/conv1d.h"

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

struct ConvCase {
  int batch, length, in, out, kernel;
  std::vector<float> x, w, b, r, y;

  ConvCase(int batch_, int length_, int in_, int out_, int kernel_)
      : batch(batch_),
        length(length_),
        in(in_),
        out(out_),
        kernel(kernel_),
        x(test::random_uniform(batch * length * in, 51)),
        w(test::random_uniform(out * in * kernel, 52)),
        b(test::random_uniform(out, 53)),
        r(test::random_uniform(batch * length * out, 54)),
        y(batch * length * out) {}

  Tensor xt() { return f32_view(x, {batch, length, in}); }
  Tensor wt() { return f32_view(w, {out, in, kernel}); }
  Tensor bt() { return f32_view(b, {out}); }
  Tensor yt() { return f32_view(y, {batch, length, out}); }
  Tensor rt() { return f32_view(r, {batch, length, out}); }
  double loss() {
    conv1d_forward(xt(), wt(), bt(), yt());
    return test::dot(y, r);
  }

  std::vector<float> naive_forward(bool with_bias) const {
    const int pad = (kernel - 1) / 2;
    std::vector<float> ref(batch * length * out);
    for (int bi = 0; bi < batch; ++bi) {
      for (int t = 0; t < length; ++t) {
        for (int o = 0; o < out; ++o) {
          double s = with_bias ? b[o] : 0.0;
          for (int kk = 0; kk < kernel; ++kk) {
            const int src = t + kk - pad;
            if (src < 0 || src >= length) continue;
            for (int c = 0; c < in; ++c) {
              s += static_cast<double>(w[(o * in + c) * kernel + kk]) * x[(bi * length + src) * in + c];
            }
          }
          ref[(bi * length + t) * out + o] = static_cast<float>(s);
        }
      }
    }
    return ref;
  }
};

TEST(Conv1d, ForwardMatchesLoopsWithPerItemPadding) {
  // (batch, length, in, out, kernel): awkward sizes, a length-1 sequence where only the centre tap
  // reads data, and kernel 1 and 5 besides DeBERTa's 3.
  const int cases[][5] = {
      {3, 5, 4, 7, 3}, {2, 1, 3, 2, 3}, {2, 6, 5, 3, 1}, {2, 7, 3, 4, 5}, {1, 2, 3, 3, 5}};
  for (const auto& p : cases) {
    ConvCase c(p[0], p[1], p[2], p[3], p[4]);
    SCOPED_TRACE(testing::Message() << "B=" << c.batch << " L=" << c.length << " k=" << c.kernel);
    for (bool with_bias : {true, false}) {
      std::fill(c.y.begin(), c.y.end(), 123.0f);
      conv1d_forward(c.xt(), c.wt(), with_bias ? c.bt() : Tensor{}, c.yt());
      EXPECT_TRUE(test::all_close("y", c.y, c.naive_forward(with_bias), test::tolerance_for(DType::f32)));
    }
  }
}

TEST(Conv1d, BackwardMatchesFiniteDifferences) {
  for (int kernel : {3, 5}) {
    ConvCase c(2, 5, 7, 3, kernel);
    SCOPED_TRACE(kernel);
    std::vector<float> dx(c.x.size(), 5.0f), dw(c.w.size(), 0.0f), db(c.b.size(), 0.0f);
    conv1d_backward(c.rt(), c.xt(), c.wt(), f32_view(dx, {c.batch, c.length, c.in}),
                    f32_view(dw, {c.out, c.in, c.kernel}), f32_view(db, {c.out}));
    auto loss = [&] { return c.loss(); };
    EXPECT_TRUE(test::check_gradient("dx", c.x, dx, loss, {.max_elements = 0}));
    EXPECT_TRUE(test::check_gradient("dW", c.w, dw, loss, {.max_elements = 0}));
    EXPECT_TRUE(test::check_gradient("db", c.b, db, loss, {.max_elements = 0}));
  }
}

TEST(Conv1d, GradientConventions) {
  ConvCase c(2, 4, 3, 5, 3);
  const Shape x_shape{c.batch, c.length, c.in}, w_shape{c.out, c.in, c.kernel};
  std::vector<float> dx(c.x.size()), dw(c.w.size(), 0.0f), db(c.b.size(), 0.0f);
  conv1d_backward(c.rt(), c.xt(), c.wt(), f32_view(dx, x_shape), f32_view(dw, w_shape),
                  f32_view(db, {c.out}));

  std::vector<float> dx_acc(dx.size(), 1.0f), dw_acc(dw.size(), 2.0f), db_acc(db.size(), 3.0f);
  conv1d_backward(c.rt(), c.xt(), c.wt(), f32_view(dx_acc, x_shape), f32_view(dw_acc, w_shape),
                  f32_view(db_acc, {c.out}), /*accumulate_dx=*/true);
  std::vector<float> dx_want = dx, dw_want = dw, db_want = db;
  for (float& v : dx_want) v += 1.0f;
  for (float& v : dw_want) v += 2.0f;
  for (float& v : db_want) v += 3.0f;
  EXPECT_TRUE(test::all_close("dx accumulated", dx_acc, dx_want, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("dW accumulated", dw_acc, dw_want, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("db accumulated", db_acc, db_want, test::tolerance_for(DType::f32)));

  std::vector<float> dx_only(dx.size(), -7.0f);
  conv1d_backward(c.rt(), c.xt(), c.wt(), f32_view(dx_only, x_shape), Tensor{}, Tensor{});
  EXPECT_TRUE(test::all_close("dx overwritten", dx_only, dx, {0, 0}));
}

TEST(Conv1d, RejectsBadShapes) {
  ConvCase c(2, 4, 3, 5, 3);
  std::vector<float> w_even(5 * 3 * 2);
  EXPECT_THROW(conv1d_forward(c.xt(), f32_view(w_even, {5, 3, 2}), c.bt(), c.yt()), Error);
  std::vector<float> w_in(5 * 4 * 3);
  EXPECT_THROW(conv1d_forward(c.xt(), f32_view(w_in, {5, 4, 3}), c.bt(), c.yt()), Error);
}

// The backward's gradient checks are linear's (kernels/arg_checks.h): a dbias of the wrong length, a dweight
// in another shape than the weight.
TEST(Conv1d, BackwardRejectsBadGradients) {
  ConvCase c(2, 4, 3, 5, 3);
  std::vector<float> dw(5 * 3 * 3), db(5), db_bad(4), dw_bad(5 * 9);
  EXPECT_NO_THROW(
      conv1d_backward(c.rt(), c.xt(), c.wt(), Tensor(), f32_view(dw, {5, 3, 3}), f32_view(db, {5})));
  EXPECT_THROW(
      conv1d_backward(c.rt(), c.xt(), c.wt(), Tensor(), f32_view(dw, {5, 3, 3}), f32_view(db_bad, {4})),
      Error);
  EXPECT_THROW(conv1d_backward(c.rt(), c.xt(), c.wt(), Tensor(), f32_view(dw_bad, {5, 9}), f32_view(db, {5})),
               Error);
}

}  // namespace
}  // namespace zt::kernels
