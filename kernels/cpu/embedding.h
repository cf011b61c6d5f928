// The CPU backend of kernels/embedding.h (f32 host tensors), reached through kernels/embedding.cpp, which has
// checked the arguments.
#pragma once

#include "kernels/embedding.h"

namespace zt::kernels::cpu {

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx);

}  // namespace zt::kernels::cpu
