// CUDA versions of the helpers in kernels/elementwise.h. Float tensors are f32, bf16 or f16 — all float
// tensors of one call share a dtype — computed in f32 and rounded once on store. Contiguous, device memory,
// queued on `stream`. Outputs may alias inputs exactly (same pointer); copy's src and dst must be the same
// buffer or disjoint.
// The arguments are checked by kernels/elementwise.cpp, the entry point that calls these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

void add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream);  // out = a + b
void add_inplace(const Tensor& dst, const Tensor& src, cudaStream_t stream);         // dst += src
void scale(const Tensor& x, float alpha, const Tensor& out, cudaStream_t stream);    // out = alpha x
void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream);                // dst = src
void fill(const Tensor& dst, float value, cudaStream_t stream);                      // dst[:] = value

// out[r, :] = x[r, :] * mask[r]; mask f32 or i64 with x's leading shape.
void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out, cudaStream_t stream);
void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx, cudaStream_t stream);

// out[b, :] = x[b, token, :]  (x [B, L, D], out [B, D]).
void select_token_forward(const Tensor& x, int64_t token, const Tensor& out, cudaStream_t stream);
// dx[b, token, :] = dout[b, :], other rows of dx zeroed; one pass over dx.
void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx, cudaStream_t stream);

}  // namespace zt::kernels::gpu
