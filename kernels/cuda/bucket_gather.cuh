// One output pair of the bucket gathers where every bucket of the window holds one relative distance
// (RelativeIndexTables::one_distance_per_bucket, as at L <= 128 with DeBERTa's log buckets), from the score
// gradient G of one (b, h) staged in shared memory ([L rows i, pitch], element G[i, j] at i * pitch + j):
//   Gc[(b, position), r] = G[position, position - d]   (the key of query `position`)
//   Gp[(b, position), r] = G[position + d, position]   (the query of key `position`),   d = the bucket's i -
//   j
// each 0.0f + the one term (the single-term sum's value: -0 becomes +0, as the general gathers' sums) or 0
// where the pair falls outside the [L, L] block. Shared by the stored path's block gather
// (attention_bucket_gather.cu) and the short backward (short_disentangled_attention.cu), so the two write
// the same values.
#pragma once

#include "kernels/cuda/launch_common.cuh"

namespace zt::kernels::cuda_detail {

// {Gc, Gp} of window row r at `position` for distance d = first_of[r]; a term not wanted stays 0.
template <typename G>
__device__ __forceinline__ float2 one_distance_gathers(const G* staged, int pitch, int L, int position,
                                                       int distance, bool want_c, bool want_p) {
  float2 sums{0.0f, 0.0f};
  const int j = position - distance;  // Gc: key of query `position`
  const int i = position + distance;  // Gp: query of key `position`
  if (want_c && static_cast<unsigned>(j) < static_cast<unsigned>(L))
    sums.x = 0.0f + to_float(staged[position * pitch + j]);
  if (want_p && static_cast<unsigned>(i) < static_cast<unsigned>(L))
    sums.y = 0.0f + to_float(staged[i * pitch + position]);
  return sums;
}

}  // namespace zt::kernels::cuda_detail
