// GPU LayerNorm against the CPU reference, per storage dtype, with gamma/beta stored in the same dtype or in
// f32, on odd shapes, aligned and misaligned; the parameter-gradient reduction is checked for determinism.
// The fused dropout + residual + LayerNorm forward, and the fused LayerNorm + dropout backward, are checked
// bit for bit against the GPU kernels they replace run in turn, and against the CPU reference within the
// dtype's tolerance; the backward's two paths (one fused kernel a row chunk, or the partials and dx kernels)
// bit for bit against each other.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cuda/layernorm.cuh"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "runtime/stream.h"
#include "tests/kernels/tensor_views.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::DeviceArray;
using test::GpuCase;
using test::random_floats;
using test::round_through;
using test::tolerance_for;

constexpr float kEps = 1e-7f;  // DeBERTa's

struct LayerNormCase {
  GpuCase base;
  bool f32_params;  // gamma/beta stored in f32 (else in the activations' dtype)
};

class LayerNormGpu : public ::testing::TestWithParam<LayerNormCase> {};

TEST_P(LayerNormGpu, ForwardAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const GpuCase c = GetParam().base;
  const DType param_dtype = GetParam().f32_params ? DType::f32 : c.dtype;
  const int64_t dim = c.shape[c.shape.rank - 1], rows = c.shape.numel() / dim;
  const Shape row_shape{rows}, dim_shape{dim};
  // Rows with a large mean next to a small spread: the two-pass variance must keep them accurate.
  std::vector<float> x = random_floats(c.shape.numel(), 11, -2.0f, 2.0f);
  for (int64_t j = 0; j < dim; ++j) x[static_cast<size_t>(j)] = 300.0f + 0.01f * static_cast<float>(j % 17);
  x = round_through(c.dtype, x);
  std::vector<float> gamma = round_through(param_dtype, random_floats(dim, 12, 0.5f, 1.5f));
  std::vector<float> beta = round_through(param_dtype, random_floats(dim, 13, -0.5f, 0.5f));
  std::vector<float> dy = round_through(c.dtype, random_floats(c.shape.numel(), 14));
  std::vector<float> y_ref(x.size()), mean_ref(static_cast<size_t>(rows)), rstd_ref(mean_ref.size());
  std::vector<float> dx_ref(x.size());
  std::vector<float> dgamma_ref = random_floats(dim, 15), dbeta_ref = random_floats(dim, 16);
  const std::vector<float> dgamma0 = dgamma_ref, dbeta0 = dbeta_ref;
  layernorm_forward(test::f32_view(x, c.shape), test::f32_view(gamma, dim_shape),
                    test::f32_view(beta, dim_shape), kEps, test::f32_view(y_ref, c.shape),
                    test::f32_view(mean_ref, row_shape), test::f32_view(rstd_ref, row_shape));
  layernorm_backward(test::f32_view(dy, c.shape), test::f32_view(x, c.shape),
                     test::f32_view(gamma, dim_shape), test::f32_view(mean_ref, row_shape),
                     test::f32_view(rstd_ref, row_shape), test::f32_view(dx_ref, c.shape),
                     test::f32_view(dgamma_ref, dim_shape), test::f32_view(dbeta_ref, dim_shape));

  DeviceArray gx(c.dtype, c.shape, c.offset), gy(c.dtype, c.shape, c.offset), gdy(c.dtype, c.shape, c.offset),
      gdx(c.dtype, c.shape, c.offset);
  DeviceArray ggamma(param_dtype, dim_shape, c.offset), gbeta(param_dtype, dim_shape, c.offset);
  DeviceArray gmean(DType::f32, row_shape), grstd(DType::f32, row_shape);
  DeviceArray gdgamma(DType::f32, dim_shape), gdbeta(DType::f32, dim_shape);
  gx.upload(x);
  ggamma.upload(gamma);
  gbeta.upload(beta);
  gdy.upload(dy);
  layernorm_forward(gx.tensor(), ggamma.tensor(), gbeta.tensor(), kEps, gy.tensor(), gmean.tensor(),
                    grstd.tensor());
  EXPECT_TRUE(test::all_close("y", gy.download(), y_ref, tolerance_for(c.dtype)));
  EXPECT_TRUE(test::all_close("mean", gmean.download(), mean_ref, tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("rstd", grstd.download(), rstd_ref, tolerance_for(DType::f32)));

  // The backward reads the CPU's statistics, so only the backward's own arithmetic is compared.
  gmean.upload(mean_ref);
  grstd.upload(rstd_ref);
  gdgamma.upload(dgamma0);
  gdbeta.upload(dbeta0);
  layernorm_backward(gdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(), grstd.tensor(), gdx.tensor(),
                     gdgamma.tensor(), gdbeta.tensor());
  EXPECT_TRUE(test::all_close("dx", gdx.download(), dx_ref, tolerance_for(c.dtype)));
  EXPECT_TRUE(test::all_close("dgamma", gdgamma.download(), dgamma_ref, tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("dbeta", gdbeta.download(), dbeta_ref, tolerance_for(DType::f32)));

  // dx may alias dy.
  layernorm_backward(gdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(), grstd.tensor(), gdy.tensor(),
                     gdgamma.tensor(), gdbeta.tensor());
  EXPECT_TRUE(test::all_close("dx in place", gdy.download(), dx_ref, tolerance_for(c.dtype)));
}

std::vector<LayerNormCase> layernorm_cases() {
  std::vector<LayerNormCase> cases;
  for (const GpuCase& c : test::standard_gpu_cases()) {
    cases.push_back({c, false});
    if (c.dtype != DType::f32) cases.push_back({c, true});
  }
  // Many rows: several row chunks in the parameter-gradient reduction, and a pack-multiple width.
  for (DType dtype : {DType::f32, DType::bf16}) cases.push_back({{dtype, Shape{1000, 96}, 0}, false});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, LayerNormGpu, ::testing::ValuesIn(layernorm_cases()),
                         [](const auto& info) {
                           return test::gpu_case_name(info.param.base) +
                                  (info.param.f32_params ? "_f32params" : "");
                         });

TEST(LayerNormGpuDeterminism, ParameterGradientsAreBitIdenticalAcrossRuns) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape{4099, 768};
  const int64_t rows = 4099, dim = 768;
  DeviceArray x(DType::bf16, shape), dy(DType::bf16, shape), dx(DType::bf16, shape);
  DeviceArray gamma(DType::bf16, Shape{dim}), mean(DType::f32, Shape{rows}), rstd(DType::f32, Shape{rows});
  x.upload(random_floats(shape.numel(), 21));
  dy.upload(random_floats(shape.numel(), 22));
  gamma.upload(random_floats(dim, 23));
  mean.upload(random_floats(rows, 24, -0.1f, 0.1f));
  rstd.upload(random_floats(rows, 25, 0.5f, 2.0f));
  std::vector<std::vector<float>> results;
  for (int run = 0; run < 2; ++run) {
    DeviceArray dgamma(DType::f32, Shape{dim}), dbeta(DType::f32, Shape{dim});
    dgamma.upload(std::vector<float>(static_cast<size_t>(dim), 0.0f));
    dbeta.upload(std::vector<float>(static_cast<size_t>(dim), 0.0f));
    layernorm_backward(dy.tensor(), x.tensor(), gamma.tensor(), mean.tensor(), rstd.tensor(), dx.tensor(),
                       dgamma.tensor(), dbeta.tensor());
    results.push_back(dgamma.download());
    results.push_back(dbeta.download());
  }
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(results[1], results[3]);
}

// Bit-for-bit equality of two downloads (a 16-bit value widens to a unique f32, so comparing the f32 bit
// patterns compares the stored bits; -0 vs +0 counts as a difference).
::testing::AssertionResult bitwise_equal(const char* what, const std::vector<float>& got,
                                         const std::vector<float>& ref) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &ref[i], sizeof(float)) != 0) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  const auto at = static_cast<size_t>(first);
  return ::testing::AssertionFailure()
         << what << ": " << mismatches << " of " << got.size() << " elements differ, first at " << first
         << ": " << got[at] << " vs " << ref[at];
}

