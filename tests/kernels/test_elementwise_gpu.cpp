// GPU pointwise ops (GELU, dropout, add, add_inplace, scale, copy, fill, mask_rows, select_token, and the
// dtype-converting copy / f32 += 16-bit add_inplace) against
// the CPU references, elementwise, per storage dtype, on odd shapes, aligned and one element off (the
// scalar fallback). Inputs are rounded through the dtype first, so the CPU sees what the GPU stores and
// only the GPU's own rounding (one per output) and math-library differences remain.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda/gelu.cuh"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gelu.h"
#include "kernels/linear.h"
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

// The FFN backward's GELU step with the column sums of the dx it writes (the intermediate projection's bias
// gradient), on the given path: y and dx as without them, and the sums bitwise linear_backward's bias
// gradient from that dx (a column-sum pass of its own), accumulated onto 0.5 and written over NaN; and
// within f32 summation error of the CPU's double sums of that dx. `offset` elements off 16-byte alignment
// leaves only the separate pass, whatever the path asks.
void expect_gelu_column_sums_match(DType dtype, Shape shape, int64_t offset, gpu::GeluColumnSumPath path) {
  const int64_t n = shape.numel(), cols = shape[shape.rank - 1], rows = n / cols;
  const std::vector<float> x = round_through(dtype, random_floats(n, 31, -4.0f, 4.0f)),
                           dy = round_through(dtype, random_floats(n, 32));
  test::DeviceArray gx(dtype, shape, offset), gdy(dtype, shape, offset), gy(dtype, shape, offset),
      gdy_plain(dtype, shape, offset), gy_plain(dtype, shape, offset);
  gx.upload(x);
  gdy_plain.upload(dy);
  gelu_recompute_and_backward(gdy_plain.tensor(), gx.tensor(), gy_plain.tensor(), gdy_plain.tensor());
  const std::vector<float> dx = gdy_plain.download(), y = gy_plain.download();
  std::vector<double> exact(static_cast<size_t>(cols)), magnitude(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      exact[static_cast<size_t>(c)] += dx[static_cast<size_t>(r * cols + c)];
      magnitude[static_cast<size_t>(c)] += std::fabs(dx[static_cast<size_t>(r * cols + c)]);
    }
  }

  // linear_backward's db over dy = dx: a [rows, cols] output of a 1-feature input (x and W never read).
  Shape one_feature = shape;
  one_feature[shape.rank - 1] = 1;
  test::DeviceArray ones(dtype, one_feature), weight(dtype, Shape{cols, 1});
  for (GradWrite write : {GradWrite::accumulate, GradWrite::overwrite}) {
    const bool accumulate = write == GradWrite::accumulate;
    const float start = accumulate ? 0.5f : std::nanf("");
    test::DeviceArray fused(DType::f32, Shape{cols}), separate(DType::f32, Shape{cols});
    fused.upload(std::vector<float>(static_cast<size_t>(cols), start));
    separate.upload(std::vector<float>(static_cast<size_t>(cols), start));
    gdy.upload(dy);
    gpu::gelu_recompute_and_backward(gdy.tensor(), gx.tensor(), gy.tensor(), gdy.tensor(), fused.tensor(),
                                     write, current_stream(), path);
    EXPECT_EQ(gy.download(), y);
    EXPECT_EQ(gdy.download(), dx);
    linear_backward(gdy_plain.tensor(), ones.tensor(), weight.tensor(), Tensor(), Tensor(), separate.tensor(),
                    false, write);
    const std::vector<float> sums = fused.download();
    EXPECT_EQ(sums, separate.download()) << (accumulate ? "accumulate" : "overwrite");
    for (int64_t c = 0; c < cols; ++c) {
      const auto i = static_cast<size_t>(c);
      const double reference = exact[i] + (accumulate ? 0.5 : 0.0);
      ASSERT_NEAR(sums[i], reference, 1e-6 * (magnitude[i] + 1.0)) << "column " << c;
    }
  }
  test::DeviceArray wrong(DType::f32, Shape{cols + 1});
  EXPECT_THROW(
      gelu_recompute_and_backward(gdy.tensor(), gx.tensor(), gy.tensor(), gdy.tensor(), wrong.tensor()),
      Error);
}

