// GELU, exact erf form (HF GELUActivation = torch.nn.functional.gelu; not the tanh approximation):
//
//   gelu(x)  = x * Phi(x),            Phi(x) = (1 + erf(x / sqrt(2))) / 2
//   gelu'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//
// Elementwise over any shape; all tensors f32, contiguous, with equal shapes.
#pragma once

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
// Bitwise gelu_forward(x, y) followed by gelu_backward(dy, x, dx), on every backend and storage dtype.
// y must not overlap x, dy or dx.
void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx);

}  // namespace zt::kernels
