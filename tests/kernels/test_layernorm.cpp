// LayerNorm: forward against a plain-loop formula (large-mean rows, eps 1e-7), backward against finite
// differences, accumulation into dgamma/dbeta, in-place dx, and argument errors; the fused dropout + residual
// + LayerNorm forward against the three ops in turn, bit for bit.
#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/elementwise.h"
#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;

constexpr float kEps = 1e-7f;

// Per-row normalization straight from the definition: y = gamma * (x - mu) / sqrt(var + eps) + beta.
void naive_layernorm(const std::vector<float>& x, const std::vector<float>& gamma,
                     const std::vector<float>& beta, int rows, int dim, std::vector<float>& y,
                     std::vector<float>& mean, std::vector<float>& rstd) {
  for (int r = 0; r < rows; ++r) {
    long double mu = 0;
    for (int j = 0; j < dim; ++j) mu += x[r * dim + j];
    mu /= dim;
    long double var = 0;
    for (int j = 0; j < dim; ++j) var += (x[r * dim + j] - mu) * (x[r * dim + j] - mu);
    var /= dim;
    const long double inv = 1.0L / std::sqrt(var + kEps);
    for (int j = 0; j < dim; ++j) {
      y[r * dim + j] = static_cast<float>(gamma[j] * (x[r * dim + j] - mu) * inv + beta[j]);
    }
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(inv);
  }
}

TEST(LayerNorm, ForwardMatchesDefinitionOnLargeMeanRows) {
  const int rows = 6, dim = 7;  // viewed as [2, 3, 7]: leading dimensions flatten into rows
  std::vector<float> x = test::random_uniform(rows * dim, 1, -1.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < dim; ++j) x[r * dim + j] += 1000.0f * static_cast<float>(r - 2);
  }
  std::vector<float> gamma = test::random_uniform(dim, 2, 0.5f, 1.5f);
  std::vector<float> beta = test::random_uniform(dim, 3);
  std::vector<float> y(rows * dim), mean(rows), rstd(rows);
  layernorm_forward(f32_view(x, {2, 3, dim}), f32_view(gamma, {dim}), f32_view(beta, {dim}), kEps,
                    f32_view(y, {2, 3, dim}), f32_view(mean, {2, 3}), f32_view(rstd, {2, 3}));

  std::vector<float> y_ref(rows * dim), mean_ref(rows), rstd_ref(rows);
  naive_layernorm(x, gamma, beta, rows, dim, y_ref, mean_ref, rstd_ref);
  // |x| ~ 3000 holds ~2e-4 of absolute rounding, i.e. ~4e-4 relative to the unit spread after centering.
  EXPECT_TRUE(test::all_close("y", y, y_ref, {1e-5, 1e-5}));
  EXPECT_TRUE(test::all_close("mean", mean, mean_ref, {1e-6, 1e-6}));
  EXPECT_TRUE(test::all_close("rstd", rstd, rstd_ref, {1e-6, 1e-5}));
}

TEST(LayerNorm, ConstantRowIsFiniteWithTinyEps) {
  const int dim = 5;
  std::vector<float> x(dim, 3.25f), gamma(dim, 1.0f), beta(dim, 0.5f), y(dim), mean(1), rstd(1);
  layernorm_forward(f32_view(x, {1, dim}), f32_view(gamma, {dim}), f32_view(beta, {dim}), kEps,
                    f32_view(y, {1, dim}), f32_view(mean, {1}), f32_view(rstd, {1}));
  for (float v : y) EXPECT_EQ(v, 0.5f);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(1e-7), 1.0);
}

struct LayerNormCase {
  int rows = 5, dim = 7;
  std::vector<float> x, gamma, beta, r;
  std::vector<float> y, mean, rstd;

