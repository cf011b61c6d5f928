// linear: the entry points of kernels/linear.h. Each checks its arguments once, for both backends, and sends
// the call to one: CUDA tensors to kernels/cuda/linear.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/linear.cpp.
#include "kernels/linear.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/linear.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/linear.cuh"
#endif

namespace zt::kernels {
namespace {

// The storage dtype of x, weight, bias, y, dy and dx: f32 on the CPU, x's (f32, bf16 or f16) on CUDA.
// dweight and dbias are f32 on both.
struct LinearDtype {
  DeviceKind device;
  DType storage;
};

// The leading shape of `t` (all but the last dimension) must equal that of `like`.
void check_same_rows(const Tensor& t, const Tensor& like, const char* op, const char* name,
                     const char* like_name) {
  bool same = t.rank() == like.rank();
  for (int i = 0; same && i + 1 < t.rank(); ++i) same = t.dim(i) == like.dim(i);
  ZT_CHECK(same, op, ": ", name, " ", t.shape().to_string(), " must have the leading shape of ", like_name,
           " ", like.shape().to_string());
}

// x [..., in] and weight [out, in]; `rows_like` (y or dy) [..., out] with x's leading shape.
LinearDtype check_linear_args(bool cuda, const Tensor& x, const Tensor& weight, const Tensor& rows_like,
                              const char* op, const char* rows_name) {
  const LinearDtype t{cuda ? DeviceKind::cuda : DeviceKind::cpu, cuda ? x.dtype() : DType::f32};
  check_arg(x, t.storage, t.device, op, "x");
  ZT_CHECK(t.storage == DType::f32 || t.storage == DType::bf16 || t.storage == DType::f16, op,
           ": x must be f32, bf16 or f16, got ", x.describe());
  check_arg(weight, t.storage, t.device, op, "weight");
  check_arg(rows_like, t.storage, t.device, op, rows_name);
  ZT_CHECK(weight.rank() == 2, op, ": weight must be [out, in], got ", weight.describe());
  ZT_CHECK(x.rank() >= 1, op, ": x must have a feature dimension, got ", x.describe());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  ZT_CHECK(x.dim(-1) == in_features, op, ": x ", x.shape().to_string(), " has ", x.dim(-1),
           " features, weight expects ", in_features);
  ZT_CHECK(rows_like.rank() >= 1 && rows_like.dim(-1) == out_features, op, ": ", rows_name, " ",
           rows_like.shape().to_string(), " needs ", out_features, " features");
  check_same_rows(rows_like, x, op, rows_name, "x");
  return t;
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  constexpr const char* op = "linear_forward";
  const bool cuda = runs_on_cuda(x, op);
  const LinearDtype t = check_linear_args(cuda, x, weight, y, op, "y");
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
  if (bias.defined()) {
    check_arg(bias, t.storage, t.device, op, "bias");
    check_shape(bias, Shape{weight.dim(0)}, "linear_forward: bias");
  }
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::linear_forward(x, weight, bias, y, current_stream());
#endif
  }
  cpu::linear_forward(x, weight, bias, y);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write) {
  constexpr const char* op = "linear_backward";
  const bool cuda = runs_on_cuda(x, op);
  const LinearDtype t = check_linear_args(cuda, x, weight, dy, op, "dy");
  check_weight_layer_grads(dy, x, weight, dx, dweight, dbias, t.storage, t.device, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::linear_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx, write, current_stream());
#endif
  }
  cpu::linear_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx, write);
}

}  // namespace zt::kernels
