// CUDA GELU (exact erf form; formulas in kernels/gelu.h). Storage f32, bf16 or f16 (all tensors of one
// dtype), computed in f32. Shapes equal, contiguous, device memory. Queued on `stream`.
// The arguments are checked by kernels/gelu.cpp, the entry point that calls these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: x; out: y = gelu(x) (may alias x).
void gelu_forward(const Tensor& x, const Tensor& y, cudaStream_t stream);

// in: dy, x; out: dx = dy * gelu'(x) (may alias dy).
void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx, cudaStream_t stream);

// in: dy, x; out: y = gelu(x) (must not overlap x, dy, dx) and dx = dy * gelu'(x) (may alias dy), one kernel
// over one read of x, bitwise gelu_forward then gelu_backward; with dx_column_sum (f32 [x.dim(-1)]) also
// dx's column sums, bitwise column_sum_into over the dx written (the same kernel where cols and the pointers
// allow 16-byte packs, else that pass after it).
// Where the column sums are taken: `automatic` fuses them where the fused grid fills the GPU (see gelu.cu);
// tests pin either path (both give the same bits).
enum class GeluColumnSumPath : uint8_t { automatic, fused, separate };
void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write, cudaStream_t stream,
                                 GeluColumnSumPath path = GeluColumnSumPath::automatic);

}  // namespace zt::kernels::gpu
