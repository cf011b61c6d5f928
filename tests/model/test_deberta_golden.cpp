// Whole-model parity with HF transformers: DebertaV2ForSequenceClassification with the deterministic golden
// init (model/golden_init.h), forward + backward on the CPU, against fixtures written by
// tools/golden/make_model_fixtures.py. Logits, loss, every hidden state and EVERY parameter gradient are
// compared elementwise with the f32 tolerance policy (tests/support/tolerance.h); for large tensors the
// fixture holds a fixed sample of elements plus the exact sum and L2 norm.
#include "tests/model/golden_case.h"

namespace zt {
namespace {

using golden::GoldenCase;
using test::Fixture;

class DebertaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DebertaGolden, InitMatchesFixtureSamples) {
  GoldenCase c(GetParam());
  for (const std::string& name : c.fixture.names("param_sample")) {
    std::vector<int64_t> index = c.fixture.read_i64("param_sample/" + name + "/index");
    std::vector<float> value = c.fixture.read_f32("param_sample/" + name + "/value");
    const float* p = c.params.tensor(name).data_as<float>();
    for (size_t i = 0; i < index.size(); ++i)
      ASSERT_EQ(p[index[i]], value[i]) << name << "[" << index[i] << "]";
  }
}

TEST_P(DebertaGolden, LogitsLossHiddenStatesAndEveryGradient) {
  GoldenCase c(GetParam());
  golden::check_step_against_fixture(c, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DebertaGolden,
                         ::testing::Values("deberta_tiny.h5", "deberta_tiny_padded.h5",
                                           "deberta_xlarge_layout.h5", "deberta_v3_tiny_3class.h5",
                                           "deberta_v3_tiny_regression.h5"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

// Past 512 tokens: deberta_long.h5 (L 777 > max_position_embeddings 512, relative positions only; 16 log
// buckets, so distances past ~512 clamp to the last bucket; row 1 padded from 530), with each attention
// core: automatic (the stored-probabilities path at this length on the CPU, today) and flash.
using Kernel = DebertaConfig::AttentionKernel;
class DebertaGoldenLong : public ::testing::TestWithParam<Kernel> {};

TEST_P(DebertaGoldenLong, LogitsLossHiddenStatesAndEveryGradient) {
  GoldenCase c("deberta_long.h5", DeviceKind::cpu, DType::f32, GetParam());
  ASSERT_GT(c.seq, 512);
  ASSERT_GT(c.seq, c.config.max_position_embeddings);
  ASSERT_FALSE(c.config.position_biased_input);
  const bool flash = DebertaForSequenceClassification::uses_flash_attention(c.config, c.seq, DType::f32);
  EXPECT_TRUE(flash || GetParam() != Kernel::flash) << "flash asked for, not run";
  golden::check_step_against_fixture(c, flash ? "long, flash attention" : "long, stored attention");
}

INSTANTIATE_TEST_SUITE_P(AttentionKernels, DebertaGoldenLong,
                         ::testing::Values(Kernel::automatic, Kernel::flash),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return info.param == Kernel::flash ? "flash" : "automatic";
                         });

}  // namespace
}  // namespace zt