// The parameter-gradient partials read 16 bytes per row lane when dy and x allow (kVec = the pack size) and
// one element otherwise; every column is summed in the same order either way, so the gradients agree bit
// for bit between an aligned and a misaligned copy of the same data.
TEST(LayerNormGpuDeterminism, ParameterGradientsAreBitIdenticalWhateverTheAlignment) {
  ZT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t rows = 333, dim = 1536;
    const Shape shape{rows, dim};
    const std::vector<float> x = round_through(dtype, random_floats(shape.numel(), 26));
    const std::vector<float> dy = round_through(dtype, random_floats(shape.numel(), 27));
    DeviceArray gamma(dtype, Shape{dim}), mean(DType::f32, Shape{rows}), rstd(DType::f32, Shape{rows});
    gamma.upload(round_through(dtype, random_floats(dim, 28)));
    mean.upload(random_floats(rows, 29, -0.1f, 0.1f));
    rstd.upload(random_floats(rows, 30, 0.5f, 2.0f));
    std::vector<std::vector<float>> results;
    for (int64_t offset : {0, 1}) {
      DeviceArray gx(dtype, shape, offset), gdy(dtype, shape, offset), gdx(dtype, shape, offset);
      gx.upload(x);
      gdy.upload(dy);
      DeviceArray dgamma(DType::f32, Shape{dim}), dbeta(DType::f32, Shape{dim});
      dgamma.upload(std::vector<float>(static_cast<size_t>(dim), 0.5f));
      dbeta.upload(std::vector<float>(static_cast<size_t>(dim), -0.5f));
      layernorm_backward(gdy.tensor(), gx.tensor(), gamma.tensor(), mean.tensor(), rstd.tensor(),
                         gdx.tensor(), dgamma.tensor(), dbeta.tensor());
      results.push_back(dgamma.download());
      results.push_back(dbeta.download());
    }
    EXPECT_TRUE(bitwise_equal("dgamma", results[2], results[0]));
    EXPECT_TRUE(bitwise_equal("dbeta", results[3], results[1]));
  }
}

