// Linear (nn.Linear): weights stored [out, in], as in the checkpoints.
//
//   y = x W^T + b                          x [..., in] (leading dims flattened into R rows), W [out, in],
//                                          b [out] or undefined (no bias), y [..., out]
// Backward:
//   dx  = dy W          overwritten, or accumulated with accumulate_dx (share_att_key: X feeds three
//                       projections, so dX sums three contributions); skipped when dx is undefined
//   dW += dy^T x        skipped when dW is undefined (frozen weight)
//   db += sum_rows dy   skipped when db is undefined
//                       (dW and db written instead of accumulated with GradWrite::overwrite)
//
// y must not alias x, and dx must not alias dy (GEMM operands). All tensors contiguous.
// CPU: everything f32 (the Eigen reference).
// CUDA (kernels/cuda/linear.cu, cuBLASLt with fp32 compute; on the calling thread's current stream):
//   x, weight, bias, y, dy, dx   one storage dtype T: f32, bf16 or f16 (f32 without TF32)
//   dweight, dbias               f32 gradient buffers, accumulated with beta = 1 / an f32 column sum
//                                (overwrite: beta = 0 / the sum stored as 0 + sum)
//   y = x W^T + b is one GEMM with the bias epilogue; dx (beta 0 or 1) and dW are one GEMM each.
#pragma once

#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels {

// in: x, weight, bias (may be an undefined Tensor{}); out: y.
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);

// in: dy, x, weight; out: dx (overwritten, or += when accumulate_dx); dweight, dbias accumulated (or written:
// `write`). Any of dx, dweight, dbias may be an undefined Tensor{} to skip that gradient.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx = false,
                     GradWrite write = GradWrite::accumulate);

}  // namespace zt::kernels
