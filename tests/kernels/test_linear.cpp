// Linear: forward against plain loops (with and without bias, 3-D input), backward against finite
// differences, and the gradient conventions (dx overwrite / accumulate / skip, dW and db accumulate).
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;

// x viewed as [2, 3, in]: 6 rows, awkward feature counts.
struct LinearCase {
  static constexpr int kBatch = 2, kSeq = 3, kRows = kBatch * kSeq, kIn = 5, kOut = 7;
  std::vector<float> x = test::random_uniform(kRows * kIn, 41);
  std::vector<float> w = test::random_uniform(kOut * kIn, 42);
  std::vector<float> b = test::random_uniform(kOut, 43);
  std::vector<float> r = test::random_uniform(kRows * kOut, 44);
  std::vector<float> y = std::vector<float>(kRows * kOut);

  Tensor xt() { return f32_view(x, {kBatch, kSeq, kIn}); }
  Tensor wt() { return f32_view(w, {kOut, kIn}); }
  Tensor bt() { return f32_view(b, {kOut}); }
  Tensor yt() { return f32_view(y, {kBatch, kSeq, kOut}); }
  Tensor rt() { return f32_view(r, {kBatch, kSeq, kOut}); }
  double loss() {
    linear_forward(xt(), wt(), bt(), yt());
    return test::dot(y, r);
  }
};

TEST(Linear, ForwardMatchesLoops) {
  LinearCase c;
  using C = LinearCase;
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias);
    linear_forward(c.xt(), c.wt(), with_bias ? c.bt() : Tensor{}, c.yt());
    std::vector<float> ref(C::kRows * C::kOut);
    for (int i = 0; i < C::kRows; ++i) {
      for (int o = 0; o < C::kOut; ++o) {
        double s = with_bias ? c.b[o] : 0.0;
        for (int k = 0; k < C::kIn; ++k) s += static_cast<double>(c.x[i * C::kIn + k]) * c.w[o * C::kIn + k];
        ref[i * C::kOut + o] = static_cast<float>(s);
      }
    }
    EXPECT_TRUE(test::all_close("y", c.y, ref, test::tolerance_for(DType::f32)));
  }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  LinearCase c;
  using C = LinearCase;
  std::vector<float> dx(C::kRows * C::kIn, 9.0f), dw(C::kOut * C::kIn, 0.0f), db(C::kOut, 0.0f);
  linear_backward(c.rt(), c.xt(), c.wt(), f32_view(dx, {C::kBatch, C::kSeq, C::kIn}),
                  f32_view(dw, {C::kOut, C::kIn}), f32_view(db, {C::kOut}));
  auto loss = [&] { return c.loss(); };
  EXPECT_TRUE(test::check_gradient("dx", c.x, dx, loss));
  EXPECT_TRUE(test::check_gradient("dW", c.w, dw, loss));
  EXPECT_TRUE(test::check_gradient("db", c.b, db, loss));
}

