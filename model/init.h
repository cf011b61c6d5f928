// From-scratch initialization as HF's DebertaV2PreTrainedModel._init_weights (transformers v5, which treats
// Conv1d like Linear; reference/deberta-v2.md §8):
//   Linear / Conv1d weight, word and relative embeddings  ~ N(0, initializer_range^2)
//   biases = 0;  LayerNorm weight = 1, bias = 0;  word_embeddings row pad_token_id = 0
// Values depend only on (seed, tensor name, element index), so any shard of a tensor can be initialized on
// its own and every machine draws the same model.
#pragma once

#include <cstdint>

#include "model/parameters.h"
#include "runtime/arena.h"

namespace zt {

// Fills every tensor of `table` inside `params` (an f32 host arena laid out by table.layout(DType::f32)).
void init_parameters(const DebertaConfig& config, const ParameterTable& table, const Arena& params,
                     uint64_t seed);

// Re-initializes one tensor (e.g. a classifier replaced for a new label count): normal for weights and
// embeddings, zero for biases, one/zero for LayerNorm weight/bias.
void init_parameter(const DebertaConfig& config, const ParameterInfo& info, const Tensor& tensor,
                    uint64_t seed);

}  // namespace zt
