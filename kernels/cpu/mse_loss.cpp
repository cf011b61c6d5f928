// The CPU reference of kernels/mse_loss.h (its formulas there); kernels/mse_loss.cpp has checked the
// arguments.
#include "kernels/cpu/mse_loss.h"

#include <cmath>
#include <cstdint>

namespace zt::kernels::cpu {
namespace {

int64_t count_kept(const float* targets, int64_t rows) {
  int64_t kept = 0;
  for (int64_t n = 0; n < rows; ++n) kept += std::isnan(targets[n]) ? 0 : 1;
  return kept;
}

}  // namespace

void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss) {
  const int64_t rows = predictions.dim(0);
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
  const int64_t rows = predictions.dim(0);
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

}  // namespace zt::kernels::cpu
