// Fused multi-tensor AdamW on the GPU: one pass over the flat fp32 master / grad / m / v buffers, with the
// exact per-element arithmetic of the CPU AdamW (optim/adamw.h, torch's order, each operation rounded on
// its own: no fused multiply-adds), so the GPU and the CPU agree bit for bit. The updated params can be
// written as bf16 or f16 (round to nearest even, NaN kept quiet) in the same pass.
//
// Buffers: params, grads, exp_avg, exp_avg_sq f32 device tensors of one element count (usually the arenas'
// flat views); params16 bf16 or f16 of the same count, or a tensor with no data (Tensor()) for none.
// ranges: which elements to update and whether each range decays, as for the CPU (non-overlapping,
// inside the buffers; elements outside every range are not touched). Scalars come from
// adamw_step_scalars(hyper, lr, t). Queued on `stream`.
//
// Fusions that save whole passes over the gradients (each 4 bytes/param read or written): grad_scale != 1
// multiplies every gradient first (fp16 unscaling and clipping: exactly the float product a separate
// kernels::scale pass would store, so results stay bitwise equal), and zero_grads writes 0 over each
// gradient once read (the next step's accumulation starts from zero; elements outside the ranges are not
// touched).
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "optim/adamw.h"
#include "runtime/tensor.h"

namespace zt::optim::gpu {

void adamw_update(const AdamWStepScalars& scalars, const Tensor& params, const Tensor& grads,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, std::span<const TensorRange> ranges,
                  const Tensor& params16, cudaStream_t stream, float grad_scale = 1.0f,
                  bool zero_grads = false);

// The split master (optim/split_master.h): hi is the bf16 compute copy [N]; lo [N] the masters' low 16 bits
// (raw bits in bf16-typed storage); up [ceil(N / 32)] i32 words of rounding bits (bit e of byte e / 8).
struct SplitMaster {
  Tensor hi, lo, up;
};

// adamw_update with the master stored split: the same update, every stored bit equal to what adamw_update
// stores into an f32 master and its bf16 copy. Ranges must start at multiples of 8 elements.
void adamw_update_split_master(const AdamWStepScalars& scalars, const SplitMaster& master,
                               const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                               std::span<const TensorRange> ranges, cudaStream_t stream,
                               float grad_scale = 1.0f, bool zero_grads = false);

// out[k] = master element offset + k, as f32 (k < out.numel()); and the reverse, which writes hi (the compute
// copy) too. Any offset: the bits of other elements sharing a byte of `up` are kept.
void join_split_master(const SplitMaster& master, int64_t offset, const Tensor& out, cudaStream_t stream);
void write_split_master(const Tensor& values, const SplitMaster& master, int64_t offset, cudaStream_t stream);

}  // namespace zt::optim::gpu
