// embedding: the entry points of kernels/embedding.h, each sending its call to a backend: CUDA tensors to
// kernels/cuda/embedding.cu on the calling thread's current stream (runtime/stream.h), host tensors to
// kernels/cpu/embedding.cpp.
#include "kernels/embedding.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/embedding.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/embedding.cuh"
#endif

namespace zt::kernels {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  if (runs_on_cuda(table, "embedding_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::embedding_forward(ids, table, out, current_stream());
#endif
  }
  cpu::embedding_forward(ids, table, out);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) {
  if (runs_on_cuda(dtable, "embedding_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::embedding_backward(ids, dout, dtable, padding_idx, current_stream());
#endif
  }
  cpu::embedding_backward(ids, dout, dtable, padding_idx);
}

}  // namespace zt::kernels
