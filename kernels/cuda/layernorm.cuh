// CUDA LayerNorm over the last dimension (formulas in kernels/layernorm.h).
//
// Storage: x, y, dy, dx in T = f32, bf16 or f16; gamma, beta in T or f32; mean, rstd, dgamma, dbeta f32.
// Statistics are f32, taken on values shifted by the row's first element, with a two-pass variance (mean
// first, then the mean of squared deviations), so a large row mean does not cancel the spread; mean and
// rstd are saved in f32 for the backward.
//
// The parameter gradients are reduced deterministically, without float atomics: rows are cut into a fixed
// number of chunks that depends only on R, each chunk writes its per-column partial sums to a scratch
// buffer [chunks, D], and a second kernel adds the chunks in order into dgamma and dbeta. The same inputs
// give bit-identical gradients on every run (and on every GPU model). From one chunk per multiprocessor on
// (LayerNormBackwardPath below), one kernel writes dx (and ds) and the chunks' partial sums over one read of
// dy and x; elsewhere a partials kernel and the dx kernel each read them. Both give the same bits.
//
// Scratch: layernorm_backward takes 2 * chunks * D floats from the caching device allocator
// (MemoryCategory::scratch) and returns them once the kernels are queued; reuse is ordered by `stream`
// (the allocator's stream rule, runtime/device_allocator.h: one allocator per concurrently running stream).
//
// The launchers below take arguments kernels/layernorm.cpp has checked (CUDA tensors, shapes, overlaps); they
// dispatch on x's storage dtype and gamma's (x's or f32).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dropout.h"
#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: x, gamma, beta, eps; out: y (may alias x), mean, rstd (R elements each).
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t stream);

// s <- Drop(s) + residual, then the forward above over s (kernels/layernorm.h): one kernel, one warp per
// row, bitwise equal to dropout_forward + add_inplace + layernorm_forward on the same stream. residual and y
// must not overlap s.
void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd, cudaStream_t stream);

// How the backwards below produce dx and the parameter-gradient partials: `automatic` takes the fused kernel
// (one block per row chunk: dx, ds and the partials over one read of dy and x) where it can from 8192 rows on
// (measured faster there, slower at 5120 and below), else the partials kernel and the dx kernel (Note [fused
// LayerNorm backward] in layernorm_backward.cu). Tests pin either: the same bits. `fused` is an error where
// the kernel cannot run (a row's sums beyond a block's shared memory, ~3500 columns; dx or ds off 16-byte
// alignment while dy and x are on it).
enum class LayerNormBackwardPath : uint8_t { automatic, fused, separate };

// in: dy, x, gamma, mean, rstd; out: dx (overwritten; may alias dy); dgamma, dbeta (f32 [D]) accumulated or
// written (`write`).
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write, cudaStream_t stream,
                        LayerNormBackwardPath path = LayerNormBackwardPath::automatic);

// The above, and ds = Drop'(dx) at `site` written by the same kernel (kernels/layernorm.h): bitwise equal to
// layernorm_backward then dropout_backward(dx, ds, site) on the same stream. ds overlaps none of dy, x, dx.
void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta, GradWrite write,
                                cudaStream_t stream,
                                LayerNormBackwardPath path = LayerNormBackwardPath::automatic);

// Whether the vector row kernels of dtype's rows [rows, dim] keep each row in registers
// (kernels/cuda/layernorm_rows.cuh, row_registers): what the launches above ask, before the alignment that
// decides the vector path at all. Tests check which path their shapes take.
bool layernorm_keeps_rows_in_registers(DType dtype, int64_t dim, int64_t rows);

}  // namespace zt::kernels::gpu
