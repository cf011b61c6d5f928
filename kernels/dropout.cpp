// dropout: the entry points of kernels/dropout.h, each sending its call to a backend: CUDA tensors to
// kernels/cuda/dropout.cu on the calling thread's current stream (runtime/stream.h), host tensors to
// kernels/cpu/dropout.cpp.
#include "kernels/dropout.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/dropout.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/dropout.cuh"
#endif

namespace zt::kernels {

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site) {
  if (runs_on_cuda(x, "dropout_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::dropout_forward(x, y, site, current_stream());
#endif
  }
  cpu::dropout_forward(x, y, site);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site) {
  if (runs_on_cuda(dy, "dropout_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::dropout_backward(dy, dx, site, current_stream());
#endif
  }
  cpu::dropout_backward(dy, dx, site);
}

}  // namespace zt::kernels
