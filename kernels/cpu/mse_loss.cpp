#include "kernels/mse_loss.h"

#include <cmath>
#include <cstdint>

#include "kernels/arg_checks.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/mse_loss.cuh"
#endif

namespace zt::kernels {
namespace {

int64_t check_mse_args(const Tensor& predictions, const Tensor& targets, const char* op) {
  check_cpu_arg(predictions, DType::f32, op, "predictions");
  check_cpu_arg(targets, DType::f32, op, "targets");
  ZT_CHECK(predictions.rank() == 2 && predictions.dim(1) == 1, op, ": predictions must be [N, 1], got ",
           predictions.describe());
  check_shape(targets, Shape{predictions.dim(0)}, "mse_loss: targets");
  return predictions.dim(0);
}

int64_t count_kept(const float* targets, int64_t rows) {
  int64_t kept = 0;
  for (int64_t n = 0; n < rows; ++n) kept += std::isnan(targets[n]) ? 0 : 1;
  return kept;
}

}  // namespace

void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss) {
#ifdef ZT_WITH_CUDA
  if (predictions.device() == DeviceKind::cuda)
    return gpu::mse_loss_forward(predictions, targets, loss, current_stream());
#endif
  constexpr const char* op = "mse_loss_forward";
  const int64_t rows = check_mse_args(predictions, targets, op);
  check_cpu_arg(loss, DType::f32, op, "loss");
  ZT_CHECK(loss.numel() == 1, op, ": loss must hold one element, got ", loss.describe());
  const float* z = predictions.data_as<float>();
  const float* y = targets.data_as<float>();
  const int64_t kept = count_kept(y, rows);
  double total = 0;
  for (int64_t n = 0; n < rows; ++n) {
    if (std::isnan(y[n])) continue;
    const double d = static_cast<double>(z[n]) - static_cast<double>(y[n]);
    total += d * d;
  }
  loss.data_as<float>()[0] = kept == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(kept));
}

void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions) {
#ifdef ZT_WITH_CUDA
  if (predictions.device() == DeviceKind::cuda)
    return gpu::mse_loss_backward(predictions, targets, dloss, dpredictions, current_stream());
#endif
  constexpr const char* op = "mse_loss_backward";
  const int64_t rows = check_mse_args(predictions, targets, op);
  check_cpu_arg(dpredictions, DType::f32, op, "dpredictions");
  check_same_shape(dpredictions, predictions, op, "dpredictions", "predictions");
  const float* z = predictions.data_as<float>();
  const float* y = targets.data_as<float>();
  float* dz = dpredictions.data_as<float>();
  const int64_t kept = count_kept(y, rows);
  const double scale = kept == 0 ? 0.0 : 2.0 * static_cast<double>(dloss) / static_cast<double>(kept);
  for (int64_t n = 0; n < rows; ++n) {
    dz[n] = std::isnan(y[n])
                ? 0.0f
                : static_cast<float>(scale * (static_cast<double>(z[n]) - static_cast<double>(y[n])));
  }
}

}  // namespace zt::kernels
