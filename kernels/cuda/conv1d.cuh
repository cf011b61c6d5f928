// CUDA backend of kernels/conv1d.h, reached from kernels/conv1d.cpp (which has checked the arguments) when
// the tensors are on the GPU, with the thread's current stream. Plain C++ declarations (included from .cpp
// files). Dtype contract and workspace: see kernels/conv1d.h. Queued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    cudaStream_t stream);
void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, cudaStream_t stream);

}  // namespace zt::kernels::gpu
