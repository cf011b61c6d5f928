// gelu: the entry points of kernels/gelu.h, each sending its call to a backend: CUDA tensors to
// kernels/cuda/gelu.cu on the calling thread's current stream (runtime/stream.h), host tensors to
// kernels/cpu/gelu.cpp.
#include "kernels/gelu.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/gelu.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/gelu.cuh"
#endif

namespace zt::kernels {

void gelu_forward(const Tensor& x, const Tensor& y) {
  if (runs_on_cuda(x, "gelu_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_forward(x, y, current_stream());
#endif
  }
  cpu::gelu_forward(x, y);
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  if (runs_on_cuda(x, "gelu_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_backward(dy, x, dx, current_stream());
#endif
  }
  cpu::gelu_backward(dy, x, dx);
}

void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write) {
  if (runs_on_cuda(x, "gelu_recompute_and_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_recompute_and_backward(dy, x, y, dx, dx_column_sum, write, current_stream());
#endif
  }
  cpu::gelu_recompute_and_backward(dy, x, y, dx, dx_column_sum, write);
}

}  // namespace zt::kernels
