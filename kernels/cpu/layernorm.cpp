#include "kernels/layernorm.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/arg_checks.h"
#include "kernels/elementwise.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/layernorm.cuh"
#endif

namespace zt::kernels {
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

// The CPU forward's arguments: x [..., D] and y of its shape, gamma and beta [D], mean and rstd one element
// per row, all f32 host tensors. x_name names x in messages.
void check_layernorm_forward_args(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                  const Tensor& y, const Tensor& mean, const Tensor& rstd, const char* op,
                                  const char* x_name) {
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  check_cpu_arg(x, DType::f32, op, x_name);
  check_cpu_arg(gamma, DType::f32, op, "gamma");
  check_cpu_arg(beta, DType::f32, op, "beta");
  check_cpu_arg(y, DType::f32, op, "y");
  check_cpu_arg(mean, DType::f32, op, "mean");
  check_cpu_arg(rstd, DType::f32, op, "rstd");
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  check_shape(gamma, Shape{dim}, "layernorm_forward: gamma");
  check_shape(beta, Shape{dim}, "layernorm_forward: beta");
  check_same_shape(y, x, op, "y", x_name);
  ZT_CHECK(mean.numel() == rows && rstd.numel() == rows, op, ": mean and rstd need ", rows,
           " elements (one per row of ", x_name, " ", x.shape().to_string(), "), got ", mean.numel(), " and ",
           rstd.numel());
  ZT_CHECK(eps >= 0.0f, op, ": eps must be non-negative, got ", eps);
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda)
    return gpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd, current_stream());
#endif
  check_layernorm_forward_args(x, gamma, beta, eps, y, mean, rstd, "layernorm_forward", "x");
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  layernorm_forward_cpu(x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(), eps, rows, dim,
                        y.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>());
}

void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd) {
#ifdef ZT_WITH_CUDA
  if (s.device() == DeviceKind::cuda) {
    return gpu::dropout_add_layernorm_forward(s, residual, site, gamma, beta, eps, y, mean, rstd,
                                              current_stream());
  }
#endif
  constexpr const char* op = "dropout_add_layernorm_forward";
  // Every argument is checked before s is written, so a refused call leaves s as it was.
  check_layernorm_forward_args(s, gamma, beta, eps, y, mean, rstd, op, "s");
  check_cpu_arg(residual, DType::f32, op, "residual");
  check_same_shape(residual, s, op, "residual", "s");
  ZT_CHECK(!overlaps(residual, s) && !overlaps(y, s), op, ": residual and y must not overlap s");
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
  // The reference is the unfused sequence itself, so its result is the sequence's by construction; the CUDA
  // kernel is the fused one (the passes it saves are GPU memory traffic).
  dropout_forward(s, s, site);
  add_inplace(s, residual);
  layernorm_forward_cpu(s.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(), eps, rows_of(s),
                        s.dim(-1), y.data_as<float>(), mean.data_as<float>(), rstd.data_as<float>());
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write) {
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda)
    return gpu::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, current_stream());
#endif
  constexpr const char* op = "layernorm_backward";
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  check_cpu_arg(dy, DType::f32, op, "dy");
  check_cpu_arg(x, DType::f32, op, "x");
  check_cpu_arg(gamma, DType::f32, op, "gamma");
  check_cpu_arg(mean, DType::f32, op, "mean");
  check_cpu_arg(rstd, DType::f32, op, "rstd");
  check_cpu_arg(dx, DType::f32, op, "dx");
  check_cpu_arg(dgamma, DType::f32, op, "dgamma");
  check_cpu_arg(dbeta, DType::f32, op, "dbeta");
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  check_same_shape(dy, x, op, "dy", "x");
  check_same_shape(dx, x, op, "dx", "x");
  check_shape(gamma, Shape{dim}, "layernorm_backward: gamma");
  check_shape(dgamma, Shape{dim}, "layernorm_backward: dgamma");
  check_shape(dbeta, Shape{dim}, "layernorm_backward: dbeta");
  ZT_CHECK(mean.numel() == rows && rstd.numel() == rows, op, ": mean and rstd need ", rows, " elements, got ",
           mean.numel(), " and ", rstd.numel());
  layernorm_backward_cpu(dy.data_as<float>(), x.data_as<float>(), gamma.data_as<float>(),
                         mean.data_as<float>(), rstd.data_as<float>(), rows, dim, dx.data_as<float>(),
                         dgamma.data_as<float>(), dbeta.data_as<float>(), write);
}

void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta,
                                GradWrite write) {
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda) {
    return gpu::layernorm_dropout_backward(dy, x, gamma, mean, rstd, site, dx, ds, dgamma, dbeta, write,
                                           current_stream());
  }
#endif
  constexpr const char* op = "layernorm_dropout_backward";
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  // ds is checked before anything is written (layernorm_backward checks the rest first too).
  check_cpu_arg(ds, DType::f32, op, "ds");
  check_same_shape(ds, x, op, "ds", "x");
  ZT_CHECK(!overlaps(ds, dy) && !overlaps(ds, x) && !overlaps(ds, dx), op,
           ": ds must not overlap dy, x or dx");
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
  // The reference is the unfused sequence itself (the CUDA kernel saves the passes over memory).
  layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write);
  dropout_backward(dx, ds, site);
}

}  // namespace zt::kernels
