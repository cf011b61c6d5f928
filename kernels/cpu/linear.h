// The CPU backend of kernels/linear.h (f32 host tensors), reached through kernels/linear.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/linear.h"

namespace zt::kernels::cpu {

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write);

}  // namespace zt::kernels::cpu
