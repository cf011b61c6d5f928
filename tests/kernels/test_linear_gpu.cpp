// linear_forward / linear_backward on CUDA tensors against the CPU reference (kernels/cpu/linear.cpp), in
// f32, bf16 and f16 storage. The reference runs on the inputs rounded to the storage dtype, so the only
// differences are the GPU's accumulation order and its rounding of outputs.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/linear.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/kernels/layer_gpu_check.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/finite_difference.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;
using test::round_to;
using test::to_device;
using test::to_host;

struct Case {
  std::string name;
  DType dtype;
  int64_t batch, length, in_features, out_features;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

class LinearGpu : public ::testing::TestWithParam<Case> {};

TEST_P(LinearGpu, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const test::LayerShapes shapes{Shape{c.batch, c.length, c.in_features},
                                 Shape{c.out_features, c.in_features},
                                 Shape{c.batch, c.length, c.out_features}, c.out_features};
  test::expect_layer_matches_cpu(
      c.dtype, shapes, 1,
      [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) { linear_forward(x, w, b, y); },
      [](const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
         const Tensor& db, bool accumulate_dx) { linear_backward(dy, x, w, dx, dw, db, accumulate_dx); });
}

TEST_P(LinearGpu, NoBiasMatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const int64_t rows = c.batch * c.length;
  const Shape x_shape{c.batch, c.length, c.in_features}, y_shape{c.batch, c.length, c.out_features};
  const Shape w_shape{c.out_features, c.in_features};
  std::vector<float> x = round_to(test::random_uniform(rows * c.in_features, 11), c.dtype);
  std::vector<float> w = round_to(test::random_uniform(c.out_features * c.in_features, 12), c.dtype);
  std::vector<float> y_ref(rows * c.out_features);
  linear_forward(Tensor(x.data(), x_shape, DType::f32), Tensor(w.data(), w_shape, DType::f32), Tensor(),
                 Tensor(y_ref.data(), y_shape, DType::f32));
  auto gx = to_device(x, x_shape, c.dtype), gw = to_device(w, w_shape, c.dtype);
  auto gy = to_device(std::vector<float>(rows * c.out_features, 0.0f), y_shape, c.dtype);
  linear_forward(gx.tensor, gw.tensor, Tensor(), gy.tensor);
  EXPECT_TRUE(all_close("y", to_host(gy.tensor), y_ref, test::tolerance_for(c.dtype)));
  // A second call of the same shape reuses the cached cuBLASLt plan.
  const int64_t plans = gemm_cached_plan_count();
  linear_forward(gx.tensor, gw.tensor, Tensor(), gy.tensor);
  EXPECT_EQ(gemm_cached_plan_count(), plans);
}

// Awkward sizes: 5 and 7 features (unaligned 16-bit rows take the cuBLAS fallback), 11 tokens.
INSTANTIATE_TEST_SUITE_P(Shapes, LinearGpu,
                         ::testing::Values(Case{"f32_24_to_40", DType::f32, 2, 11, 24, 40},
                                           Case{"bf16_24_to_40", DType::bf16, 2, 11, 24, 40},
                                           Case{"f16_24_to_40", DType::f16, 2, 11, 24, 40},
                                           Case{"f32_5_to_7", DType::f32, 3, 7, 5, 7},
                                           Case{"bf16_5_to_7", DType::bf16, 3, 7, 5, 7},
                                           Case{"f16_5_to_7", DType::f16, 3, 7, 5, 7},
                                           Case{"bf16_256_to_384", DType::bf16, 4, 37, 256, 384}),
                         [](const auto& info) { return info.param.name; });

// The bias gradient's column sums read 16 bytes per row lane when dy allows (out_features a multiple of the
// pack, dy aligned) and one element otherwise, summing every column in the same order: an aligned and a
// misaligned copy of dy give the same bits.
TEST(LinearGpuBiasGradient, BitIdenticalWhateverTheAlignment) {
  ZT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t rows = 517, in = 64, out = 1000;
    const std::vector<float> dy = test::round_through(dtype, test::random_floats(rows * out, 61));
    test::DeviceArray x(dtype, Shape{rows, in}), w(dtype, Shape{out, in});
    x.upload(test::round_through(dtype, test::random_floats(rows * in, 62)));
    w.upload(test::round_through(dtype, test::random_floats(out * in, 63)));
    std::vector<std::vector<float>> sums;
    for (int64_t offset : {0, 1}) {
      test::DeviceArray gdy(dtype, Shape{rows, out}, offset), db(DType::f32, Shape{out});
      gdy.upload(dy);
      db.upload(std::vector<float>(static_cast<size_t>(out), 0.25f));
      linear_backward(gdy.tensor(), x.tensor(), w.tensor(), Tensor(), Tensor(), db.tensor());
      sums.push_back(db.download());
    }
    EXPECT_TRUE(all_close("dbias, misaligned vs aligned dy", sums[1], sums[0], {0, 0}));
  }
}

// GradWrite::overwrite: dW (the GEMM with beta = 0) and db (the column sums stored as 0 + sum) written over
// NaN, which a read would keep, equal to the accumulation onto zeros.
TEST(LinearGpuGradWrite, OverwriteEqualsAccumulatingOntoZeros) {
  ZT_SKIP_WITHOUT_GPU();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t rows = 300, in = 96, out = 200;
    test::DeviceArray dy(dtype, Shape{rows, out}), x(dtype, Shape{rows, in}), w(dtype, Shape{out, in});
    dy.upload(test::round_through(dtype, test::random_floats(rows * out, 71)));
    x.upload(test::round_through(dtype, test::random_floats(rows * in, 72)));
    w.upload(test::round_through(dtype, test::random_floats(out * in, 73)));
    std::vector<std::vector<float>> grads;
    for (const GradWrite write : {GradWrite::accumulate, GradWrite::overwrite}) {
      const float init = write == GradWrite::overwrite ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      test::DeviceArray dw(DType::f32, Shape{out, in}), db(DType::f32, Shape{out});
      dw.upload(std::vector<float>(static_cast<size_t>(out * in), init));
      db.upload(std::vector<float>(static_cast<size_t>(out), init));
      linear_backward(dy.tensor(), x.tensor(), w.tensor(), Tensor(), dw.tensor(), db.tensor(), false, write);
      grads.push_back(dw.download());
      grads.push_back(db.download());
    }
    EXPECT_TRUE(all_close("dW written", grads[2], grads[0], {0, 0}));
    EXPECT_TRUE(all_close("db written", grads[3], grads[1], {0, 0}));
  }
}

TEST(LinearGpuArgs, RejectsMixedDtypes) {
  ZT_SKIP_WITHOUT_GPU();
  auto x = to_device(std::vector<float>(6, 1.0f), Shape{2, 3}, DType::bf16);
  auto w = to_device(std::vector<float>(12, 1.0f), Shape{4, 3}, DType::f32);
  auto y = to_device(std::vector<float>(8, 0.0f), Shape{2, 4}, DType::bf16);
  EXPECT_THROW(linear_forward(x.tensor, w.tensor, Tensor(), y.tensor), Error);
}

}  // namespace
}  // namespace zt::kernels

#else
// A build without nvcc has no CUDA kernels to test.
TEST(LinearGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
