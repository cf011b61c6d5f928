// CUDA mean squared error of a regression head (formulas in kernels/mse_loss.h). predictions, dpredictions
// f32 [N, 1]; targets f32 [N] (NaN: ignored); loss f32, one element, in device memory. Like the CPU, the
// sums and the mean run in double; one block sums the rows in a fixed order (deterministic). Queued on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: predictions, targets; out: loss.
void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss,
                      cudaStream_t stream);

// in: predictions, targets, dloss; out: dpredictions (overwritten).
void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions, cudaStream_t stream);

}  // namespace zt::kernels::gpu
