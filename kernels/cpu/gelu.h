// The CPU backend of kernels/gelu.h (f32 host tensors), reached through kernels/gelu.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/gelu.h"

namespace zt::kernels::cpu {

void gelu_forward(const Tensor& x, const Tensor& y);
void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx);
void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write);

}  // namespace zt::kernels::cpu
