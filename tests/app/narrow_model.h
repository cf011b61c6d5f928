// The narrow DeBERTa-v2 configs of the trainer and checkpoint tests: the small CPU model at a hidden size
// of `hidden`, with two attention heads of hidden / 2, a feed-forward of 2 x hidden, and `position_buckets`
// relative-position buckets (its vocabulary and layer count, unless a test sets them).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace zt::optim::test_models {

inline DebertaConfig narrow_model(int64_t hidden, int64_t position_buckets) {
  DebertaConfig c = deberta_small_cpu_config();
  c.hidden_size = hidden;
  c.embedding_size = hidden;
  c.pooler_hidden_size = hidden;
  c.num_attention_heads = 2;
  c.attention_head_size = hidden / 2;
  c.intermediate_size = 2 * hidden;
  c.position_buckets = position_buckets;
  return c;
}

}  // namespace zt::optim::test_models
