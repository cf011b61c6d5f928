// cross_entropy: the entry points of kernels/cross_entropy.h, each sending its call to a backend: CUDA
// tensors to kernels/cuda/cross_entropy.cu on the calling thread's current stream (runtime/stream.h), host
// tensors to kernels/cpu/cross_entropy.cpp.
#include "kernels/cross_entropy.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/cross_entropy.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/cross_entropy.cuh"
#endif

namespace zt::kernels {

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  if (runs_on_cuda(logits, "cross_entropy_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::cross_entropy_forward(logits, labels, loss, current_stream());
#endif
  }
  cpu::cross_entropy_forward(logits, labels, loss);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits) {
  if (runs_on_cuda(logits, "cross_entropy_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::cross_entropy_backward(logits, labels, dloss, dlogits, current_stream());
#endif
  }
  cpu::cross_entropy_backward(logits, labels, dloss, dlogits);
}

}  // namespace zt::kernels
