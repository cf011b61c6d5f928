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
#include "tests/model/tiny_deberta.h"

namespace zt {
namespace {

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
  test::TinyModelSetup s(config);
  TrainingRun run;
  run.activation_bytes = s.model.activation_layout().total_bytes();
  for (uint64_t step : {5, 6}) {  // two micro-batches: different masks, gradients accumulated
    run.losses.push_back(s.model.forward(s.params, s.batch, {.training = true, .seed = 77, .step = step}));
    for (int k = 0; k <= config.num_hidden_layers; ++k)
      run.hidden.push_back(bits_of(s.model.hidden_state(k)));
    s.model.backward(s.params, s.grads);
  }
  for (const ParameterInfo& p : s.table.entries()) run.grads.push_back(bits_of(s.grads.tensor(p.name)));
  return run;
}

TEST(GradientCheckpointing, EqualsStoredActivationsBitForBit) {
  DebertaConfig stored = test::tiny_deberta_config(0.2, 3);
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
