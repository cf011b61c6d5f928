// CUDA entry points of kernels/linear.h, reached from kernels/cpu/linear.cpp when the tensors are on the
// GPU. Plain C++ declarations (included from .cpp files). Dtype contract and streams: see kernels/linear.h.
#pragma once

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx);

}  // namespace zt::kernels::gpu
