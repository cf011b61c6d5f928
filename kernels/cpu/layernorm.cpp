#include "kernels/cpu/layernorm.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/arg_checks.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"

namespace zt::kernels::cpu {
namespace {

void layernorm_forward_cpu(const float* x, const float* gamma, const float* beta, float eps, int64_t rows,
                           int64_t dim, float* y, float* mean, float* rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sum = 0;
    for (int64_t j = 0; j < dim; ++j) sum += xr[j];
    const double mu = sum / static_cast<double>(dim);
    double squares = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const double centered = xr[j] - mu;
      squares += centered * centered;
    }
    const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(dim) + static_cast<double>(eps));
    float* yr = y + r * dim;
    for (int64_t j = 0; j < dim; ++j) {
      yr[j] = static_cast<float>((xr[j] - mu) * inv_std) * gamma[j] + beta[j];
    }
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(inv_std);
  }
}

void layernorm_backward_cpu(const float* dy, const float* x, const float* gamma, const float* mean,
                            const float* rstd, int64_t rows, int64_t dim, float* dx, float* dgamma,
                            float* dbeta, GradWrite write) {
  // Parameter gradients sum over every row (B * L of them); a double partial keeps that sum exact enough
  // to serve as the reference for the GPU reduction.
  std::vector<double> dgamma_sum(static_cast<size_t>(dim), 0.0), dbeta_sum(static_cast<size_t>(dim), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * dim;
    const float* xr = x + r * dim;
    const float mu = mean[r];
    const float inv_std = rstd[r];
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const float xhat = (xr[j] - mu) * inv_std;
      const float g = dyr[j] * gamma[j];
      sum_g += g;
      sum_g_xhat += static_cast<double>(g) * xhat;
      dgamma_sum[j] += static_cast<double>(dyr[j]) * xhat;
      dbeta_sum[j] += dyr[j];
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(dim));
    const float mean_g_xhat = static_cast<float>(sum_g_xhat / static_cast<double>(dim));
    float* dxr = dx + r * dim;
    for (int64_t j = 0; j < dim; ++j) {  // reads dyr[j] before writing dxr[j]: dx may alias dy
      const float xhat = (xr[j] - mu) * inv_std;
      dxr[j] = inv_std * (dyr[j] * gamma[j] - mean_g - xhat * mean_g_xhat);
    }
  }
  const bool overwrite = write == GradWrite::overwrite;
  for (int64_t j = 0; j < dim; ++j) {
    dgamma[j] = (overwrite ? 0.0f : dgamma[j]) + static_cast<float>(dgamma_sum[j]);
    dbeta[j] = (overwrite ? 0.0f : dbeta[j]) + static_cast<float>(dbeta_sum[j]);
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  layernorm_forward_cpu(x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(), eps, rows_of(x),
                        x.dim(-1), y.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>());
}

void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd) {
  // The reference is the unfused sequence itself, so its result is the sequence's by construction; the CUDA
  // kernel is the fused one (the passes it saves are GPU memory traffic).
  cpu::dropout_forward(s, s, site);
  cpu::add_inplace(s, residual);
  layernorm_forward_cpu(s.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(), eps, rows_of(s),
                        s.dim(-1), y.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>());
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write) {
  layernorm_backward_cpu(dy.data_as<float>(), x.data_as<float>(), gamma.data_as<float>(),
                         mean.data_as<float>(), rstd.data_as<float>(), rows_of(x), x.dim(-1),
                         dx.data_as<float>(), dgamma.data_as<float>(), dbeta.data_as<float>(), write);
}

void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta,
                                GradWrite write) {
  // The reference is the unfused sequence itself (the CUDA kernel saves the passes over memory).
  cpu::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write);
  cpu::dropout_backward(dx, ds, site);
}

}  // namespace zt::kernels::cpu
