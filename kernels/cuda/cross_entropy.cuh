// CUDA cross-entropy over f32 class logits with ignored labels (formulas in kernels/cross_entropy.h).
// logits, dlogits f32 [N, C]; labels i64 [N] (< 0: ignored); loss f32, one element, in device memory.
// Like the CPU, logsumexp subtracts the row max and sums exp in double (N x C is tiny: a batch of
// sentence-pair logits), and the mean over kept rows is taken in double.
//
// Labels live on the device, so a label >= C cannot throw: it makes the loss NaN (forward) and its row of
// dlogits NaN (backward), which the non-finite check then reports. Queued on `stream`.
// The arguments are checked by kernels/cross_entropy.cpp, the entry point that calls these.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: logits, labels; out: loss. One block: rows are summed in a fixed order (deterministic).
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                           cudaStream_t stream);

// in: logits, labels, dloss; out: dlogits (overwritten).
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits,
                            cudaStream_t stream);

}  // namespace zt::kernels::gpu