TEST(Linear, GradientConventions) {
  LinearCase c;
  using C = LinearCase;
  const Shape x_shape{C::kBatch, C::kSeq, C::kIn};
  std::vector<float> dx(C::kRows * C::kIn), dw(C::kOut * C::kIn, 0.0f), db(C::kOut, 0.0f);
  linear_backward(c.rt(), c.xt(), c.wt(), f32_view(dx, x_shape), f32_view(dw, {C::kOut, C::kIn}),
                  f32_view(db, {C::kOut}));

  // accumulate_dx adds onto what dx holds; dW and db always add.
  std::vector<float> dx_acc(dx.size(), 1.5f), dw_acc(dw.size(), -2.0f), db_acc(db.size(), 0.25f);
  linear_backward(c.rt(), c.xt(), c.wt(), f32_view(dx_acc, x_shape), f32_view(dw_acc, {C::kOut, C::kIn}),
                  f32_view(db_acc, {C::kOut}), /*accumulate_dx=*/true);
  std::vector<float> dx_want = dx, dw_want = dw, db_want = db;
  for (float& v : dx_want) v += 1.5f;
  for (float& v : dw_want) v -= 2.0f;
  for (float& v : db_want) v += 0.25f;
  EXPECT_TRUE(test::all_close("dx accumulated", dx_acc, dx_want, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("dW accumulated", dw_acc, dw_want, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("db accumulated", db_acc, db_want, test::tolerance_for(DType::f32)));

  // Skipping dx and db still produces dW.
  std::vector<float> dw_only(dw.size(), 0.0f);
  linear_backward(c.rt(), c.xt(), c.wt(), Tensor{}, f32_view(dw_only, {C::kOut, C::kIn}), Tensor{});
  EXPECT_TRUE(test::all_close("dW without dx", dw_only, dw, {0, 0}));

  // Overwrite mode ignores what dx held.
  std::vector<float> dx_over(dx.size(), 100.0f);
  linear_backward(c.rt(), c.xt(), c.wt(), f32_view(dx_over, x_shape), Tensor{}, Tensor{});
  EXPECT_TRUE(test::all_close("dx overwritten", dx_over, dx, {0, 0}));

  // GradWrite::overwrite writes dW and db over whatever they held (NaN here: read, it would stay NaN), bit
  // for bit what accumulating onto zeros gives.
  std::vector<float> dw_written(dw.size(), std::numeric_limits<float>::quiet_NaN()),
      db_written(db.size(), std::numeric_limits<float>::quiet_NaN());
  linear_backward(c.rt(), c.xt(), c.wt(), Tensor{}, f32_view(dw_written, {C::kOut, C::kIn}),
                  f32_view(db_written, {C::kOut}), false, GradWrite::overwrite);
  EXPECT_TRUE(test::all_close("dW written", dw_written, dw, {0, 0}));
  EXPECT_TRUE(test::all_close("db written", db_written, db, {0, 0}));
}

TEST(Linear, RejectsMismatchedFeatures) {
  LinearCase c;
  std::vector<float> y_bad(LinearCase::kRows * 6);
  EXPECT_THROW(linear_forward(c.xt(), c.wt(), c.bt(), f32_view(y_bad, {2, 3, 6})), Error);
  std::vector<float> w_bad(7 * 4);
  EXPECT_THROW(linear_forward(c.xt(), f32_view(w_bad, {7, 4}), c.bt(), c.yt()), Error);
  std::vector<float> y_rows(4 * 7);
  EXPECT_THROW(linear_forward(c.xt(), c.wt(), c.bt(), f32_view(y_rows, {4, 7})), Error);
}

// The backward's gradients (kernels/arg_checks.h check_weight_layer_grads): dx in x's shape and not over dy,
// dweight in the weight's, dbias [out]; each message names the op and the argument.
TEST(Linear, BackwardRejectsBadGradients) {
  using C = LinearCase;
  LinearCase c;
  std::vector<float> dx(C::kRows * C::kIn), dw(C::kOut * C::kIn), db(C::kOut), dx_bad(dx), dw_bad(dw),
      db_bad(C::kOut + 1);
  const Tensor dxt = f32_view(dx, {C::kBatch, C::kSeq, C::kIn}), dwt = f32_view(dw, {C::kOut, C::kIn});
  const Tensor dbt = f32_view(db, {C::kOut});
  EXPECT_NO_THROW(linear_backward(c.rt(), c.xt(), c.wt(), dxt, dwt, dbt));
  const auto message = [&](const Tensor& gx, const Tensor& gw, const Tensor& gb) {
    try {
      linear_backward(c.rt(), c.xt(), c.wt(), gx, gw, gb);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto names = [](const std::string& got, const std::string& what) {
    return got.find(what) != std::string::npos
               ? ::testing::AssertionSuccess()
               : ::testing::AssertionFailure() << "'" << got << "' lacks " << what;
  };
  EXPECT_TRUE(names(message(f32_view(dx_bad, {C::kRows, C::kIn}), dwt, dbt), "linear_backward: dx"));
  EXPECT_TRUE(names(message(dxt, f32_view(dw_bad, {C::kIn, C::kOut}), dbt), "linear_backward: dweight"));
  EXPECT_TRUE(names(message(dxt, dwt, f32_view(db_bad, {C::kOut + 1})), "linear_backward: dbias"));
  // dx over dy: same size when in == out, so a square layer.
  std::vector<float> sq_x(C::kRows * C::kOut), sq_w(C::kOut * C::kOut), sq_dy(C::kRows * C::kOut);
  const Tensor dy_sq = f32_view(sq_dy, {C::kRows, C::kOut});
  EXPECT_THROW(linear_backward(dy_sq, f32_view(sq_x, {C::kRows, C::kOut}), f32_view(sq_w, {C::kOut, C::kOut}),
                               dy_sq, Tensor(), Tensor()),
               Error);
}

}  // namespace
}  // namespace zt::kernels
