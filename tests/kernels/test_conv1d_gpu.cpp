// conv1d_forward / conv1d_backward on CUDA tensors against the CPU reference (kernels/cpu/conv1d.cpp), in
// f32, bf16 and f16 storage, on inputs rounded to the storage dtype.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/kernels/layer_gpu_check.h"
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
  int64_t batch, length, in_features, out_features, kernel;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

class Conv1dGpu : public ::testing::TestWithParam<Case> {};

TEST_P(Conv1dGpu, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const test::LayerShapes shapes{Shape{c.batch, c.length, c.in_features},
                                 Shape{c.out_features, c.in_features, c.kernel},
                                 Shape{c.batch, c.length, c.out_features}, c.out_features};
  test::expect_layer_matches_cpu(
      c.dtype, shapes, 21,
      [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) { conv1d_forward(x, w, b, y); },
      [](const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
         const Tensor& db, bool accumulate_dx) { conv1d_backward(dy, x, w, dx, dw, db, accumulate_dx); });
}

TEST(Conv1dGpuNoBias, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Shape x_shape{2, 9, 6}, y_shape{2, 9, 4}, w_shape{4, 6, 3};
  std::vector<float> x = test::random_uniform(x_shape.numel(), 31),
                     w = test::random_uniform(w_shape.numel(), 32);
  std::vector<float> y_ref(y_shape.numel());
  conv1d_forward(Tensor(x.data(), x_shape, DType::f32), Tensor(w.data(), w_shape, DType::f32), Tensor(),
                 Tensor(y_ref.data(), y_shape, DType::f32));
  auto gx = to_device(x, x_shape, DType::f32), gw = to_device(w, w_shape, DType::f32);
  auto gy = to_device(std::vector<float>(y_shape.numel(), 3.0f), y_shape, DType::f32);
  conv1d_forward(gx.tensor, gw.tensor, Tensor(), gy.tensor);
  EXPECT_TRUE(all_close("y", to_host(gy.tensor), y_ref, test::tolerance_for(DType::f32)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv1dGpu,
                         ::testing::Values(Case{"f32_5_to_7_L11", DType::f32, 2, 11, 5, 7, 3},
                                           Case{"bf16_5_to_7_L11", DType::bf16, 2, 11, 5, 7, 3},
                                           Case{"f16_5_to_7_L11", DType::f16, 2, 11, 5, 7, 3},
                                           Case{"f32_24_to_16_L137", DType::f32, 3, 137, 24, 16, 3},
                                           Case{"bf16_64_to_64_L137", DType::bf16, 2, 137, 64, 64, 3},
                                           Case{"f32_k5_L4", DType::f32, 2, 4, 3, 5, 5}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace zt::kernels

#else
// A build without nvcc has no CUDA kernels to test.
TEST(Conv1dGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
