// cross_entropy: the entry points of kernels/cross_entropy.h. Each checks its arguments once, for both
// backends, and sends the call to one: CUDA tensors to kernels/cuda/cross_entropy.cu on the calling thread's
// current stream (runtime/stream.h), host tensors to kernels/cpu/cross_entropy.cpp (which also checks that
// every label is below the class count: it can read them).
#include "kernels/cross_entropy.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/cross_entropy.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/cross_entropy.cuh"
#endif

namespace zt::kernels {
namespace {

// logits f32 [N, C] with C > 0, labels i64 [N], both on `device`.
void check_cross_entropy_args(DeviceKind device, const Tensor& logits, const Tensor& labels, const char* op) {
  check_arg(logits, DType::f32, device, op, "logits");
  check_arg(labels, DType::i64, device, op, "labels");
  ZT_CHECK(logits.rank() == 2, op, ": logits must be [N, C], got ", logits.describe());
  check_shape(labels, Shape{logits.dim(0)}, "cross_entropy: labels");
  ZT_CHECK(logits.dim(1) > 0, op, ": logits need at least one class");
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  constexpr const char* op = "cross_entropy_forward";
  const bool cuda = runs_on_cuda(logits, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  check_cross_entropy_args(device, logits, labels, op);
  check_loss_arg(loss, device, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::cross_entropy_forward(logits, labels, loss, current_stream());
#endif
  }
  cpu::cross_entropy_forward(logits, labels, loss);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits) {
  constexpr const char* op = "cross_entropy_backward";
  const bool cuda = runs_on_cuda(logits, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  check_cross_entropy_args(device, logits, labels, op);
  check_arg(dlogits, DType::f32, device, op, "dlogits");
  check_same_shape(dlogits, logits, op, "dlogits", "logits");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::cross_entropy_backward(logits, labels, dloss, dlogits, current_stream());
#endif
  }
  cpu::cross_entropy_backward(logits, labels, dloss, dlogits);
}

}  // namespace zt::kernels
