// The CPU backend of kernels/layernorm.h (f32 host tensors), reached through kernels/layernorm.cpp, which
// has checked the arguments.
#pragma once

#include "kernels/layernorm.h"

namespace zt::kernels::cpu {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd);
void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write);
void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta, GradWrite write);

}  // namespace zt::kernels::cpu
