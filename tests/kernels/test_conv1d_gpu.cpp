// conv1d_forward / conv1d_backward on CUDA tensors against the CPU reference (kernels/cpu/conv1d.cpp), in
// f32, bf16 and f16 storage, on inputs rounded to the storage dtype, in both unfolded column orders.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "tests/kernels/gemm_gpu_test_util.h"
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
  const Shape x_shape{c.batch, c.length, c.in_features}, y_shape{c.batch, c.length, c.out_features};
  const Shape w_shape{c.out_features, c.in_features, c.kernel};
  const int64_t nx = x_shape.numel(), ny = y_shape.numel(), nw = w_shape.numel();
  std::vector<float> x = round_to(test::random_uniform(nx, 21), c.dtype);
  std::vector<float> w = round_to(test::random_uniform(nw, 22), c.dtype);
  std::vector<float> b = round_to(test::random_uniform(c.out_features, 23), c.dtype);
  std::vector<float> dy = round_to(test::random_uniform(ny, 24), c.dtype);
  std::vector<float> dx_initial = round_to(test::random_uniform(nx, 25), c.dtype);
  std::vector<float> dw_initial = test::random_uniform(nw, 26),
                     db_initial = test::random_uniform(c.out_features, 27);

  std::vector<float> y_ref(ny), dx_ref(nx), dx_acc_ref = dx_initial, dw_ref = dw_initial, db_ref = db_initial;
  const auto f32 = [](std::vector<float>& v, Shape s) { return Tensor(v.data(), s, DType::f32); };
  conv1d_forward(f32(x, x_shape), f32(w, w_shape), f32(b, Shape{c.out_features}), f32(y_ref, y_shape));
  conv1d_backward(f32(dy, y_shape), f32(x, x_shape), f32(w, w_shape), f32(dx_ref, x_shape),
                  f32(dw_ref, w_shape), f32(db_ref, Shape{c.out_features}));
  conv1d_backward(f32(dy, y_shape), f32(x, x_shape), f32(w, w_shape), f32(dx_acc_ref, x_shape), Tensor(),
                  Tensor(),
                  /*accumulate_dx=*/true);

  // Both unfolded column orders (kernels/cuda/conv1d.cu): tap-major, and ZT_CONV_CHANNEL_MAJOR=1.
  struct EnvGuard {
    ~EnvGuard() { unsetenv("ZT_CONV_CHANNEL_MAJOR"); }
  } guard;
  for (const char* channel_major : {"0", "1"}) {
    SCOPED_TRACE(std::string("ZT_CONV_CHANNEL_MAJOR=") + channel_major);
    ASSERT_EQ(setenv("ZT_CONV_CHANNEL_MAJOR", channel_major, 1), 0);
    auto gx = to_device(x, x_shape, c.dtype), gw = to_device(w, w_shape, c.dtype);
    auto gb = to_device(b, Shape{c.out_features}, c.dtype), gdy = to_device(dy, y_shape, c.dtype);
    auto gy = to_device(std::vector<float>(ny, 0.0f), y_shape, c.dtype);
    auto gdx = to_device(std::vector<float>(nx, 5.0f), x_shape, c.dtype);
    auto gdx_acc = to_device(dx_initial, x_shape, c.dtype);
    auto gdw = to_device(dw_initial, w_shape, DType::f32);
    auto gdb = to_device(db_initial, Shape{c.out_features}, DType::f32);
    conv1d_forward(gx.tensor, gw.tensor, gb.tensor, gy.tensor);
    conv1d_backward(gdy.tensor, gx.tensor, gw.tensor, gdx.tensor, gdw.tensor, gdb.tensor);
    conv1d_backward(gdy.tensor, gx.tensor, gw.tensor, gdx_acc.tensor, Tensor(), Tensor(),
                    /*accumulate_dx=*/true);

    const test::Tolerance tol = test::tolerance_for(c.dtype);
    EXPECT_TRUE(all_close("y", to_host(gy.tensor), y_ref, tol));
    EXPECT_TRUE(all_close("dx", to_host(gdx.tensor), dx_ref, tol));
    EXPECT_TRUE(all_close("dx accumulated", to_host(gdx_acc.tensor), dx_acc_ref, tol));
    EXPECT_TRUE(all_close("dweight", to_host(gdw.tensor), dw_ref, tol));
    EXPECT_TRUE(all_close("dbias", to_host(gdb.tensor), db_ref, tol));
  }
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
