// Gradient statistics on the GPU for clipping and fp16 overflow detection (the CPU counterparts are
// optim/grad_clip.h's sum_of_squares and optim/loss_scaler.h's has_inf_or_nan):
//
//   sum_of_squares = sum_i x_i^2      (each x_i widened to double, squared and summed in double)
//   non_finite     = #{ i : x_i is inf or NaN }
//
// Deterministic two-pass reduction: pass 1 runs a grid whose size depends only on n, each thread summing a
// fixed strided set of elements and each block adding its threads in a fixed tree; pass 2 (one block) adds
// the block partials in order. The same x gives the same bits on every run and every GPU model. The order
// differs from the CPU's, so the two agree to double rounding (~1e-15 relative), not bitwise.
//
// x: f32, bf16 or f16, contiguous, device memory, any shape. Queued on `stream`; partials live in scratch
// from the caching device allocator, released once queued (ordered by `stream`).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::optim::gpu {

struct GradStats {
  double sum_of_squares = 0;
  int64_t non_finite = 0;
};

// Writes the statistics of x into *device_result (device memory) without waiting for them.
// `scratch`: grad_stats_scratch_bytes(x.numel()) of device memory for the partials, which must stay
// untouched until the queued kernels are done; nullptr takes them from the caching allocator, released at
// once — safe only on the stream the allocating thread's later work is ordered with (its current stream):
// work queued on another stream must pass scratch of its own, or the thread's next allocation may take the
// block while these kernels still write it.
void grad_stats_async(const Tensor& x, GradStats* device_result, cudaStream_t stream,
                      void* scratch = nullptr);
size_t grad_stats_scratch_bytes(int64_t n);

// The same, then copies the result to the host: synchronizes `stream`.
GradStats grad_stats(const Tensor& x, cudaStream_t stream);

}  // namespace zt::optim::gpu