  LayerNormCase(float offset)
      : x(test::random_uniform(rows * dim, 11, -2.0f, 2.0f)),
        gamma(test::random_uniform(dim, 12, 0.5f, 1.5f)),
        beta(test::random_uniform(dim, 13)),
        r(test::random_uniform(rows * dim, 14)),
        y(rows * dim),
        mean(rows),
        rstd(rows) {
    for (float& v : x) v += offset;
  }
  void forward() {
    layernorm_forward(f32_view(x, {rows, dim}), f32_view(gamma, {dim}), f32_view(beta, {dim}), kEps,
                      f32_view(y, {rows, dim}), f32_view(mean, {rows}), f32_view(rstd, {rows}));
  }
  double loss() {
    forward();
    return test::dot(y, r);
  }
  void backward(std::vector<float>& dy, std::vector<float>& dx, std::vector<float>& dgamma,
                std::vector<float>& dbeta) {
    forward();
    layernorm_backward(f32_view(dy, {rows, dim}), f32_view(x, {rows, dim}), f32_view(gamma, {dim}),
                       f32_view(mean, {rows}), f32_view(rstd, {rows}), f32_view(dx, {rows, dim}),
                       f32_view(dgamma, {dim}), f32_view(dbeta, {dim}));
  }
};

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for (float offset : {0.0f, 50.0f}) {
    SCOPED_TRACE(offset);
    LayerNormCase c(offset);
    std::vector<float> dy = c.r, dx(c.x.size(), 123.0f), dgamma(c.dim, 0.0f), dbeta(c.dim, 0.0f);
    c.backward(dy, dx, dgamma, dbeta);
    auto loss = [&] { return c.loss(); };
    EXPECT_TRUE(test::check_gradient("dx", c.x, dx, loss));
    EXPECT_TRUE(test::check_gradient("dgamma", c.gamma, dgamma, loss));
    EXPECT_TRUE(test::check_gradient("dbeta", c.beta, dbeta, loss));
  }
}

TEST(LayerNorm, BackwardAccumulatesParametersAndOverwritesDx) {
  LayerNormCase c(0.0f);
  std::vector<float> dy = c.r, dx(c.x.size()), dgamma(c.dim, 0.0f), dbeta(c.dim, 0.0f);
  c.backward(dy, dx, dgamma, dbeta);
  const std::vector<float> dx_once = dx, dgamma_once = dgamma, dbeta_once = dbeta;
  c.backward(dy, dx, dgamma, dbeta);
  std::vector<float> dgamma_twice(c.dim), dbeta_twice(c.dim);
  for (int j = 0; j < c.dim; ++j) {
    dgamma_twice[j] = 2 * dgamma_once[j];
    dbeta_twice[j] = 2 * dbeta_once[j];
  }
  EXPECT_TRUE(test::all_close("dx (second call)", dx, dx_once, {0, 0}));
  EXPECT_TRUE(test::all_close("dgamma (two calls)", dgamma, dgamma_twice, {1e-6, 1e-6}));
  EXPECT_TRUE(test::all_close("dbeta (two calls)", dbeta, dbeta_twice, {1e-6, 1e-6}));
}

// GradWrite::overwrite: dgamma and dbeta written over what they held (NaN: a read would keep it), bit for bit
// the accumulation onto zeros; dx as always.
TEST(LayerNorm, BackwardWritesParametersWhenAsked) {
  LayerNormCase c(0.0f);
  std::vector<float> dy = c.r, dx(c.x.size()), dgamma(c.dim, 0.0f), dbeta(c.dim, 0.0f);
  c.backward(dy, dx, dgamma, dbeta);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> dx_w(c.x.size()), dgamma_w(c.dim, nan), dbeta_w(c.dim, nan);
  layernorm_backward(f32_view(dy, {c.rows, c.dim}), f32_view(c.x, {c.rows, c.dim}),
                     f32_view(c.gamma, {c.dim}), f32_view(c.mean, {c.rows}), f32_view(c.rstd, {c.rows}),
                     f32_view(dx_w, {c.rows, c.dim}), f32_view(dgamma_w, {c.dim}), f32_view(dbeta_w, {c.dim}),
                     GradWrite::overwrite);
  EXPECT_TRUE(test::all_close("dx", dx_w, dx, {0, 0}));
  EXPECT_TRUE(test::all_close("dgamma written", dgamma_w, dgamma, {0, 0}));
  EXPECT_TRUE(test::all_close("dbeta written", dbeta_w, dbeta, {0, 0}));
}

TEST(LayerNorm, BackwardInPlaceOverDy) {
  LayerNormCase c(0.0f);
  std::vector<float> dy = c.r, dx(c.x.size()), dgamma(c.dim, 0.0f), dbeta(c.dim, 0.0f);
  c.backward(dy, dx, dgamma, dbeta);
  std::vector<float> inplace = c.r;
  c.backward(inplace, inplace, dgamma, dbeta);
  EXPECT_TRUE(test::all_close("dx written over dy", inplace, dx, {0, 0}));
}

TEST(LayerNorm, RejectsBadArguments) {
  std::vector<float> x(14), gamma(7), beta(6), y(14), mean(2), rstd(2);
  EXPECT_THROW(layernorm_forward(f32_view(x, {2, 7}), f32_view(gamma, {7}), f32_view(beta, {6}), kEps,
                                 f32_view(y, {2, 7}), f32_view(mean, {2}), f32_view(rstd, {2})),
               Error);
  std::vector<float> beta_ok(7);
  const Tensor x_gpu(x.data(), {2, 7}, DType::f32, DeviceKind::cuda);
  try {
    layernorm_forward(x_gpu, f32_view(gamma, {7}), f32_view(beta_ok, {7}), kEps, f32_view(y, {2, 7}),
                      f32_view(mean, {2}), f32_view(rstd, {2}));
    FAIL() << "a CUDA tensor mixed with host tensors must be refused";
  } catch (const Error& e) {
    // Without CUDA: "CUDA kernel not built yet"; with it: "gamma must be a CUDA tensor".
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
  }
}