class PointwiseGpu : public ::testing::TestWithParam<GpuCase> {
 protected:
  int64_t n() const { return GetParam().shape.numel(); }
  DeviceArray device_array() const {
    return DeviceArray(GetParam().dtype, GetParam().shape, GetParam().offset);
  }
  // Random values rounded through the case's dtype.
  std::vector<float> values(uint32_t seed, float lo = -2.0f, float hi = 2.0f) const {
    return round_through(GetParam().dtype, random_floats(n(), seed, lo, hi));
  }
  Tensor cpu(std::vector<float>& v) const { return test::f32_view(v, GetParam().shape); }
  ::testing::AssertionResult close(const char* what, const std::vector<float>& got,
                                   const std::vector<float>& ref) const {
    return test::all_close(what, got, ref, tolerance_for(GetParam().dtype));
  }
};

// GELU forward and backward against the CPU; then the FFN backward's fused step against those two kernels on
// the same device, bit for bit (the fusion only shares erf between them), with dx written over dy as the
// model does.
TEST_P(PointwiseGpu, GeluForwardBackwardAndTheFusedStepMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  std::vector<float> x = values(1, -5.0f, 5.0f), dy = values(2);
  std::vector<float> y_ref(x.size()), dx_ref(x.size());
  gelu_forward(cpu(x), cpu(y_ref));
  gelu_backward(cpu(dy), cpu(x), cpu(dx_ref));
  DeviceArray gx = device_array(), gdy = device_array(), gy = device_array(), gdx = device_array();
  gx.upload(x);
  gdy.upload(dy);
  gelu_forward(gx.tensor(), gy.tensor());
  gelu_backward(gdy.tensor(), gx.tensor(), gdx.tensor());
  const std::vector<float> y_two = gy.download(), dx_two = gdx.download();
  EXPECT_TRUE(close("gelu_forward", y_two, y_ref));
  EXPECT_TRUE(close("gelu_backward", dx_two, dx_ref));

  DeviceArray fy = device_array();
  gelu_recompute_and_backward(gdy.tensor(), gx.tensor(), fy.tensor(), gdy.tensor());  // dx over dy
  EXPECT_TRUE(test::all_close("y fused vs gelu_forward", fy.download(), y_two, {0, 0}));
  EXPECT_TRUE(test::all_close("dx fused vs gelu_backward", gdy.download(), dx_two, {0, 0}));
  EXPECT_THROW(gelu_recompute_and_backward(gdx.tensor(), gx.tensor(), gx.tensor(), gdx.tensor()), Error);

  gelu_forward(gx.tensor(), gx.tensor());  // in place: y aliases x
  EXPECT_TRUE(close("gelu_forward in place", gx.download(), y_ref));
}

TEST_P(PointwiseGpu, GeluStepWithColumnSumsEqualsTheSeparatePass) {
  ZT_SKIP_WITHOUT_GPU();
  for (auto path : {gpu::GeluColumnSumPath::automatic, gpu::GeluColumnSumPath::fused})
    expect_gelu_column_sums_match(GetParam().dtype, GetParam().shape, GetParam().offset, path);
}

// Many row chunks (1030 rows: 9 of 115) and a partial last column block (264 = 256 + 8 bf16 columns).
TEST(PointwiseGpuMixed, GeluStepWithColumnSumsOverManyRowChunks) {
  ZT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::bf16, DType::f32}) {
    for (auto path : {gpu::GeluColumnSumPath::fused, gpu::GeluColumnSumPath::separate})
      expect_gelu_column_sums_match(dtype, Shape{1030, 264}, 0, path);
  }
}

