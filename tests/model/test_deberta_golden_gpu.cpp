// The whole model on the GPU in f32 against the same HF golden fixtures and tolerance as the CPU test
// (tests/model/test_deberta_golden.cpp): logits, loss, hidden states and every parameter gradient.
#include "tests/model/golden_case.h"
#include "tests/support/gpu.h"

namespace zt {
namespace {

class DebertaGoldenGpu : public ::testing::TestWithParam<const char*> {};

TEST_P(DebertaGoldenGpu, F32LogitsLossHiddenStatesAndEveryGradient) {
  ZT_SKIP_WITHOUT_GPU();
  golden::GoldenCase c(GetParam(), DeviceKind::cuda);
  golden::check_step_against_fixture(c, std::string("gpu ") + GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DebertaGoldenGpu,
                         ::testing::Values("deberta_tiny.h5", "deberta_tiny_padded.h5",
                                           "deberta_xlarge_layout.h5", "deberta_v3_tiny_3class.h5",
                                           "deberta_v3_tiny_regression.h5"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

// Past 512 tokens in f32: the automatic attention runs the stored-probabilities kernels at L 777 (the flash
// kernels take 16-bit inputs only; tests/model/test_deberta_mixed_precision_gpu.cpp runs them on this file).
TEST(DebertaGoldenGpuLong, F32LogitsLossHiddenStatesAndEveryGradient) {
  ZT_SKIP_WITHOUT_GPU();
  golden::GoldenCase c("deberta_long.h5", DeviceKind::cuda);
  ASSERT_GT(c.seq, c.config.max_position_embeddings);
  golden::check_step_against_fixture(c, "gpu deberta_long");
}

}  // namespace
}  // namespace zt
