// The CPU backend of kernels/cross_entropy.h (f32 host tensors), reached through kernels/cross_entropy.cpp,
// which has checked the arguments.
#pragma once

#include "kernels/cross_entropy.h"

namespace zt::kernels::cpu {

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss);
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits);

}  // namespace zt::kernels::cpu
