// layernorm: the entry points of kernels/layernorm.h. Each checks its arguments once, for both backends, and
// sends the call to one: CUDA tensors to kernels/cuda/layernorm.cu (the forwards) or layernorm_backward.cu on
// the calling thread's current stream (runtime/stream.h), host tensors to kernels/cpu/layernorm.cpp.
#include "kernels/layernorm.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/layernorm.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/layernorm.cuh"
#endif

namespace zt::kernels {
namespace {

// The storage dtypes a call's tensors must have: on the CPU f32 throughout; on CUDA x's dtype for the
// activations (x, y, dy, dx, s, residual, ds) and gamma's for gamma and beta (the CUDA backend takes x's
// dtype or f32 there, and f32, bf16 or f16 for x). Statistics and parameter gradients are f32 on both.
struct LayerNormDtypes {
  DeviceKind device;
  DType activations, parameters;
};
LayerNormDtypes dtypes_of(bool cuda, const Tensor& x, const Tensor& gamma) {
  if (!cuda) return {DeviceKind::cpu, DType::f32, DType::f32};
  return {DeviceKind::cuda, x.dtype(), gamma.dtype()};
}

// The forward's arguments: x [..., D] and y of its shape, gamma and beta [D], mean and rstd one element per
// row. x_name names x in messages.
void check_forward_args(const LayerNormDtypes& t, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        float eps, const Tensor& y, const Tensor& mean, const Tensor& rstd, const char* op,
                        const char* x_name) {
  check_arg(x, t.activations, t.device, op, x_name);
  check_arg(gamma, t.parameters, t.device, op, "gamma");
  check_arg(beta, t.parameters, t.device, op, "beta");
  check_arg(y, t.activations, t.device, op, "y");
  check_arg(mean, DType::f32, t.device, op, "mean");
  check_arg(rstd, DType::f32, t.device, op, "rstd");
  ZT_CHECK(x.rank() >= 1, op, ": ", x_name, " must have a feature dimension");
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

// The backward's arguments (and, with `ds`, the dropout output's): dy, dx of x's shape, gamma, dgamma,
// dbeta [D], mean and rstd one element per row; ds of x's shape overlapping none of dy, x, dx.
void check_backward_args(const LayerNormDtypes& t, const Tensor& dy, const Tensor& x, const Tensor& gamma,
                         const Tensor& mean, const Tensor& rstd, const Tensor& dx, const Tensor& dgamma,
                         const Tensor& dbeta, const Tensor* ds, const DropoutSite& site, const char* op) {
  check_arg(dy, t.activations, t.device, op, "dy");
  check_arg(x, t.activations, t.device, op, "x");
  check_arg(gamma, t.parameters, t.device, op, "gamma");
  check_arg(mean, DType::f32, t.device, op, "mean");
  check_arg(rstd, DType::f32, t.device, op, "rstd");
  check_arg(dx, t.activations, t.device, op, "dx");
  check_arg(dgamma, DType::f32, t.device, op, "dgamma");
  check_arg(dbeta, DType::f32, t.device, op, "dbeta");
  ZT_CHECK(x.rank() >= 1, op, ": x must have a feature dimension");
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  check_same_shape(dy, x, op, "dy", "x");
  check_same_shape(dx, x, op, "dx", "x");
  check_shape(gamma, Shape{dim}, "layernorm_backward: gamma");
  check_shape(dgamma, Shape{dim}, "layernorm_backward: dgamma");
  check_shape(dbeta, Shape{dim}, "layernorm_backward: dbeta");
  ZT_CHECK(mean.numel() == rows && rstd.numel() == rows, op, ": mean and rstd need ", rows, " elements, got ",
           mean.numel(), " and ", rstd.numel());
  if (ds != nullptr) {
    check_arg(*ds, t.activations, t.device, op, "ds");
    check_same_shape(*ds, x, op, "ds", "x");
    ZT_CHECK(!overlaps(*ds, dy) && !overlaps(*ds, x) && !overlaps(*ds, dx), op,
             ": ds must not overlap dy, x or dx");
    ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  const bool cuda = runs_on_cuda(x, op);
  check_forward_args(dtypes_of(cuda, x, gamma), x, gamma, beta, eps, y, mean, rstd, op, "x");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd, current_stream());
#endif
  }
  cpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
}

void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd) {
  constexpr const char* op = "dropout_add_layernorm_forward";
  const bool cuda = runs_on_cuda(s, op);
  // Every argument is checked before s is written, so a refused call leaves s as it was.
  const LayerNormDtypes dtypes = dtypes_of(cuda, s, gamma);
  check_forward_args(dtypes, s, gamma, beta, eps, y, mean, rstd, op, "s");
  check_arg(residual, dtypes.activations, dtypes.device, op, "residual");
  check_same_shape(residual, s, op, "residual", "s");
  ZT_CHECK(!overlaps(residual, s) && !overlaps(y, s), op, ": residual and y must not overlap s");
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::dropout_add_layernorm_forward(s, residual, site, gamma, beta, eps, y, mean, rstd,
                                              current_stream());
#endif
  }
  cpu::dropout_add_layernorm_forward(s, residual, site, gamma, beta, eps, y, mean, rstd);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write) {
  constexpr const char* op = "layernorm_backward";
  const bool cuda = runs_on_cuda(x, op);
  check_backward_args(dtypes_of(cuda, x, gamma), dy, x, gamma, mean, rstd, dx, dgamma, dbeta, nullptr, {},
                      op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, current_stream());
#endif
  }
  cpu::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write);
}

void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta,
                                GradWrite write) {
  constexpr const char* op = "layernorm_dropout_backward";
  const bool cuda = runs_on_cuda(x, op);
  check_backward_args(dtypes_of(cuda, x, gamma), dy, x, gamma, mean, rstd, dx, dgamma, dbeta, &ds, site, op);
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::layernorm_dropout_backward(dy, x, gamma, mean, rstd, site, dx, ds, dgamma, dbeta, write,
                                           current_stream());
#endif
  }
  cpu::layernorm_dropout_backward(dy, x, gamma, mean, rstd, site, dx, ds, dgamma, dbeta, write);
}

}  // namespace zt::kernels
