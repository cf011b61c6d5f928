// Relative-position index tables for the CUDA disentangled attention (rules in kernels/relative_position.h).
//
// c(i,j) depends only on i - j, and bucket(i - j) is monotone in i - j, so the attention needs
//   diagonal[t]        = c(i,j) - window_begin   for t = i - j + L - 1 in [0, 2L - 1)         (int32)
//   rel_first/last[r]  = the range of i - j whose window-local bucket is r, r in [0, window)  (int32;
//                        first > last for a bucket no pair reaches)
// rather than an [L, L] table. The buckets are evaluated on the host by the CPU reference's own
// c2p_index (fp32 logs exactly as HF) and uploaded: a device logf that differs by one ulp would move
// |i - j| = max_position - 1 into the next bucket (reference §3.2), so the tables are not recomputed with
// device math.
//
// The tables depend only on (bucketing, L), so each is built once per device and kept for the process: a
// per-call upload from pageable memory would make every attention call wait for the GPU to drain (a
// pageable cudaMemcpyAsync synchronizes), serializing the host's launches with the device's work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/relative_position.h"

namespace zt::kernels::gpu {

struct RelativeIndexTables {
  int64_t length = 0;                  // L
  int64_t window_begin = 0;            // first table row c(i,j) reaches: c(0, L - 1)
  int64_t window = 0;                  // number of rows reached: c(L - 1, 0) - window_begin + 1
  const int32_t* diagonal = nullptr;   // device int32 [2L - 1]
  const int32_t* rel_first = nullptr;  // device int32 [window]
  const int32_t* rel_last = nullptr;   // device int32 [window]
  // Every bucket of the window holds exactly one i - j (first == last for all r): the bucket gathers of
  // the backward then sum one term per output (true at L = 128 with DeBERTa-v2's 256 log buckets).
  bool one_distance_per_bucket = false;
};

// The tables for sequence length L >= 1 on the current device: built and uploaded on first use ((2L - 1 + 2W)
// int32 from the process-wide capped device allocator, category scratch; copied on `stream`, which is then
// synchronized, so the first call blocks and must not be inside a stream capture), then returned from the
// cache. Thread-safe (a mutex; the tables are complete before any thread sees them). The memory stays
// allocated until the process ends (a few KiB per distinct L).
RelativeIndexTables relative_index_tables(const RelativePositionConfig& config, int64_t length,
                                          cudaStream_t stream);

}  // namespace zt::kernels::gpu
