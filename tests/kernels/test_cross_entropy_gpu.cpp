// GPU cross-entropy against the CPU reference: several class counts, ignored labels, all rows ignored,
// large logits; a label >= C makes the loss NaN instead of throwing.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cross_entropy.h"
#include "tests/kernels/tensor_views.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::DeviceArray;
using test::random_floats;

struct CrossEntropyCase {
  int64_t rows, classes;
  int ignore_every;  // every k-th label is -100 (0: none; 1: all)
};

class CrossEntropyGpu : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyGpu, LossAndGradientMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const CrossEntropyCase c = GetParam();
  const Shape shape{c.rows, c.classes};
  std::vector<float> logits = random_floats(shape.numel(), 41, -30.0f, 30.0f);
  std::vector<int64_t> labels(static_cast<size_t>(c.rows));
  for (int64_t n = 0; n < c.rows; ++n) {
    labels[static_cast<size_t>(n)] =
        c.ignore_every > 0 && n % c.ignore_every == 0 ? -100 : (n * 5) % c.classes;
  }
  std::vector<float> loss_ref(1), dlogits_ref(logits.size());
  cross_entropy_forward(test::f32_view(logits, shape), test::i64_view(labels, Shape{c.rows}),
                        test::f32_view(loss_ref, Shape{1}));
  cross_entropy_backward(test::f32_view(logits, shape), test::i64_view(labels, Shape{c.rows}), 0.75f,
                         test::f32_view(dlogits_ref, shape));
  DeviceArray glogits(DType::f32, shape), glabels(DType::i64, Shape{c.rows}), gloss(DType::f32, Shape{1});
  DeviceArray gdlogits(DType::f32, shape);
  glogits.upload(logits);
  glabels.upload_raw(labels);
  gdlogits.upload(random_floats(shape.numel(), 42));  // overwritten
  cross_entropy_forward(glogits.tensor(), glabels.tensor(), gloss.tensor());
  cross_entropy_backward(glogits.tensor(), glabels.tensor(), 0.75f, gdlogits.tensor());
  EXPECT_TRUE(test::all_close("loss", gloss.download(), loss_ref, test::tolerance_for(DType::f32)));
  EXPECT_TRUE(test::all_close("dlogits", gdlogits.download(), dlogits_ref, test::tolerance_for(DType::f32)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyGpu,
                         ::testing::Values(CrossEntropyCase{32, 2, 0}, CrossEntropyCase{37, 3, 4},
                                           CrossEntropyCase{7, 1001, 3}, CrossEntropyCase{300, 2, 7},
                                           CrossEntropyCase{5, 2, 1}),
                         [](const auto& info) {
                           return std::to_string(info.param.rows) + "x" + std::to_string(info.param.classes) +
                                  "_ignore" + std::to_string(info.param.ignore_every);
                         });

TEST(CrossEntropyGpuBadLabel, LabelAtOrAboveClassCountGivesNanLoss) {
  ZT_SKIP_WITHOUT_GPU();
  std::vector<int64_t> labels = {0, 2, 1};
  DeviceArray glogits(DType::f32, Shape{3, 2}), glabels(DType::i64, Shape{3}), gloss(DType::f32, Shape{1});
  glogits.upload(random_floats(6, 43));
  glabels.upload_raw(labels);
  cross_entropy_forward(glogits.tensor(), glabels.tensor(), gloss.tensor());
  EXPECT_TRUE(std::isnan(gloss.download()[0]));
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
