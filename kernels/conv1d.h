// Conv1d over the sequence axis with "same" zero padding: the core of DeBERTa's ConvLayer
// (nn.Conv1d(D_in, D_out, k = 3, padding = 1); any odd k works, padding = (k - 1) / 2).
//
//   y[b,t,o] = bias[o] + sum_{kk < k} sum_c W[o,c,kk] * x[b, t + kk - pad, c]
//
// with x[b, s, :] = 0 for s outside [0, L) of the same batch item (no bleed between items).
// Shapes: x [B, L, D_in], W [D_out, D_in, k] (the HF layout), bias [D_out] or undefined, y [B, L, D_out].
// Backward:
//   dx[b,s,c]  = sum_{o,kk} W[o,c,kk] * dy[b, s - kk + pad, o]      overwritten (or += with accumulate_dx:
//                                                                    the embedding output also feeds layer
//                                                                    0); skipped when dx is undefined
//   dW[o,c,kk] += sum_{b,t} dy[b,t,o] * x[b, t + kk - pad, c]
//   dbias[o]   += sum_{b,t} dy[b,t,o]                               skipped when dbias is undefined
// All tensors contiguous; y must not alias x.
// CPU: all f32, evaluated as k shifted GEMMs per batch item, one per kernel tap.
// CUDA (kernels/cuda/conv1d.cu; on the calling thread's current stream, runtime/stream.h): x, weight, bias,
// y, dy, dx in one storage dtype T (f32, bf16, f16); dweight and dbias f32 (accumulated). Evaluated as
// im2col + one GEMM (fp32 compute); scratch from the device allocator: B*L*k*D_in elements of T (+ the
// regrouped weight), and in backward 4*B*L*k*D_in bytes for dcols and 4*D_out*k*D_in bytes for the grouped
// dW.
#pragma once

#include "runtime/tensor.h"

namespace zt::kernels {

// in: x, weight, bias (may be undefined); out: y.
void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);

// in: dy, x, weight; out: dx (overwritten, or += when accumulate_dx; may be undefined);
// accumulated: dweight, dbias (either may be undefined).
void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx = false);

}  // namespace zt::kernels
