// The CPU backend of kernels/mse_loss.h (f32 host tensors), reached through kernels/mse_loss.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/mse_loss.h"

namespace zt::kernels::cpu {

void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss);
void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions);

}  // namespace zt::kernels::cpu
