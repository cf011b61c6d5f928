// Small elementwise and data-movement helpers the DeBERTa model needs between the big ops.
// All float tensors are f32, contiguous; "same shape" means exactly equal shapes. Outputs may alias inputs
// (every output element depends only on the input element(s) at the same position).
// CUDA (kernels/cuda/elementwise.cu): every float tensor of one call shares one storage dtype (f32, bf16,
// f16), with two exceptions for the f32 islands of a 16-bit model: copy converts between any two of them
// (round to nearest even), and add_inplace accumulates a 16-bit src into an f32 dst (summed in f32).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels {

// out = a + b (the residual sum). Its gradient reaches both inputs unchanged: da = db = dout.
void add(const Tensor& a, const Tensor& b, const Tensor& out);

// dst += src: sums the gradient of a value that feeds several consumers.
void add_inplace(const Tensor& dst, const Tensor& src);

// out = alpha * x. Backward is the same map: dx = alpha * dy, i.e. scale(dy, alpha, dx).
void scale(const Tensor& x, float alpha, const Tensor& out);

// dst = src (same shape).
void copy(const Tensor& src, const Tensor& dst);

// dst[:] = value.
void fill(const Tensor& dst, float value);

// out[r, :] = x[r, :] * mask[r]: zeroes padded tokens. x, out [..., D]; mask has x's leading shape (e.g.
// x [B, L, D], mask [B, L]), f32 or i64 (the attention mask as loaded).
void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out);
// dx[r, :] = dy[r, :] * mask[r] (overwritten; may alias dy).
void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx);

// out[b, :] = x[b, token, :]: the pooler's [CLS] row. x [B, L, D], out [B, D].
void select_token_forward(const Tensor& x, int64_t token, const Tensor& out);
// dx[b, token, :] = dout[b, :], every other row of dx set to 0 (overwritten). dout [B, D], dx [B, L, D].
void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx);

}  // namespace zt::kernels
