// A tiny DeBERTa-v2 for whole-model CPU tests (finite differences, gradient checkpointing): every branch of
// the model runs — the conv layer, log-bucketed positions (midpoint 2 < L), padding, an ignored label,
// dropout at every site — in a few thousand parameters, with golden_init's deterministic values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/deberta.h"
#include "model/golden_init.h"
#include "model/parameters.h"
#include "runtime/arena.h"

namespace zt::test {

inline DebertaConfig tiny_deberta_config(double dropout, int64_t layers = 2) {
  DebertaConfig c = deberta_small_cpu_config();
  c.vocab_size = 50;
  c.hidden_size = 12;
  c.num_attention_heads = 3;
  c.attention_head_size = 4;
  c.intermediate_size = 20;
  c.num_hidden_layers = layers;
  c.position_buckets = 4;  // midpoint 2 < L: the log-bucket branch runs
  c.max_relative_positions = -1;
  c.max_position_embeddings = 16;
  c.pooler_hidden_size = 12;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  c.cls_dropout = dropout;
  c.num_labels = 3;
  return c;
}

// f32 parameters of `table` filled by golden_init.
inline void fill_golden_parameters(const ParameterTable& table, const Arena& params) {
  for (const ParameterInfo& p : table.entries()) {
    Tensor t = params.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
}

// Three rows of nine tokens: an id 0 inside a real row, a padded row, a shorter one; labels 2, ignored, 1.
struct TinyBatch {
  static constexpr int64_t kBatch = 3, kLength = 9;
  std::vector<int64_t> ids = {1, 7, 9, 0, 12, 2,  30, 31, 2, 1, 4, 4, 2, 19,
                              2, 0, 0, 0, 1,  45, 2,  8,  2, 0, 0, 0, 0};
  std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<int64_t> labels = {2, -100, 1};
  DebertaBatch view() {
    return {Tensor(ids.data(), {kBatch, kLength}, DType::i64),
            Tensor(mask.data(), {kBatch, kLength}, DType::i64), Tensor(labels.data(), {kBatch}, DType::i64)};
  }
};

// Golden-init f32 parameters of `config`, zeroed f32 gradients, the tiny batch and the model sized for it.
struct TinyModelSetup {
  explicit TinyModelSetup(const DebertaConfig& config)
      : table(config),
        params("params", table.layout(DType::f32)),
        grads("grads", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true}),
        batch(tiny.view()),
        model(config, TinyBatch::kBatch, TinyBatch::kLength) {
    fill_golden_parameters(table, params);
  }
  ParameterTable table;
  Arena params, grads;
  TinyBatch tiny;
  DebertaBatch batch;
  DebertaForSequenceClassification model;
};

}  // namespace zt::test
