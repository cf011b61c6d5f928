// mse_loss: the entry points of kernels/mse_loss.h. Each checks its arguments once, for both backends, and
// sends the call to one: CUDA tensors to kernels/cuda/mse_loss.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/mse_loss.cpp.
#include "kernels/mse_loss.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/mse_loss.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/mse_loss.cuh"
#endif

namespace zt::kernels {
namespace {

// predictions f32 [N, 1], targets f32 [N], both on `device`.
void check_mse_args(DeviceKind device, const Tensor& predictions, const Tensor& targets, const char* op) {
  check_arg(predictions, DType::f32, device, op, "predictions");
  check_arg(targets, DType::f32, device, op, "targets");
  ZT_CHECK(predictions.rank() == 2 && predictions.dim(1) == 1, op, ": predictions must be [N, 1], got ",
           predictions.describe());
  check_shape(targets, Shape{predictions.dim(0)}, "mse_loss: targets");
}

}  // namespace

void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss) {
  constexpr const char* op = "mse_loss_forward";
  const bool cuda = runs_on_cuda(predictions, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  check_mse_args(device, predictions, targets, op);
  check_loss_arg(loss, device, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::mse_loss_forward(predictions, targets, loss, current_stream());
#endif
  }
  cpu::mse_loss_forward(predictions, targets, loss);
}

void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions) {
  constexpr const char* op = "mse_loss_backward";
  const bool cuda = runs_on_cuda(predictions, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  check_mse_args(device, predictions, targets, op);
  check_arg(dpredictions, DType::f32, device, op, "dpredictions");
  check_same_shape(dpredictions, predictions, op, "dpredictions", "predictions");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::mse_loss_backward(predictions, targets, dloss, dpredictions, current_stream());
#endif
  }
  cpu::mse_loss_backward(predictions, targets, dloss, dpredictions);
}

}  // namespace zt::kernels
