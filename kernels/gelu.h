// GELU, exact erf form (HF GELUActivation = torch.nn.functional.gelu; not the tanh approximation):
//
//   gelu(x)  = x * Phi(x),            Phi(x) = (1 + erf(x / sqrt(2))) / 2
//   gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//
// Elementwise over any shape; all tensors f32, contiguous, with equal shapes.
#pragma once

#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels {

// in: x; out: y = gelu(x) (may alias x).
void gelu_forward(const Tensor& x, const Tensor& y);

// in: dy, x (the forward input); out: dx = dy * gelu'(x) (overwritten; may alias dy).
void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx);

// The FFN backward's GELU step in one pass over x (the FFN recomputes gelu(x) instead of storing it, and
// both values need erf(x / sqrt 2)):
//   y  = gelu(x)              the forward's output again, for the output projection's weight gradient
//   dx = dy * gelu'(x)        (overwritten; may alias dy)
//   db += sum_rows dx         with dx_column_sum defined (f32 [x.dim(-1)], x seen as [rows, x.dim(-1)];
//                             written with GradWrite::overwrite): the bias gradient of the projection whose
//                             output x is, so that linear_backward can skip its own pass over dx
// Bitwise gelu_forward(x, y) followed by gelu_backward(dy, x, dx) and, with db, linear_backward's bias
// gradient from that dx, on every backend and storage dtype (on the GPU the sums come from the values the
// kernel writes, in the column-sum kernel's order). y must not overlap x, dy or dx.
void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum = Tensor(),
                                 GradWrite write = GradWrite::accumulate);

}  // namespace zt::kernels
