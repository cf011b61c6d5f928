// CUDA dropout with the CPU's counter-based mask (kernels/dropout.h, kernels/philox.h): for the same
// (seed, site_id, index) the GPU keeps exactly the elements the CPU keeps, so GPU-vs-CPU tests and a
// CPU-checked resume agree with dropout on. Storage f32, bf16 or f16 (x and y of one dtype), scaled in f32;
// p == 0 is an exact copy. Queued on `stream`.
// The arguments are checked by kernels/dropout.cpp, the entry point that calls these.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/dropout.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: x; out: y (may alias x).
void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site, cudaStream_t stream);

// in: dy; out: dx (may alias dy). Same site as the forward, so the same mask.
void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site, cudaStream_t stream);

}  // namespace zt::kernels::gpu
