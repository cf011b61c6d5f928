// GPU mean squared error against the CPU reference: several row counts (one warp, several, more rows than
// threads), NaN-ignored rows, all rows ignored.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/mse_loss.h"
#include "tests/kernels/tensor_views.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::DeviceArray;
using test::random_floats;

struct MseCase {
  int64_t rows;
  int ignore_every;  // every k-th target is NaN (0: none; 1: all)
};

class MseLossGpu : public ::testing::TestWithParam<MseCase> {};

TEST_P(MseLossGpu, LossAndGradientMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const MseCase c = GetParam();
  const Shape shape{c.rows, 1};
  std::vector<float> z = random_floats(c.rows, 51, -3.0f, 3.0f);
  std::vector<float> y = random_floats(c.rows, 52, 0.0f, 5.0f);
  for (int64_t n = 0; n < c.rows; ++n) {
    if (c.ignore_every > 0 && n % c.ignore_every == 0)
      y[static_cast<size_t>(n)] = std::numeric_limits<float>::quiet_NaN();
  }
  std::vector<float> loss_ref(1), dz_ref(z.size());
  mse_loss_forward(test::f32_view(z, shape), test::f32_view(y, Shape{c.rows}),
                   test::f32_view(loss_ref, Shape{1}));
  mse_loss_backward(test::f32_view(z, shape), test::f32_view(y, Shape{c.rows}), 0.75f,
                    test::f32_view(dz_ref, shape));
  DeviceArray gz(DType::f32, shape), gy(DType::f32, Shape{c.rows}), gloss(DType::f32, Shape{1});
  DeviceArray gdz(DType::f32, shape);
  gz.upload(z);
  gy.upload(y);
  gdz.upload(random_floats(c.rows, 53));  // overwritten
  mse_loss_forward(gz.tensor(), gy.tensor(), gloss.tensor());
  mse_loss_backward(gz.tensor(), gy.tensor(), 0.75f, gdz.tensor());
  EXPECT_TRUE(test::all_close("loss", gloss.download(), loss_ref, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("dz", gdz.download(), dz_ref, test::tolerance_for(DType::f32)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MseLossGpu,
                         ::testing::Values(MseCase{8, 0}, MseCase{37, 4}, MseCase{700, 3}, MseCase{5, 1}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "_ignore" +
                                  std::to_string(info.param.ignore_every);
                         });

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
