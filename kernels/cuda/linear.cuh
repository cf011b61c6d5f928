// CUDA backend of kernels/linear.h, reached from kernels/linear.cpp when the tensors are on the GPU (with
// the thread's current stream). Plain C++ declarations (included from .cpp files). Dtype contract: see
// kernels/linear.h. Queued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    cudaStream_t stream);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write,
                     cudaStream_t stream);

}  // namespace zt::kernels::gpu