// Bit patterns, so -0 vs +0 (and any NaN payload) would count as a difference.
std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = std::bit_cast<uint32_t>(v[i]);
  return bits;
}

TEST(DropoutAddLayerNorm, BitwiseEqualToDropoutThenAddThenLayerNorm) {
  // Rows 1 and 37; widths that are not multiples of 8 (nor of the 4-element Philox block, so blocks straddle
  // rows), and one that is.
  for (const auto& [rows, dim] : {std::pair{1, 13}, std::pair{37, 13}, std::pair{37, 771}, std::pair{1, 8}}) {
    for (float p : {0.0f, 0.1f}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << ", dim " << dim << ", p " << p);
      const Shape shape{rows, dim}, row_shape{rows}, dim_shape{dim};
      const int64_t n = shape.numel();
      const DropoutSite site{.p = p, .seed = 0x5eed1234abcdull, .site_id = dropout_site_id(17, 3, 2)};
      const std::vector<float> s0 = test::random_uniform(n, 41, -2.0f, 2.0f);
      std::vector<float> residual = test::random_uniform(n, 42, -2.0f, 2.0f);
      for (int j = 0; j < dim; ++j) residual[j] += 300.0f;  // a large-mean row
      std::vector<float> gamma = test::random_uniform(dim, 43, 0.5f, 1.5f),
                         beta = test::random_uniform(dim, 44);

      std::vector<float> s_ref = s0, y_ref(n), mean_ref(rows), rstd_ref(rows);
      dropout_forward(f32_view(s_ref, shape), f32_view(s_ref, shape), site);
      add_inplace(f32_view(s_ref, shape), f32_view(residual, shape));
      layernorm_forward(f32_view(s_ref, shape), f32_view(gamma, dim_shape), f32_view(beta, dim_shape), kEps,
                        f32_view(y_ref, shape), f32_view(mean_ref, row_shape), f32_view(rstd_ref, row_shape));

      std::vector<float> s = s0, y(n), mean(rows), rstd(rows);
      dropout_add_layernorm_forward(f32_view(s, shape), f32_view(residual, shape), site,
                                    f32_view(gamma, dim_shape), f32_view(beta, dim_shape), kEps,
                                    f32_view(y, shape), f32_view(mean, row_shape), f32_view(rstd, row_shape));
      EXPECT_EQ(bits_of(s), bits_of(s_ref));
      EXPECT_EQ(bits_of(y), bits_of(y_ref));
      EXPECT_EQ(bits_of(mean), bits_of(mean_ref));
      EXPECT_EQ(bits_of(rstd), bits_of(rstd_ref));
      if (p > 0.0f && n >= 100) {  // the mask did drop something (a dropped element sums to the residual)
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; ++i) dropped += s[i] == residual[i];
        EXPECT_GT(dropped, 0);
      }
    }
  }
}

TEST(DropoutAddLayerNorm, RejectsOverlapsAndBadProbabilityBeforeWriting) {
  const int rows = 2, dim = 5;
  std::vector<float> s = test::random_uniform(rows * dim, 45), residual(rows * dim, 1.0f), y(rows * dim);
  std::vector<float> gamma(dim, 1.0f), beta(dim, 0.0f), mean(rows), rstd(rows);
  const std::vector<float> s0 = s;
  const Shape shape{rows, dim};
  auto run = [&](const Tensor& res, const Tensor& out, float p) {
    dropout_add_layernorm_forward(f32_view(s, shape), res, DropoutSite{.p = p, .seed = 1, .site_id = 2},
                                  f32_view(gamma, {dim}), f32_view(beta, {dim}), kEps, out,
                                  f32_view(mean, {rows}), f32_view(rstd, {rows}));
  };
  EXPECT_THROW(run(f32_view(s, shape), f32_view(y, shape), 0.1f), Error);         // residual is s
  EXPECT_THROW(run(f32_view(residual, shape), f32_view(s, shape), 0.1f), Error);  // y is s
  EXPECT_THROW(run(f32_view(residual, shape), f32_view(y, shape), 1.0f), Error);  // p outside [0, 1)
  std::vector<float> narrow_residual(rows * (dim - 1));  // a valid view, of the wrong shape for s
  const Tensor narrow = f32_view(narrow_residual, {rows, dim - 1});
  EXPECT_THROW(run(narrow, f32_view(y, shape), 0.1f), Error);
  EXPECT_EQ(bits_of(s), bits_of(s0));
}

