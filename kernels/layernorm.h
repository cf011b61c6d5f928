// LayerNorm over the last dimension (every DeBERTa LayerNorm: eps = 1e-7, biased variance, affine).
//
//   mu[r]   = mean_j x[r,j]
//   rstd[r] = 1 / sqrt( mean_j (x[r,j] - mu[r])^2 + eps )
//   xhat    = (x - mu) * rstd,        y = gamma * xhat + beta
//
// Backward (g = dy * gamma):
//   dx      = rstd * ( g - mean_j g - xhat * mean_j (g * xhat) )      (overwritten)
//   dgamma += sum_r dy * xhat,        dbeta += sum_r dy                  (accumulated, or written: GradWrite)
//
// Shapes: x, y, dy, dx [..., D] (leading dimensions flattened into R rows); gamma, beta, dgamma, dbeta [D];
// mean, rstd: R elements (e.g. [R] or [B, L]) — filled by the forward, read by the backward.
// All f32, contiguous. Statistics are accumulated in double, with a two-pass variance, so rows with a
// large mean relative to their spread (eps = 1e-7 gives no cover there) keep full f32 accuracy.
#pragma once

#include "kernels/dropout.h"
#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels {

// in: x, gamma, beta, eps; out: y, mean, rstd.  y may alias x.
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);

// The residual block's tail in one pass (DeBERTa's attention and FFN outputs):
//   s <- Drop(s) + residual        (overwritten: the LayerNorm input the backward reads)
//   y, mean, rstd <- LayerNorm(s)  (as layernorm_forward)
// Bitwise identical to dropout_forward(s, s, site); add_inplace(s, residual); layernorm_forward(s, ...) for
// every storage dtype: the same keep-mask, the dropped value and the sum each rounded to the dtype as those
// kernels store them, and the statistics taken from the stored sums. residual and y have the shape of s and
// must not overlap it.
void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd);

// in: dy, x, gamma, mean, rstd (from the forward); out: dx (overwritten; may alias dy);
// dgamma, dbeta: accumulated, or written with GradWrite::overwrite.
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write = GradWrite::accumulate);

// The residual block tail's backward (the reverse of dropout_add_layernorm_forward) in one pass:
//   dx = LayerNorm backward of dy  (overwritten; may alias dy): the gradient of s, which the residual input
//                                  receives as it is
//   ds = Drop'(dx) at `site`       (overwritten): the gradient of the sub-layer's output before its dropout
//   dgamma, dbeta                  accumulated (or written: `write`)
// Bitwise layernorm_backward(dy, x, ..., dx, ...) followed by dropout_backward(dx, ds, site), for every
// storage dtype. ds must not overlap dy, x or dx.
void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta,
                                GradWrite write = GradWrite::accumulate);

}  // namespace zt::kernels