TEST_P(PointwiseGpu, DropoutKeepsTheCpuMaskForTheSameSite) {
  ZT_SKIP_WITHOUT_GPU();
  const DropoutSite site{0.1f, 0x5eed1234abcdull, dropout_site_id(17, 3, 2)};
  std::vector<float> x = values(3, 0.5f, 2.0f);  // nonzero, so zeros in y are exactly the dropped elements
  std::vector<float> y_ref(x.size()), dx_ref(x.size());
  dropout_forward(cpu(x), cpu(y_ref), site);
  dropout_backward(cpu(x), cpu(dx_ref), site);
  DeviceArray gx = device_array(), gy = device_array(), gdx = device_array();
  gx.upload(x);
  dropout_forward(gx.tensor(), gy.tensor(), site);
  dropout_backward(gx.tensor(), gdx.tensor(), site);
  const std::vector<float> y = gy.download(), dx = gdx.download();
  int64_t mask_mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) mask_mismatches += (y[i] == 0.0f) != (y_ref[i] == 0.0f);
  EXPECT_EQ(mask_mismatches, 0);
  if (GetParam().dtype == DType::f32) {
    EXPECT_EQ(y, y_ref);  // same mask, same f32 multiply: bit-identical
    EXPECT_EQ(dx, dx_ref);
  }
  EXPECT_TRUE(close("dropout_forward", y, y_ref));
  EXPECT_TRUE(close("dropout_backward", dx, dx_ref));
  // p == 0 is an exact copy, also in place.
  dropout_forward(gx.tensor(), gy.tensor(), DropoutSite{0.0f, 1, 2});
  EXPECT_EQ(gy.download(), x);
  dropout_forward(gx.tensor(), gx.tensor(), site);
  EXPECT_TRUE(close("dropout_forward in place", gx.download(), y_ref));
}

TEST_P(PointwiseGpu, AddScaleCopyFillMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  std::vector<float> a = values(4), b = values(5);
  std::vector<float> sum_ref(a.size()), scaled_ref(a.size()), filled_ref(a.size());
  add(cpu(a), cpu(b), cpu(sum_ref));
  scale(cpu(a), -0.37f, cpu(scaled_ref));
  fill(cpu(filled_ref), round_through(GetParam().dtype, 1.25f));
  DeviceArray ga = device_array(), gb = device_array(), gout = device_array();
  ga.upload(a);
  gb.upload(b);
  add(ga.tensor(), gb.tensor(), gout.tensor());
  EXPECT_TRUE(close("add", gout.download(), sum_ref));
  scale(ga.tensor(), -0.37f, gout.tensor());
  EXPECT_TRUE(close("scale", gout.download(), scaled_ref));
  fill(gout.tensor(), 1.25f);
  EXPECT_EQ(gout.download(), filled_ref);
  copy(gb.tensor(), gout.tensor());
  EXPECT_EQ(gout.download(), b);
  add_inplace(ga.tensor(), gb.tensor());
  EXPECT_TRUE(close("add_inplace", ga.download(), sum_ref));
}

TEST_P(PointwiseGpu, MaskRowsMatchCpuForF32AndI64Masks) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape = GetParam().shape;
  Shape mask_shape;
  mask_shape.rank = shape.rank - 1;
  for (int i = 0; i < mask_shape.rank; ++i) mask_shape[i] = shape[i];
  std::vector<int64_t> mask_i64(static_cast<size_t>(mask_shape.numel()));
  std::vector<float> mask_f32(mask_i64.size());
  for (size_t r = 0; r < mask_i64.size(); ++r) {
    mask_i64[r] = r % 3 != 1;
    mask_f32[r] = static_cast<float>(mask_i64[r]);
  }
  std::vector<float> x = values(6), ref(x.size());
  mask_rows_forward(cpu(x), test::i64_view(mask_i64, mask_shape), cpu(ref));
  DeviceArray gx = device_array(), gout = device_array();
  DeviceArray gmask_i64(DType::i64, mask_shape), gmask_f32(DType::f32, mask_shape, GetParam().offset);
  gx.upload(x);
  gmask_i64.upload_raw(mask_i64);
  gmask_f32.upload(mask_f32);
  mask_rows_forward(gx.tensor(), gmask_i64.tensor(), gout.tensor());
  EXPECT_EQ(gout.download(), ref);  // multiplying by 0 or 1 is exact
  mask_rows_backward(gx.tensor(), gmask_f32.tensor(), gout.tensor());
  EXPECT_EQ(gout.download(), ref);
}

