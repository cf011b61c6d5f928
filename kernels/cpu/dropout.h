// The CPU backend of kernels/dropout.h (f32 host tensors), reached through kernels/dropout.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/dropout.h"

namespace zt::kernels::cpu {

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site);
void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site);

}  // namespace zt::kernels::cpu
