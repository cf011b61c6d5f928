#include "model/init.h"

#include <cmath>
#include <numbers>

#include "model/golden_init.h"
#include "runtime/parallel_blocks.h"

namespace zt {

namespace {

// splitmix64 finalizer: a well-mixed 64-bit hash of a counter.
uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in (0, 1) from 53 random bits; never exactly 0 so the logarithm below is finite.
double unit_open(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal for element `index` of the stream `key` (Box-Muller on two hashed uniforms).
double normal(uint64_t key, int64_t index) {
  const uint64_t base = key + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
  const double u1 = unit_open(mix64(base ^ 0x5851F42D4C957F2Dull));
  const double u2 = unit_open(mix64(base ^ 0x14057B7EF767814Full));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace

void init_parameter(const DebertaConfig& config, const ParameterInfo& info, const Tensor& tensor,
                    uint64_t seed) {
  ZT_CHECK(tensor.shape() == info.shape, "init of ", info.name, ": tensor ", tensor.describe(),
           " does not match ", info.shape.to_string());
  float* out = tensor.data_as<float>();
  const int64_t n = tensor.numel();
  switch (info.kind) {
    case ParamKind::bias:
    case ParamKind::layernorm_bias:
      for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
      return;
    case ParamKind::layernorm_weight:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      return;
    case ParamKind::weight:
    case ParamKind::embedding: {
      const uint64_t key = mix64(seed) ^ fnv1a64(info.name);
      const double std = config.initializer_range;
      // Every element is a pure function of (key, i), so blocks on several threads give the same values as
      // one loop: the xlarge model's 887M normals take seconds instead of half a minute.
      detail::run_element_blocks_in_parallel(n, 0, [&](int64_t, int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(std * normal(key, i));
      });
      if (info.name == "deberta.embeddings.word_embeddings.weight" && config.pad_token_id) {
        const int64_t row = *config.pad_token_id, dim = info.shape[1];
        for (int64_t j = 0; j < dim; ++j) out[row * dim + j] = 0.0f;
      }
      return;
    }
  }
}

void init_parameters(const DebertaConfig& config, const ParameterTable& table, const Arena& params,
                     uint64_t seed) {
  for (const ParameterInfo& info : table.entries())
    init_parameter(config, info, params.tensor(info.name), seed);
}

}  // namespace zt
