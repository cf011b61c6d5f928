// Gradient checkpointing (DebertaConfig::gradient_checkpointing): the backward recomputes each encoder
// layer's forward instead of keeping every layer's activations. Same kernels, same inputs, same dropout
// masks, so the loss, the hidden states and every parameter gradient equal the stored-activation model's bit
// for bit — here on a tiny config with the conv layer, log buckets, padding, an ignored label and every
// dropout on, over two accumulated micro-batches; and the activation plan keeps one layer's activations.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/deberta.h"
#include "model/golden_init.h"
#include "model/parameters.h"
#include "runtime/arena.h"

namespace zt {
namespace {

DebertaConfig tiny_config() {
  DebertaConfig c = deberta_small_cpu_config();
  c.vocab_size = 50;
  c.hidden_size = 12;
  c.num_attention_heads = 3;
  c.attention_head_size = 4;
  c.intermediate_size = 20;
  c.num_hidden_layers = 3;
  c.position_buckets = 4;
  c.max_relative_positions = -1;
  c.max_position_embeddings = 16;
  c.pooler_hidden_size = 12;
  c.hidden_dropout_prob = 0.2;
  c.attention_probs_dropout_prob = 0.2;
  c.cls_dropout = 0.2;
  c.num_labels = 3;
  return c;
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  const std::span<const float> v(t.data_as<float>(), static_cast<size_t>(t.numel()));
  std::vector<uint32_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = std::bit_cast<uint32_t>(v[i]);
  return bits;
}

struct TrainingRun {
  std::vector<float> losses;
  std::vector<std::vector<uint32_t>> hidden, grads;
  size_t activation_bytes = 0;
};

TrainingRun train_two_micro_batches(const DebertaConfig& config) {
  const ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  Arena grads("grads", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true});
  for (const ParameterInfo& p : table.entries()) {
    Tensor t = params.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
  const int64_t B = 3, L = 9;
  std::vector<int64_t> ids = {1, 7, 9, 0, 12, 2,  30, 31, 2, 1, 4, 4, 2, 19,
                              2, 0, 0, 0, 1,  45, 2,  8,  2, 0, 0, 0, 0};
  std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<int64_t> labels = {2, -100, 1};
  const DebertaBatch batch{Tensor(ids.data(), {B, L}, DType::i64), Tensor(mask.data(), {B, L}, DType::i64),
                           Tensor(labels.data(), {B}, DType::i64)};
  DebertaForSequenceClassification model(config, B, L);
  TrainingRun run;
  run.activation_bytes = model.activation_layout().total_bytes();
  for (uint64_t step : {5, 6}) {  // two micro-batches: different masks, gradients accumulated
    run.losses.push_back(model.forward(params, batch, {.training = true, .seed = 77, .step = step}));
    for (int k = 0; k <= config.num_hidden_layers; ++k) run.hidden.push_back(bits_of(model.hidden_state(k)));
    model.backward(params, grads);
  }
  for (const ParameterInfo& p : table.entries()) run.grads.push_back(bits_of(grads.tensor(p.name)));
  return run;
}

TEST(GradientCheckpointing, EqualsStoredActivationsBitForBit) {
  DebertaConfig stored = tiny_config();
  ASSERT_TRUE(stored.has_conv());
  DebertaConfig checkpointed = stored;
  checkpointed.gradient_checkpointing = true;
  const TrainingRun a = train_two_micro_batches(stored), b = train_two_micro_batches(checkpointed);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(a.losses[i]), std::bit_cast<uint32_t>(b.losses[i])) << "loss " << i;
  EXPECT_EQ(a.hidden, b.hidden);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  const ParameterTable table(stored);
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << table.entries()[i].name;
  EXPECT_LT(b.activation_bytes, a.activation_bytes);
}

TEST(GradientCheckpointing, PlansOneLayerOfSavedActivations) {
  DebertaConfig c = deberta_v2_xlarge_config();
  const int64_t B = 40, L = 128;
  const ArenaLayout stored = DebertaForSequenceClassification::plan_activations(c, B, L, DType::bf16);
  c.gradient_checkpointing = true;
  const ArenaLayout checkpointed = DebertaForSequenceClassification::plan_activations(c, B, L, DType::bf16);
  EXPECT_TRUE(checkpointed.contains("layer0.probs"));
  EXPECT_FALSE(checkpointed.contains("layer1.probs"));
  EXPECT_TRUE(checkpointed.contains("hidden.24"));  // every layer's output stays: the recompute's input
  // Per layer at bs 40: q, k, v, ctx, s1, y, s2 (7 x 15.7 MB), f1 (63 MB), P (31.5 MB), the [S2, D] tables
  // and LayerNorm statistics: ~205 MB, of which 23 layers' worth (~4.4 GiB) are no longer planned.
  const double saved_gib = static_cast<double>(stored.total_bytes() - checkpointed.total_bytes()) / (1 << 30);
  EXPECT_GT(saved_gib, 4.0);
  EXPECT_LT(saved_gib, 5.0);
}

}  // namespace
}  // namespace zt