TEST_P(PointwiseGpu, SelectTokenForwardAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape s = GetParam().shape;
  const Shape full = s.rank == 3 ? s : Shape{2, s[0], s[1]};
  const Shape rows{full[0], full[2]};
  const DType dtype = GetParam().dtype;
  for (int64_t token : {int64_t{0}, full[1] - 1}) {
    std::vector<float> x = round_through(dtype, random_floats(full.numel(), 7)),
                       dout = round_through(dtype, random_floats(rows.numel(), 8));
    std::vector<float> out_ref(static_cast<size_t>(rows.numel())), dx_ref(x.size());
    select_token_forward(test::f32_view(x, full), token, test::f32_view(out_ref, rows));
    select_token_backward(test::f32_view(dout, rows), token, test::f32_view(dx_ref, full));
    DeviceArray gx(dtype, full, GetParam().offset), gdx(dtype, full, GetParam().offset);
    DeviceArray gout(dtype, rows, GetParam().offset), gdout(dtype, rows, GetParam().offset);
    gx.upload(x);
    gdout.upload(dout);
    gdx.upload(x);  // garbage that the backward must overwrite with zeros
    select_token_forward(gx.tensor(), token, gout.tensor());
    select_token_backward(gdout.tensor(), token, gdx.tensor());
    EXPECT_EQ(gout.download(), out_ref) << "token " << token;
    EXPECT_EQ(gdx.download(), dx_ref) << "token " << token;
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, PointwiseGpu, ::testing::ValuesIn(test::standard_gpu_cases()),
                         [](const auto& info) { return test::gpu_case_name(info.param); });

// Inputs of different alignment: the launcher must take the scalar path when any pointer is off.
TEST(PointwiseGpuMixed, AddWithOneMisalignedInputMatchesCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape{5, 333};
  std::vector<float> a = random_floats(shape.numel(), 9), b = random_floats(shape.numel(), 10), ref(a.size());
  add(test::f32_view(a, shape), test::f32_view(b, shape), test::f32_view(ref, shape));
  DeviceArray ga(DType::f32, shape), gb(DType::f32, shape, 3), gout(DType::f32, shape);
  ga.upload(a);
  gb.upload(b);
  add(ga.tensor(), gb.tensor(), gout.tensor());
  EXPECT_EQ(gout.download(), ref);
}

// The casts around a 16-bit model's f32 islands: copy between any two storage dtypes rounds to nearest even
// (exactly the host conversion), and add_inplace accumulates a 16-bit src into an f32 dst in f32.
TEST(PointwiseGpuMixed, CopyConvertsBetweenStorageDtypesExactly) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape{7, 131};
  const std::vector<float> x = random_floats(shape.numel(), 21, -300.0f, 300.0f);
  for (DType from : {DType::f32, DType::bf16, DType::f16}) {
    for (DType to : {DType::f32, DType::bf16, DType::f16}) {
      if (from == to) continue;
      const std::vector<float> in = round_through(from, x);
      DeviceArray src(from, shape), dst(to, shape, 1);  // dst one element off: no alignment assumed
      src.upload(in);
      copy(src.tensor(), dst.tensor());
      EXPECT_EQ(dst.download(), round_through(to, in)) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(PointwiseGpuMixed, AddInplaceAccumulatesSixteenBitIntoF32) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape shape{3, 517};
  for (DType src_dtype : {DType::bf16, DType::f16}) {
    const std::vector<float> acc = random_floats(shape.numel(), 31);
    const std::vector<float> src = round_through(src_dtype, random_floats(shape.numel(), 32));
    std::vector<float> ref(acc.size());
    for (size_t i = 0; i < acc.size(); ++i) ref[i] = acc[i] + src[i];  // one f32 addition, as the kernel
    DeviceArray gacc(DType::f32, shape), gsrc(src_dtype, shape);
    gacc.upload(acc);
    gsrc.upload(src);
    add_inplace(gacc.tensor(), gsrc.tensor());
    EXPECT_EQ(gacc.download(), ref) << dtype_name(src_dtype);
    // The other direction (an f32 src into a 16-bit dst) is not an accumulate this project needs: rejected.
    EXPECT_THROW(add_inplace(gsrc.tensor(), gacc.tensor()), Error);
  }
}

TEST(PointwiseGpuChecks, RejectsMixedDtypesAndHostTensors) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceArray a(DType::f32, Shape{4, 8}), b(DType::bf16, Shape{4, 8});
  EXPECT_THROW(add(a.tensor(), b.tensor(), a.tensor()), Error);
  std::vector<float> host(32);
  EXPECT_THROW(add(a.tensor(), test::f32_view(host, Shape{4, 8}), a.tensor()), Error);
  EXPECT_THROW(dropout_forward(a.tensor(), a.tensor(), DropoutSite{1.0f, 0, 0}), Error);
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
