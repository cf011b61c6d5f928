// gelu: the entry points of kernels/gelu.h. Each checks its arguments once, for both backends, and sends the
// call to one: CUDA tensors to kernels/cuda/gelu.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/gelu.cpp.
#include "kernels/gelu.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/gelu.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/gelu.cuh"
#endif

namespace zt::kernels {
namespace {

// Where the call runs and the storage dtype of every tensor but the column sums: f32 on the CPU, x's (f32,
// bf16 or f16) on CUDA.
struct GeluDtype {
  DeviceKind device;
  DType storage;
};
GeluDtype dtype_of(bool cuda, const Tensor& x) {
  return {cuda ? DeviceKind::cuda : DeviceKind::cpu, cuda ? x.dtype() : DType::f32};
}

// dy, x and dx of one dtype and shape.
void check_backward_args(const GeluDtype& t, const Tensor& dy, const Tensor& x, const Tensor& dx,
                         const char* op) {
  check_arg(dy, t.storage, t.device, op, "dy");
  check_arg(x, t.storage, t.device, op, "x");
  check_arg(dx, t.storage, t.device, op, "dx");
  check_same_shape(dy, x, op, "dy", "x");
  check_same_shape(dx, x, op, "dx", "x");
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y) {
  constexpr const char* op = "gelu_forward";
  const bool cuda = runs_on_cuda(x, op);
  const GeluDtype t = dtype_of(cuda, x);
  check_arg(x, t.storage, t.device, op, "x");
  check_arg(y, t.storage, t.device, op, "y");
  check_same_shape(y, x, op, "y", "x");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_forward(x, y, current_stream());
#endif
  }
  cpu::gelu_forward(x, y);
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  constexpr const char* op = "gelu_backward";
  const bool cuda = runs_on_cuda(x, op);
  check_backward_args(dtype_of(cuda, x), dy, x, dx, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_backward(dy, x, dx, current_stream());
#endif
  }
  cpu::gelu_backward(dy, x, dx);
}

void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write) {
  constexpr const char* op = "gelu_recompute_and_backward";
  const bool cuda = runs_on_cuda(x, op);
  const GeluDtype t = dtype_of(cuda, x);
  // Everything is checked before anything is written.
  check_arg(y, t.storage, t.device, op, "y");
  check_same_shape(y, x, op, "y", "x");
  ZT_CHECK(!overlaps(y, x) && !overlaps(y, dy) && !overlaps(y, dx), op, ": y must not overlap x, dy or dx");
  check_backward_args(t, dy, x, dx, op);
  if (dx_column_sum.defined() && dx_column_sum.data() != nullptr) {
    check_arg(dx_column_sum, DType::f32, t.device, op, "dx_column_sum");
    check_shape(dx_column_sum, Shape{x.rank() == 0 ? 1 : x.dim(-1)},
                "gelu_recompute_and_backward: dx_column_sum");
  }
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::gelu_recompute_and_backward(dy, x, y, dx, dx_column_sum, write, current_stream());
#endif
  }
  cpu::gelu_recompute_and_backward(dy, x, y, dx, dx_column_sum, write);
}

}  // namespace zt::kernels
