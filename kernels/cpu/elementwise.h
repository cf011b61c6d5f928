// The CPU backend of kernels/elementwise.h (f32 host tensors), reached through kernels/elementwise.cpp, which
// has checked the arguments.
#pragma once

#include "kernels/elementwise.h"

namespace zt::kernels::cpu {

void add(const Tensor& a, const Tensor& b, const Tensor& out);
void add_inplace(const Tensor& dst, const Tensor& src);
void scale(const Tensor& x, float alpha, const Tensor& out);
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, float value);
void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out);
void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx);
void select_token_forward(const Tensor& x, int64_t token, const Tensor& out);
void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx);

}  // namespace zt::kernels::cpu
