// The model with the flash attention (DebertaConfig::attention_kernel, kernels/disentangled_attention.h):
// the same loss, hidden states and parameter gradients as with the stored-probabilities attention (within
// f32 tolerance: the flash path sums P~ V a row at a time), with the tiny config's conv layer, log buckets,
// padding and every dropout on, also under gradient checkpointing; and the activation plan, which keeps the
// softmax statistics instead of [B, N, L, L] and grows linearly in L.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/deberta.h"
#include "model/parameters.h"
#include "runtime/arena.h"
#include "tests/model/tiny_deberta.h"
#include "tests/support/tolerance.h"

namespace zt {
namespace {

using Kernel = DebertaConfig::AttentionKernel;

std::vector<float> values_of(const Tensor& t) {
  const std::span<const float> v(t.data_as<float>(), static_cast<size_t>(t.numel()));
  return {v.begin(), v.end()};
}

// Gradients of the tiny model are ~1e-4..1e-2: scaled up so that f32's rtol, not its atol, decides.
constexpr float kLossScale = 4096.0f;

struct TrainingRun {
  std::vector<float> losses;
  std::vector<std::vector<float>> hidden, grads;
};

TrainingRun train_two_micro_batches(const DebertaConfig& config) {
  test::TinyModelSetup s(config);
  TrainingRun run;
  for (uint64_t step : {5, 6}) {
    run.losses.push_back(s.model.forward(s.params, s.batch, {.training = true, .seed = 77, .step = step}));
    for (int k = 0; k <= config.num_hidden_layers; ++k)
      run.hidden.push_back(values_of(s.model.hidden_state(k)));
    s.model.backward(s.params, s.grads, kLossScale);
  }
  for (const ParameterInfo& p : s.table.entries()) run.grads.push_back(values_of(s.grads.tensor(p.name)));
  return run;
}

void expect_same_training(const DebertaConfig& flash_config) {
  DebertaConfig stored_config = flash_config;
  stored_config.attention_kernel = Kernel::stored;
  const TrainingRun a = train_two_micro_batches(stored_config), b = train_two_micro_batches(flash_config);
  const test::Tolerance tol = test::tolerance_for(DType::f32);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5f) << "loss " << i;
  for (size_t i = 0; i < a.hidden.size(); ++i)
    EXPECT_TRUE(test::all_close("hidden", b.hidden[i], a.hidden[i], tol));
  const ParameterTable table(flash_config);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(test::all_close(table.entries()[i].name, b.grads[i], a.grads[i], tol));
}

TEST(FlashAttentionModel, TrainsLikeTheStoredPath) {
  DebertaConfig c = test::tiny_deberta_config(0.2, 3);
  c.attention_kernel = Kernel::flash;
  expect_same_training(c);
}

TEST(FlashAttentionModel, TrainsLikeTheStoredPathWithCheckpointing) {
  DebertaConfig c = test::tiny_deberta_config(0.2, 2);
  c.attention_kernel = Kernel::flash;
  c.gradient_checkpointing = true;
  expect_same_training(c);
}

// Automatic: flash from 1024 tokens in 16 bits at head size 64 (measured faster there; the stored path at
// 512), and past the stored path's limit whatever the dtype.
TEST(FlashAttentionModel, AutomaticChoosesFlashWhereItIsFasterOrTheOnlyPath) {
  const DebertaConfig c = deberta_v2_xlarge_config();
  EXPECT_FALSE(DebertaForSequenceClassification::uses_flash_attention(c, 512, DType::bf16));
  EXPECT_FALSE(DebertaForSequenceClassification::uses_flash_attention(c, 1023, DType::bf16));
  EXPECT_TRUE(DebertaForSequenceClassification::uses_flash_attention(c, 1024, DType::bf16));
  EXPECT_TRUE(DebertaForSequenceClassification::uses_flash_attention(c, 1024, DType::f16));
  EXPECT_FALSE(DebertaForSequenceClassification::uses_flash_attention(c, 1024, DType::f32));
  EXPECT_TRUE(DebertaForSequenceClassification::uses_flash_attention(c, 1025, DType::bf16));
  EXPECT_TRUE(DebertaForSequenceClassification::uses_flash_attention(c, 1025, DType::f32));
  DebertaConfig forced = c;
  forced.attention_kernel = Kernel::flash;
  EXPECT_TRUE(DebertaForSequenceClassification::uses_flash_attention(forced, 128, DType::bf16));
  forced.attention_kernel = Kernel::stored;
  EXPECT_FALSE(DebertaForSequenceClassification::uses_flash_attention(forced, 4096, DType::bf16));
}

// xlarge bf16 at batch 1: with the flash attention the plan holds stats, not probs, and doubling L doubles
// the growth (linear); the stored plan at 2048 would hold 24 x [1, 24, 2048, 2048] bf16 = 4.5 GiB of P alone.
TEST(FlashAttentionModel, PlanIsLinearInLength) {
  const DebertaConfig c = deberta_v2_xlarge_config();
  auto bytes = [&](int64_t L) {
    return static_cast<double>(
        DebertaForSequenceClassification::plan_activations(c, 1, L, DType::bf16).total_bytes());
  };
  const ArenaLayout plan = DebertaForSequenceClassification::plan_activations(c, 1, 2048, DType::bf16);
  EXPECT_TRUE(plan.contains("layer0.softmax_stats"));
  EXPECT_FALSE(plan.contains("layer0.probs"));
  const double step_4k = bytes(4096) - bytes(2048), step_8k = bytes(8192) - bytes(4096);
  EXPECT_NEAR(step_8k / step_4k, 2.0, 0.01);
  EXPECT_LT(bytes(16384), 20.0 * (1 << 30));  // ~1.1 MiB per token over the 24 layers
}

}  // namespace
}  // namespace zt
