// conv1d: the entry points of kernels/conv1d.h. Each checks its arguments once, for both backends, and sends
// the call to one: CUDA tensors to kernels/cuda/conv1d.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/conv1d.cpp.
#include "kernels/conv1d.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/conv1d.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/conv1d.cuh"
#endif

namespace zt::kernels {
namespace {

// The storage dtype of x, weight, bias, y, dy and dx: f32 on the CPU, x's (f32, bf16 or f16) on CUDA.
// dweight and dbias are f32 on both.
struct ConvDtype {
  DeviceKind device;
  DType storage;
};

// x [B, L, D_in] and weight [D_out, D_in, k] with k odd; returns where and in which dtype the call runs.
ConvDtype check_conv_args(bool cuda, const Tensor& x, const Tensor& weight, const char* op) {
  const ConvDtype t{cuda ? DeviceKind::cuda : DeviceKind::cpu, cuda ? x.dtype() : DType::f32};
  check_arg(x, t.storage, t.device, op, "x");
  ZT_CHECK(t.storage == DType::f32 || t.storage == DType::bf16 || t.storage == DType::f16, op,
           ": x must be f32, bf16 or f16, got ", x.describe());
  check_arg(weight, t.storage, t.device, op, "weight");
  ZT_CHECK(x.rank() == 3, op, ": x must be [B, L, D_in], got ", x.describe());
  ZT_CHECK(weight.rank() == 3, op, ": weight must be [D_out, D_in, k], got ", weight.describe());
  ZT_CHECK(weight.dim(1) == x.dim(2), op, ": weight ", weight.shape().to_string(), " expects ", weight.dim(1),
           " input features, x ", x.shape().to_string(), " has ", x.dim(2));
  ZT_CHECK(weight.dim(2) % 2 == 1, op, ": kernel size must be odd for same padding, got ", weight.dim(2));
  return t;
}

}  // namespace

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  constexpr const char* op = "conv1d_forward";
  const bool cuda = runs_on_cuda(x, op);
  const ConvDtype t = check_conv_args(cuda, x, weight, op);
  check_arg(y, t.storage, t.device, op, "y");
  check_shape(y, Shape{x.dim(0), x.dim(1), weight.dim(0)}, "conv1d_forward: y");
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
  if (bias.defined()) {
    check_arg(bias, t.storage, t.device, op, "bias");
    check_shape(bias, Shape{weight.dim(0)}, "conv1d_forward: bias");
  }
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::conv1d_forward(x, weight, bias, y, current_stream());
#endif
  }
  cpu::conv1d_forward(x, weight, bias, y);
}

void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx) {
  constexpr const char* op = "conv1d_backward";
  const bool cuda = runs_on_cuda(x, op);
  const ConvDtype t = check_conv_args(cuda, x, weight, op);
  check_arg(dy, t.storage, t.device, op, "dy");
  check_shape(dy, Shape{x.dim(0), x.dim(1), weight.dim(0)}, "conv1d_backward: dy");
  check_weight_layer_grads(dy, x, weight, dx, dweight, dbias, t.storage, t.device, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::conv1d_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx, current_stream());
#endif
  }
  cpu::conv1d_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx);
}

}  // namespace zt::kernels
