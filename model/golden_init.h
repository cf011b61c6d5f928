// Deterministic "golden" initialization: every parameter element is a pure function of (tensor name, flat
// index), computed identically by tools/golden/golden_init.py, so HF golden fixtures need not store weights.
//
//   key = FNV-1a 64 of the UTF-8 name            (offset 0xcbf29ce484222325, prime 0x100000001b3)
//   x   = key + (index + 1) * 0x9E3779B97F4A7C15  (mod 2^64)
//   h   = splitmix64 finalizer of x
//   u   = float32((int64(h >> 40) - 2^23) * 2^-23), exact, in [-1, 1)
//   weight / embedding: u * 2^-4    bias: u * 2^-6
//   layernorm_weight: float32(1) + float32(u * 2^-3) (one rounded f32 add)    layernorm_bias: u * 2^-5
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace zt {

enum class ParamKind : uint8_t {
  weight,            // Linear / Conv1d weight
  bias,              // Linear / Conv1d bias
  layernorm_weight,  // LayerNorm gamma
  layernorm_bias,    // LayerNorm beta
  embedding,         // nn.Embedding tables (word_embeddings, rel_embeddings)
};
std::string_view param_kind_name(ParamKind kind);

uint64_t fnv1a64(std::string_view bytes);
// u in [-1, 1) for element `index` of tensor `name`.
float golden_init_unit(std::string_view name, int64_t index);
float golden_init_value(std::string_view name, int64_t index, ParamKind kind);
// out[i] = golden_init_value(name, first_index + i, kind): a whole tensor, or one shard of it.
void golden_init_fill(std::string_view name, ParamKind kind, std::span<float> out, int64_t first_index = 0);

}  // namespace zt