struct FusedCase {
  GpuCase base;
  int64_t residual_offset;  // elements: 1 with an aligned s/y makes the add scalar and the row vectorized
};

class DropoutAddLayerNormGpu : public ::testing::TestWithParam<FusedCase> {};

TEST_P(DropoutAddLayerNormGpu, BitwiseEqualToThreeKernelsAndCloseToCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const GpuCase c = GetParam().base;
  const int64_t dim = c.shape[c.shape.rank - 1], rows = c.shape.numel() / dim;
  const Shape row_shape{rows}, dim_shape{dim};
  const std::vector<float> s0 = round_through(c.dtype, random_floats(c.shape.numel(), 31));
  // No large-mean rows here (the LayerNorm test has them): in 16 bits the rounded sums of such a row would
  // differ from the CPU's f32 sums by a good part of the row's spread.
  const std::vector<float> residual = round_through(c.dtype, random_floats(c.shape.numel(), 32));
  std::vector<float> gamma = round_through(c.dtype, random_floats(dim, 33, 0.5f, 1.5f));
  std::vector<float> beta = round_through(c.dtype, random_floats(dim, 34, -0.5f, 0.5f));

  DeviceArray gres(c.dtype, c.shape, GetParam().residual_offset);
  DeviceArray ggamma(c.dtype, dim_shape), gbeta(c.dtype, dim_shape);
  gres.upload(residual);
  ggamma.upload(gamma);
  gbeta.upload(beta);
  for (float p : {0.0f, 0.1f}) {
    SCOPED_TRACE(testing::Message() << "p " << p);
    const DropoutSite site{p, 0x5eed1234abcdull, dropout_site_id(17, 3, 2)};
    // The unfused sequence on the GPU.
    DeviceArray gs_seq(c.dtype, c.shape, c.offset), gy_seq(c.dtype, c.shape, c.offset);
    DeviceArray gmean_seq(DType::f32, row_shape), grstd_seq(DType::f32, row_shape);
    gs_seq.upload(s0);
    dropout_forward(gs_seq.tensor(), gs_seq.tensor(), site);
    add_inplace(gs_seq.tensor(), gres.tensor());
    layernorm_forward(gs_seq.tensor(), ggamma.tensor(), gbeta.tensor(), kEps, gy_seq.tensor(),
                      gmean_seq.tensor(), grstd_seq.tensor());
    // The fused op.
    DeviceArray gs(c.dtype, c.shape, c.offset), gy(c.dtype, c.shape, c.offset);
    DeviceArray gmean(DType::f32, row_shape), grstd(DType::f32, row_shape);
    gs.upload(s0);
    dropout_add_layernorm_forward(gs.tensor(), gres.tensor(), site, ggamma.tensor(), gbeta.tensor(), kEps,
                                  gy.tensor(), gmean.tensor(), grstd.tensor());
    const std::vector<float> s = gs.download(), y = gy.download(), mean = gmean.download(),
                             rstd = grstd.download();
    EXPECT_TRUE(bitwise_equal("s", s, gs_seq.download()));
    EXPECT_TRUE(bitwise_equal("y", y, gy_seq.download()));
    EXPECT_TRUE(bitwise_equal("mean", mean, gmean_seq.download()));
    EXPECT_TRUE(bitwise_equal("rstd", rstd, grstd_seq.download()));

    // The CPU reference (f32 throughout) on the same stored inputs.
    std::vector<float> s_ref = s0, res_ref = residual, y_ref(s0.size()), mean_ref(static_cast<size_t>(rows)),
                       rstd_ref(mean_ref.size());
    dropout_add_layernorm_forward(test::f32_view(s_ref, c.shape), test::f32_view(res_ref, c.shape), site,
                                  test::f32_view(gamma, dim_shape), test::f32_view(beta, dim_shape), kEps,
                                  test::f32_view(y_ref, c.shape), test::f32_view(mean_ref, row_shape),
                                  test::f32_view(rstd_ref, row_shape));
    if (c.dtype == DType::f32) {  // the same f32 product and sum as the CPU: no FMA may merge them
      EXPECT_TRUE(bitwise_equal("s vs CPU", s, s_ref));
    } else {  // the GPU rounds the dropped value and the sum to 16 bits, the CPU keeps f32
      EXPECT_TRUE(test::all_close("s vs CPU", s, s_ref, tolerance_for(c.dtype)));
    }
    EXPECT_TRUE(test::all_close("y vs CPU", y, y_ref, tolerance_for(c.dtype)));
    EXPECT_TRUE(test::all_close("mean vs CPU", mean, mean_ref, tolerance_for(c.dtype)));
    EXPECT_TRUE(test::all_close("rstd vs CPU", rstd, rstd_ref, tolerance_for(c.dtype)));
  }
}

