// The parameter type and relative-position configurations of the disentangled-attention GPU tests
// (test_disentangled_attention_gpu.cpp for the stored path, and the flash path's suites), so they describe
// their cases the same way.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "kernels/disentangled_attention.h"
#include "kernels/relative_position.h"
#include "runtime/dtype.h"

namespace zt::test {

// One case: storage dtype, [B, L, N * d] activations, the positional terms that are on, dropout p.
struct AttentionCase {
  std::string name;
  DType dtype;
  int64_t batch, length, heads, head_size;
  kernels::RelativePositionConfig positions;
  bool c2p, p2c;
  float dropout_p;
};

// GoogleTest names a parameter by PrintTo (found by argument-dependent lookup): the case's name.
inline void PrintTo(const AttentionCase& c, std::ostream* out) {
  *out << c.name;
}

// buckets 8, max_position 64: L > 4 runs past the midpoint 4 into the log buckets.
inline kernels::RelativePositionConfig tiny_buckets() {
  return kernels::RelativePositionConfig::from_model_config(8, -1, 64);
}
// buckets 16, max_relative_positions 64: at L > 64 the outer diagonals are clamped.
inline kernels::RelativePositionConfig clamped_buckets() {
  return kernels::RelativePositionConfig::from_model_config(16, 64, 512);
}
inline kernels::RelativePositionConfig unbucketed() {
  return kernels::RelativePositionConfig::from_model_config(-1, 4, 512);
}
// deberta-v2-xlarge: 256 buckets over 512 positions.
inline kernels::RelativePositionConfig xlarge_buckets() {
  return kernels::RelativePositionConfig::from_model_config(256, -1, 512);
}

// The attention config of a case: its heads, positional terms and dropout p, the dropout stream drawn from
// seed 0x5eed1234 and `site_id`.
inline kernels::DisentangledAttentionConfig attention_config(const AttentionCase& c, uint64_t site_id) {
  kernels::DisentangledAttentionConfig config;
  config.num_heads = c.heads;
  config.positions = c.positions;
  config.c2p = c.c2p;
  config.p2c = c.p2c;
  config.dropout_p = c.dropout_p;
  config.seed = 0x5eed1234u;
  config.site_id = site_id;
  return config;
}

}  // namespace zt::test
