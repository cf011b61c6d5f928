// The CPU backend of kernels/conv1d.h (f32 host tensors), reached through kernels/conv1d.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/conv1d.h"

namespace zt::kernels::cpu {

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);
void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx);

}  // namespace zt::kernels::cpu