std::vector<FusedCase> fused_cases() {
  std::vector<FusedCase> cases;
  for (const GpuCase& c : test::standard_gpu_cases()) {
    cases.push_back({c, c.offset});
    if (c.offset == 0) cases.push_back({c, 1});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(
    DtypesShapes, DropoutAddLayerNormGpu, ::testing::ValuesIn(fused_cases()), [](const auto& info) {
      return test::gpu_case_name(info.param.base) +
             (info.param.residual_offset != info.param.base.offset ? "_misaligned_residual" : "");
    });

// The residual tail's backward: dx (written over dy, as the model does) and ds = Drop'(dx) from one kernel,
// against layernorm_backward then dropout_backward on the GPU (bit for bit, gamma in both storage dtypes) and
// the CPU reference. FusedCase::residual_offset is ds's offset here: 1 takes the scalar stores.
class LayerNormDropoutBackwardGpu : public ::testing::TestWithParam<FusedCase> {};

TEST_P(LayerNormDropoutBackwardGpu, BitwiseEqualToTwoKernelsAndCloseToCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const GpuCase c = GetParam().base;
  const int64_t dim = c.shape[c.shape.rank - 1], rows = c.shape.numel() / dim;
  const Shape row_shape{rows}, dim_shape{dim};
  std::vector<float> x = round_through(c.dtype, random_floats(c.shape.numel(), 41));
  std::vector<float> dy = round_through(c.dtype, random_floats(c.shape.numel(), 42));
  const std::vector<float> dgamma0 = random_floats(dim, 45), dbeta0 = random_floats(dim, 46);
  for (const DType param_dtype : {c.dtype, DType::f32}) {
    std::vector<float> gamma = round_through(param_dtype, random_floats(dim, 43, 0.5f, 1.5f));
    std::vector<float> beta = round_through(param_dtype, random_floats(dim, 44, -0.5f, 0.5f));
    DeviceArray gx(c.dtype, c.shape, c.offset), gy(c.dtype, c.shape, c.offset);
    DeviceArray ggamma(param_dtype, dim_shape), gbeta(param_dtype, dim_shape);
    DeviceArray gmean(DType::f32, row_shape), grstd(DType::f32, row_shape);
    gx.upload(x);
    ggamma.upload(gamma);
    gbeta.upload(beta);
    layernorm_forward(gx.tensor(), ggamma.tensor(), gbeta.tensor(), kEps, gy.tensor(), gmean.tensor(),
                      grstd.tensor());
    std::vector<float> mean = gmean.download(), rstd = grstd.download();
    for (float p : {0.0f, 0.1f}) {
      SCOPED_TRACE(testing::Message() << "p " << p << " gamma " << dtype_name(param_dtype));
      const DropoutSite site{p, 0x5eed1234abcdull, dropout_site_id(17, 3, 2)};
      // The two kernels in turn.
      DeviceArray gdy_seq(c.dtype, c.shape, c.offset), gdx_seq(c.dtype, c.shape, c.offset),
          gds_seq(c.dtype, c.shape, GetParam().residual_offset);
      DeviceArray gdg_seq(DType::f32, dim_shape), gdb_seq(DType::f32, dim_shape);
      gdy_seq.upload(dy);
      gdg_seq.upload(dgamma0);
      gdb_seq.upload(dbeta0);
      layernorm_backward(gdy_seq.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(), grstd.tensor(),
                         gdx_seq.tensor(), gdg_seq.tensor(), gdb_seq.tensor());
      dropout_backward(gdx_seq.tensor(), gds_seq.tensor(), site);
      // The fused kernel, dx over dy.
      DeviceArray gd(c.dtype, c.shape, c.offset), gds(c.dtype, c.shape, GetParam().residual_offset);
      DeviceArray gdg(DType::f32, dim_shape), gdb(DType::f32, dim_shape);
      gd.upload(dy);
      gdg.upload(dgamma0);
      gdb.upload(dbeta0);
      layernorm_dropout_backward(gd.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(), grstd.tensor(),
                                 site, gd.tensor(), gds.tensor(), gdg.tensor(), gdb.tensor());
      const std::vector<float> dx = gd.download(), ds = gds.download();
      EXPECT_TRUE(bitwise_equal("dx", dx, gdx_seq.download()));
      EXPECT_TRUE(bitwise_equal("ds", ds, gds_seq.download()));
      EXPECT_TRUE(bitwise_equal("dgamma", gdg.download(), gdg_seq.download()));
      EXPECT_TRUE(bitwise_equal("dbeta", gdb.download(), gdb_seq.download()));

      // The CPU reference (f32) on the same inputs and statistics.
      std::vector<float> dy_ref = dy, dx_ref(x.size()), ds_ref(x.size()), dg_ref = dgamma0, db_ref = dbeta0;
      layernorm_dropout_backward(test::f32_view(dy_ref, c.shape), test::f32_view(x, c.shape),
                                 test::f32_view(gamma, dim_shape), test::f32_view(mean, row_shape),
                                 test::f32_view(rstd, row_shape), site, test::f32_view(dx_ref, c.shape),
                                 test::f32_view(ds_ref, c.shape), test::f32_view(dg_ref, dim_shape),
                                 test::f32_view(db_ref, dim_shape));
      EXPECT_TRUE(test::all_close("dx vs CPU", dx, dx_ref, tolerance_for(c.dtype)));
      EXPECT_TRUE(test::all_close("ds vs CPU", ds, ds_ref, tolerance_for(c.dtype)));
      EXPECT_TRUE(test::all_close("dgamma vs CPU", gdg.download(), dg_ref, tolerance_for(DType::f32)));

      // GradWrite::overwrite, both entry points: dgamma and dbeta written over NaN (a read would keep it),
      // bit for bit the accumulation onto zeros.
      for (const bool fused : {false, true}) {
        std::vector<std::vector<float>> sums;
        for (const GradWrite write : {GradWrite::accumulate, GradWrite::overwrite}) {
          const float init = write == GradWrite::overwrite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
          DeviceArray wdy(c.dtype, c.shape, c.offset), wds(c.dtype, c.shape, GetParam().residual_offset);
          DeviceArray wdg(DType::f32, dim_shape), wdb(DType::f32, dim_shape);
          wdy.upload(dy);
          wdg.upload(std::vector<float>(static_cast<size_t>(dim), init));
          wdb.upload(std::vector<float>(static_cast<size_t>(dim), init));
          if (fused) {
            layernorm_dropout_backward(wdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(),
                                       grstd.tensor(), site, wdy.tensor(), wds.tensor(), wdg.tensor(),
                                       wdb.tensor(), write);
          } else {
            layernorm_backward(wdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(), grstd.tensor(),
                               wdy.tensor(), wdg.tensor(), wdb.tensor(), write);
          }
          sums.push_back(wdg.download());
          sums.push_back(wdb.download());
        }
        EXPECT_TRUE(bitwise_equal(fused ? "fused dgamma written" : "dgamma written", sums[2], sums[0]));
        EXPECT_TRUE(bitwise_equal(fused ? "fused dbeta written" : "dbeta written", sums[3], sums[1]));
      }
      // ds over dy is refused before anything is written.
      EXPECT_THROW(layernorm_dropout_backward(gd.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(),
                                              grstd.tensor(), site, gdx_seq.tensor(), gd.tensor(),
                                              gdg.tensor(), gdb.tensor()),
                   Error);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, LayerNormDropoutBackwardGpu, ::testing::ValuesIn(fused_cases()),
                         [](const auto& info) {
                           return test::gpu_case_name(info.param.base) +
                                  (info.param.residual_offset != info.param.base.offset ? "_misaligned_ds"
                                                                                        : "");
                         });

// The backward's fused kernel (one block a row chunk writes dx, ds and the chunk's parameter-gradient
// partials over one read of dy and x: kernels/cuda/layernorm_backward.cu, Note [fused LayerNorm backward])
// against the separate kernels (the partials kernel, then the dx kernel), each path pinned, bit for bit: dx
// into its own buffer and over dy (as the model runs it), ds = Drop'(dx) at p 0.1 and at p 0, dgamma and
// dbeta added onto random values and written over NaN, gamma in the activations' dtype and in f32. Shapes:
// xlarge's [5120, 1536] (160 chunks of 32 rows), 77 rows (3 chunks of 26, the last 25), a width off the pack
// (102, in bf16 and f32: the scalar partition), a view 1 element off 16-byte alignment (the scalar partition
// at a pack-multiple width), 5 rows (one chunk, row lanes 5-7 idle) and 8193 rows of 64 (256 chunks of 33:
// the last 7 empty).
TEST(LayerNormGpuFusedBackward, BitwiseEqualToTheSeparateKernels) {
  ZT_SKIP_WITHOUT_GPU();
  struct BackwardShape {
    int64_t rows, dim, offset;
  };
  struct Run {
    bool drop;  // layernorm_dropout_backward (else layernorm_backward)
    float p;
    GradWrite write;
    bool dx_over_dy;
  };
  constexpr Run kRuns[] = {{false, 0.0f, GradWrite::accumulate, false},
                           {false, 0.0f, GradWrite::overwrite, true},
                           {true, 0.1f, GradWrite::accumulate, true},
                           {true, 0.1f, GradWrite::overwrite, false},
                           {true, 0.0f, GradWrite::accumulate, true}};
  for (const BackwardShape& bs :
       {BackwardShape{5120, 1536, 0}, BackwardShape{77, 1536, 0}, BackwardShape{300, 102, 0},
        BackwardShape{77, 1536, 1}, BackwardShape{5, 24, 0}, BackwardShape{8193, 64, 0}}) {
    const Shape shape{bs.rows, bs.dim}, row_shape{bs.rows}, dim_shape{bs.dim};
    for (const DType dtype : {DType::bf16, DType::f32}) {
      const std::vector<float> x = round_through(dtype, random_floats(shape.numel(), 61));
      const std::vector<float> dy = round_through(dtype, random_floats(shape.numel(), 62));
      const std::vector<float> dgamma0 = random_floats(bs.dim, 63), dbeta0 = random_floats(bs.dim, 64);
      const std::vector<float> nans(static_cast<size_t>(bs.dim), std::numeric_limits<float>::quiet_NaN());
      std::vector<DType> param_dtypes{dtype};
      if (dtype != DType::f32) param_dtypes.push_back(DType::f32);
      for (const DType param_dtype : param_dtypes) {
        DeviceArray gx(dtype, shape, bs.offset), gy(dtype, shape, bs.offset);
        DeviceArray ggamma(param_dtype, dim_shape), gbeta(param_dtype, dim_shape);
        DeviceArray gmean(DType::f32, row_shape), grstd(DType::f32, row_shape);
        gx.upload(x);
        ggamma.upload(round_through(param_dtype, random_floats(bs.dim, 65, 0.5f, 1.5f)));
        gbeta.upload(round_through(param_dtype, random_floats(bs.dim, 66, -0.5f, 0.5f)));
        layernorm_forward(gx.tensor(), ggamma.tensor(), gbeta.tensor(), kEps, gy.tensor(), gmean.tensor(),
                          grstd.tensor());
        for (const Run& run : kRuns) {
          SCOPED_TRACE(testing::Message()
                       << dtype_name(dtype) << " gamma " << dtype_name(param_dtype) << " [" << bs.rows << ", "
                       << bs.dim << "] offset " << bs.offset << (run.drop ? " ds, p " : " no ds, p ") << run.p
                       << (run.write == GradWrite::overwrite ? " overwrite" : " accumulate")
                       << (run.dx_over_dy ? " dx over dy" : ""));
          const DropoutSite site{run.p, 0x5eed1234abcdull, dropout_site_id(9, 4, 1)};
          // dx, ds (when run.drop), dgamma, dbeta of one path.
          auto backward = [&](gpu::LayerNormBackwardPath path) {
            DeviceArray gdy(dtype, shape, bs.offset), gdx(dtype, shape, bs.offset),
                gds(dtype, shape, bs.offset);
            DeviceArray gdg(DType::f32, dim_shape), gdb(DType::f32, dim_shape);
            gdy.upload(dy);
            const bool overwrite = run.write == GradWrite::overwrite;  // over NaN: a read would keep it
            gdg.upload(overwrite ? nans : dgamma0);
            gdb.upload(overwrite ? nans : dbeta0);
            const Tensor dx = run.dx_over_dy ? gdy.tensor() : gdx.tensor();
            if (run.drop) {
              gpu::layernorm_dropout_backward(gdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(),
                                              grstd.tensor(), site, dx, gds.tensor(), gdg.tensor(),
                                              gdb.tensor(), run.write, current_stream(), path);
            } else {
              gpu::layernorm_backward(gdy.tensor(), gx.tensor(), ggamma.tensor(), gmean.tensor(),
                                      grstd.tensor(), dx, gdg.tensor(), gdb.tensor(), run.write,
                                      current_stream(), path);
            }
            std::vector<std::vector<float>> out;
            out.push_back(run.dx_over_dy ? gdy.download() : gdx.download());
            out.push_back(run.drop ? gds.download() : std::vector<float>{});
            out.push_back(gdg.download());
            out.push_back(gdb.download());
            return out;
          };
          const auto fused = backward(gpu::LayerNormBackwardPath::fused);
          const auto separate = backward(gpu::LayerNormBackwardPath::separate);
          EXPECT_TRUE(bitwise_equal("dx", fused[0], separate[0]));
          EXPECT_TRUE(bitwise_equal("ds", fused[1], separate[1]));
          EXPECT_TRUE(bitwise_equal("dgamma", fused[2], separate[2]));
          EXPECT_TRUE(bitwise_equal("dbeta", fused[3], separate[3]));
        }
      }
    }
  }
}

// The fused kernel takes the vector row partition only with vector stores: asked for with dy and x aligned
// and ds one element off, it refuses before anything runs (and automatic takes the separate kernels).
TEST(LayerNormGpuFusedBackward, RefusesScalarStoresUnderAVectorRow) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape{64, 256}, row_shape{64}, dim_shape{256};
  DeviceArray dy(DType::bf16, shape), x(DType::bf16, shape), ds(DType::bf16, shape, 1);
  DeviceArray gamma(DType::bf16, dim_shape), mean(DType::f32, row_shape), rstd(DType::f32, row_shape);
  DeviceArray dgamma(DType::f32, dim_shape), dbeta(DType::f32, dim_shape);
  const DropoutSite site{0.1f, 7, dropout_site_id(1, 0, 0)};
  EXPECT_THROW(gpu::layernorm_dropout_backward(dy.tensor(), x.tensor(), gamma.tensor(), mean.tensor(),
                                               rstd.tensor(), site, dy.tensor(), ds.tensor(), dgamma.tensor(),
                                               dbeta.tensor(), GradWrite::overwrite, current_stream(),
                                               gpu::LayerNormBackwardPath::fused),
               Error);
}

// The row kernels holding a lane's slices in registers (kernels/cuda/layernorm_rows.cuh: rows of up to eight
// slices a lane, up to one block of rows a multiprocessor) compute what the loops compute, bit for bit — the
// forward, the dropout + residual tail (p 0 and 0.1), the backward with and without Drop' (dx over dy as the
// model runs it) — for rows of one slice a lane down to part of one (dim 8: lanes past the row hold nothing),
// a partial last slice (264), xlarge's 1536, the widest a lane's eight slices hold (1024 in f32, 2048 in 16
// bits) and wider rows. The loops' rows are the first rows of a taller input (more rows than one block a
// multiprocessor, so the loops take it), whose per-row outputs and dropout mask indices those rows share.
TEST(LayerNormGpuRowRegisters, BitwiseEqualToTheLoops) {
  ZT_SKIP_WITHOUT_GPU();
  int device = 0, multiprocessors = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  const int64_t tall_rows = int64_t{multiprocessors} * 8 + 1;
  for (DType dtype : {DType::bf16, DType::f16, DType::f32}) {
    for (bool f32_params : {false, true}) {
      if (f32_params && dtype == DType::f32) continue;
      const DType param_dtype = f32_params ? DType::f32 : dtype;
      for (const int64_t dim :
           {int64_t{8}, int64_t{264}, int64_t{1024}, int64_t{1536}, int64_t{2048}, int64_t{2056}}) {
        const int64_t rows = 300;
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << (f32_params ? " f32 params " : " ") << "["
                                        << rows << ", " << dim << "]");
        const Shape dim_shape{dim};
        const int64_t tall_numel = tall_rows * dim;
        const std::vector<float> x = round_through(dtype, random_floats(tall_numel, 51));
        const std::vector<float> res = round_through(dtype, random_floats(tall_numel, 52));
        const std::vector<float> dy = round_through(dtype, random_floats(tall_numel, 53));
        DeviceArray gamma(param_dtype, dim_shape), beta(param_dtype, dim_shape);
        gamma.upload(round_through(param_dtype, random_floats(dim, 54, 0.5f, 1.5f)));
        beta.upload(round_through(param_dtype, random_floats(dim, 55, -0.5f, 0.5f)));
        // Every per-row output of every entry point over the first n rows of the inputs, as one list of
        // downloads cut to the first `rows` rows.
        auto run_all = [&](int64_t n) {
          const Shape x_shape{n, dim}, row_shape{n};
          const auto first = [&](const std::vector<float>& v) {
            return std::vector<float>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(x_shape.numel()));
          };
          const auto kept = [&](const DeviceArray& a, int64_t per_row) {
            const std::vector<float> all = a.download();
            return std::vector<float>(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(rows * per_row));
          };
          std::vector<std::vector<float>> out;
          DeviceArray gx(dtype, x_shape), gy(dtype, x_shape), mean(DType::f32, row_shape),
              rstd(DType::f32, row_shape), gres(dtype, x_shape);
          gx.upload(first(x));
          gres.upload(first(res));
          layernorm_forward(gx.tensor(), gamma.tensor(), beta.tensor(), kEps, gy.tensor(), mean.tensor(),
                            rstd.tensor());
          out.push_back(kept(gy, dim));
          out.push_back(kept(mean, 1));
          out.push_back(kept(rstd, 1));
          for (float p : {0.0f, 0.1f}) {
            const DropoutSite site{p, 0x5eed1234abcdull, dropout_site_id(5, 1, 2)};
            DeviceArray gs(dtype, x_shape), gy2(dtype, x_shape), mean2(DType::f32, row_shape),
                rstd2(DType::f32, row_shape);
            gs.upload(first(x));
            dropout_add_layernorm_forward(gs.tensor(), gres.tensor(), site, gamma.tensor(), beta.tensor(),
                                          kEps, gy2.tensor(), mean2.tensor(), rstd2.tensor());
            out.push_back(kept(gs, dim));
            out.push_back(kept(gy2, dim));
            out.push_back(kept(mean2, 1));
            out.push_back(kept(rstd2, 1));
            DeviceArray gdy(dtype, x_shape), ds(dtype, x_shape), dg(DType::f32, dim_shape),
                db(DType::f32, dim_shape);
            gdy.upload(first(dy));
            dg.upload(std::vector<float>(static_cast<size_t>(dim), 0.0f));
            db.upload(std::vector<float>(static_cast<size_t>(dim), 0.0f));
            if (p == 0.0f) {
              layernorm_backward(gdy.tensor(), gs.tensor(), gamma.tensor(), mean2.tensor(), rstd2.tensor(),
                                 gdy.tensor(), dg.tensor(), db.tensor());
            } else {
              layernorm_dropout_backward(gdy.tensor(), gs.tensor(), gamma.tensor(), mean2.tensor(),
                                         rstd2.tensor(), site, gdy.tensor(), ds.tensor(), dg.tensor(),
                                         db.tensor());
              out.push_back(kept(ds, dim));
            }
            out.push_back(kept(gdy, dim));
          }
          return out;
        };
        // Rows of up to eight slices a lane take the registers, up to one block of rows a multiprocessor.
        const bool fits = dim <= 32 * 8 * (16 / static_cast<int64_t>(dtype_size(dtype)));
        EXPECT_EQ(gpu::layernorm_keeps_rows_in_registers(dtype, dim, rows), fits);
        EXPECT_FALSE(gpu::layernorm_keeps_rows_in_registers(dtype, dim, tall_rows));
        const std::vector<std::vector<float>> registers = run_all(rows);
        const std::vector<std::vector<float>> loops = run_all(tall_rows);
        ASSERT_EQ(registers.size(), loops.size());
        for (size_t i = 0; i < loops.size(); ++i) {
          EXPECT_TRUE(bitwise_equal(("output " + std::to_string(i)).c_str(), registers[i], loops[i]));
        }
      }
    }
  }
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
