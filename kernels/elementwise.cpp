// elementwise: the entry points of kernels/elementwise.h, each sending its call to a backend: CUDA tensors to
// kernels/cuda/elementwise.cu on the calling thread's current stream (runtime/stream.h), host tensors to
// kernels/cpu/elementwise.cpp.
#include "kernels/elementwise.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/elementwise.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/elementwise.cuh"
#endif

namespace zt::kernels {

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (runs_on_cuda(a, "add")) {
#ifdef ZT_WITH_CUDA
    return gpu::add(a, b, out, current_stream());
#endif
  }
  cpu::add(a, b, out);
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  if (runs_on_cuda(dst, "add_inplace")) {
#ifdef ZT_WITH_CUDA
    return gpu::add_inplace(dst, src, current_stream());
#endif
  }
  cpu::add_inplace(dst, src);
}

void scale(const Tensor& x, float alpha, const Tensor& out) {
  if (runs_on_cuda(x, "scale")) {
#ifdef ZT_WITH_CUDA
    return gpu::scale(x, alpha, out, current_stream());
#endif
  }
  cpu::scale(x, alpha, out);
}

void copy(const Tensor& src, const Tensor& dst) {
  if (runs_on_cuda(src, "copy")) {
#ifdef ZT_WITH_CUDA
    return gpu::copy(src, dst, current_stream());
#endif
  }
  cpu::copy(src, dst);
}

void fill(const Tensor& dst, float value) {
  if (runs_on_cuda(dst, "fill")) {
#ifdef ZT_WITH_CUDA
    return gpu::fill(dst, value, current_stream());
#endif
  }
  cpu::fill(dst, value);
}

void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out) {
  if (runs_on_cuda(x, "mask_rows_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::mask_rows_forward(x, mask, out, current_stream());
#endif
  }
  cpu::mask_rows_forward(x, mask, out);
}

void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx) {
  if (runs_on_cuda(dy, "mask_rows_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::mask_rows_backward(dy, mask, dx, current_stream());
#endif
  }
  cpu::mask_rows_backward(dy, mask, dx);
}

void select_token_forward(const Tensor& x, int64_t token, const Tensor& out) {
  if (runs_on_cuda(x, "select_token_forward")) {
#ifdef ZT_WITH_CUDA
    return gpu::select_token_forward(x, token, out, current_stream());
#endif
  }
  cpu::select_token_forward(x, token, out);
}

void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx) {
  if (runs_on_cuda(dx, "select_token_backward")) {
#ifdef ZT_WITH_CUDA
    return gpu::select_token_backward(dout, token, dx, current_stream());
#endif
  }
  cpu::select_token_backward(dout, token, dx);
}

}  // namespace zt::kernels
