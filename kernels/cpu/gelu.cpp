#include "kernels/cpu/gelu.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/eigen_views.h"

namespace zt::kernels::cpu {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

void gelu_forward_cpu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void gelu_backward_cpu(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y) {
  gelu_forward_cpu(x.data_as<float>(), y.data_as<float>(), x.numel());
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx) {
  gelu_backward_cpu(dy.data_as<float>(), x.data_as<float>(), dx.data_as<float>(), x.numel());
}

void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write) {
  const bool sums = dx_column_sum.defined() && dx_column_sum.data() != nullptr;
  const int64_t cols = x.rank() == 0 ? 1 : x.dim(-1);
  // The reference is the passes it fuses, then linear_backward's bias sum.
  cpu::gelu_forward(x, y);
  cpu::gelu_backward(dy, x, dx);
  if (sums) {
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    cpu::add_column_sums(cpu::ConstMatrixView(dx.data_as<float>(), rows, cols),
                         cpu::RowVectorView(dx_column_sum.data_as<float>(), cols), write);
  }
}

}  // namespace zt::kernels::cpu