TEST(LayerNormDropoutBackward, BitwiseEqualToLayerNormBackwardThenDropoutBackward) {
  for (const auto& [rows, dim] : {std::pair{1, 13}, std::pair{37, 13}, std::pair{37, 771}}) {
    for (float p : {0.0f, 0.1f}) {
      SCOPED_TRACE(testing::Message() << "rows " << rows << ", dim " << dim << ", p " << p);
      const Shape shape{rows, dim}, row_shape{rows}, dim_shape{dim};
      const int64_t n = shape.numel();
      const DropoutSite site{.p = p, .seed = 0x5eed1234abcdull, .site_id = dropout_site_id(17, 3, 1)};
      std::vector<float> x = test::random_uniform(n, 51, -2.0f, 2.0f), dy = test::random_uniform(n, 52);
      std::vector<float> gamma = test::random_uniform(dim, 53, 0.5f, 1.5f), beta(dim, 0.0f);
      std::vector<float> y(n), mean(rows), rstd(rows);
      layernorm_forward(f32_view(x, shape), f32_view(gamma, dim_shape), f32_view(beta, dim_shape), kEps,
                        f32_view(y, shape), f32_view(mean, row_shape), f32_view(rstd, row_shape));
      const std::vector<float> dg0 = test::random_uniform(dim, 54), db0 = test::random_uniform(dim, 55);

      std::vector<float> dx_ref(n), ds_ref(n), dg_ref = dg0, db_ref = db0;
      layernorm_backward(f32_view(dy, shape), f32_view(x, shape), f32_view(gamma, dim_shape),
                         f32_view(mean, row_shape), f32_view(rstd, row_shape), f32_view(dx_ref, shape),
                         f32_view(dg_ref, dim_shape), f32_view(db_ref, dim_shape));
      dropout_backward(f32_view(dx_ref, shape), f32_view(ds_ref, shape), site);

      std::vector<float> d = dy, ds(n), dg = dg0, db = db0;  // dx written over dy, as the model does
      layernorm_dropout_backward(f32_view(d, shape), f32_view(x, shape), f32_view(gamma, dim_shape),
                                 f32_view(mean, row_shape), f32_view(rstd, row_shape), site,
                                 f32_view(d, shape), f32_view(ds, shape), f32_view(dg, dim_shape),
                                 f32_view(db, dim_shape));
      EXPECT_EQ(bits_of(d), bits_of(dx_ref));
      EXPECT_EQ(bits_of(ds), bits_of(ds_ref));
      EXPECT_EQ(bits_of(dg), bits_of(dg_ref));
      EXPECT_EQ(bits_of(db), bits_of(db_ref));
      if (p > 0.0f && n >= 100) {  // the mask did drop something
        int64_t dropped = 0;
        for (int64_t i = 0; i < n; ++i) dropped += ds[i] == 0.0f && d[i] != 0.0f;
        EXPECT_GT(dropped, 0);
      }
    }
  }
}

TEST(LayerNormDropoutBackward, RejectsOverlapsAndBadProbabilityBeforeWriting) {
  const int rows = 2, dim = 5;
  const Shape shape{rows, dim};
  std::vector<float> x = test::random_uniform(rows * dim, 56), dy = test::random_uniform(rows * dim, 57);
  std::vector<float> dx(rows * dim), ds(rows * dim), gamma(dim, 1.0f), mean(rows, 0.0f), rstd(rows, 1.0f);
  std::vector<float> dg(dim, 0.0f), db(dim, 0.0f);
  const std::vector<float> dy0 = dy;
  auto run = [&](const Tensor& out_ds, float p) {
    layernorm_dropout_backward(f32_view(dy, shape), f32_view(x, shape), f32_view(gamma, {dim}),
                               f32_view(mean, {rows}), f32_view(rstd, {rows}),
                               DropoutSite{.p = p, .seed = 1, .site_id = 2}, f32_view(dy, shape), out_ds,
                               f32_view(dg, {dim}), f32_view(db, {dim}));
  };
  EXPECT_THROW(run(f32_view(dy, shape), 0.1f), Error);  // ds over dy (and dx)
  EXPECT_THROW(run(f32_view(x, shape), 0.1f), Error);   // ds over x
  EXPECT_THROW(run(f32_view(ds, shape), 1.0f), Error);  // p outside [0, 1)
  EXPECT_EQ(bits_of(dy), bits_of(dy0));
  EXPECT_EQ(bits_of(dg), bits_of(std::vector<float>(dim, 0.0f)));
}

}  // namespace
}  // namespace zt::kernels
