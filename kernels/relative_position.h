// DeBERTa-v2 relative positions: log buckets and the index tables that gather the positional scores.
//
// For query i and key j the relative position is r = i - j. With bucketing on (position_buckets > 0), HF's
// make_log_bucket_position maps r to
//   mid = buckets / 2,   a = (-mid < r < mid) ? mid - 1 : |r|
//   bucket(r) = r                                                            if a <= mid
//             = sign(r) * (ceil(log(a / mid) / log((max_position - 1) / mid) * (mid - 1)) + mid)   otherwise
// evaluated in fp32 exactly as HF does (both logs in fp32, so r = +-(max_position - 1) lands exactly on
// mid - 1 + mid: numerator and denominator are the same fp32 log). bucket(-r) == -bucket(r).
//
// The attention gathers row c(i,j) of the positional projections, for c2p and (transposed) p2c alike:
//   c2p_index[i,j] = clamp(bucket(i - j) + S, 0, 2S - 1)
//   p2c_index[a,b] = clamp(-bucket(a - b) + S, 0, 2S - 1)     (HF's p2c_pos; p2c_index[j,i] ==
//   c2p_index[i,j])
// where S = att_span.
//
// Which max_position HF passes: the encoder builds relative_pos with bucket_size = position_buckets and
// max_position = max_relative_positions (after "< 1 means max_position_embeddings"). The argument swap in
// HF's build_rpos only runs when query and key lengths differ, never in self-attention.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels {

struct RelativePositionConfig {
  int64_t position_buckets = -1;        // config.position_buckets; <= 0 disables bucketing
  int64_t max_relative_positions = -1;  // resolved: config value, or max_position_embeddings when < 1

  // Resolves HF's defaults: max_relative_positions < 1 falls back to max_position_embeddings.
  static RelativePositionConfig from_model_config(int64_t position_buckets, int64_t max_relative_positions,
                                                  int64_t max_position_embeddings);

  // S: position_buckets when bucketing, else max_relative_positions. The layer uses 2S table rows.
  int64_t att_span() const { return position_buckets > 0 ? position_buckets : max_relative_positions; }
  bool bucketed() const { return position_buckets > 0 && max_relative_positions > 0; }
};

// HF's make_log_bucket_position for one relative position (fp32 arithmetic, result truncated to int64).
int64_t make_log_bucket_position(int64_t relative_position, int64_t bucket_size, int64_t max_position);

// bucket(r) under `config` (identity when bucketing is off).
int64_t relative_bucket(int64_t relative_position, const RelativePositionConfig& config);

// c(i,j) = clamp(bucket(i - j) + S, 0, 2S - 1) for one pair.
int64_t c2p_index(int64_t query, int64_t key, const RelativePositionConfig& config);

// out: i64 or i32 [query_length, key_length], CPU, contiguous; filled with c2p_index / HF's p2c_pos.
void build_c2p_index(const RelativePositionConfig& config, const Tensor& out);
void build_p2c_index(const RelativePositionConfig& config, const Tensor& out);

}  // namespace zt::kernels
