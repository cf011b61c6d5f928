#include "kernels/cpu/elementwise.h"

#include <cstdint>
#include <cstring>

#include "kernels/arg_checks.h"

namespace zt::kernels::cpu {
namespace {

template <typename MaskT>
void mask_rows_cpu(const float* x, const MaskT* mask, float* out, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float m = static_cast<float>(mask[r]);
    for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = x[r * dim + j] * m;
  }
}

void apply_row_mask(const Tensor& x, const Tensor& mask, const Tensor& out) {
  const int64_t dim = x.dim(-1), rows = rows_of(x);
  if (mask.dtype() == DType::f32) {
    mask_rows_cpu(x.data_as<float>(), mask.data_as<float>(), out.data_as<float>(), rows, dim);
  } else {
    mask_rows_cpu(x.data_as<float>(), mask.data_as<int64_t>(), out.data_as<float>(), rows, dim);
  }
}

struct TokenShape {
  int64_t batch, length, dim;
};

TokenShape token_shape(const Tensor& full) {
  return {full.dim(0), full.dim(1), full.dim(2)};
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  float* pd = dst.data_as<float>();
  const float* ps = src.data_as<float>();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) pd[i] += ps[i];
}

void scale(const Tensor& x, float alpha, const Tensor& out) {
  const float* px = x.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = alpha * px[i];
}

void copy(const Tensor& src, const Tensor& dst) {
  if (dst.data() != src.data()) std::memmove(dst.data(), src.data(), src.nbytes());
}

void fill(const Tensor& dst, float value) {
  float* pd = dst.data_as<float>();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) pd[i] = value;
}

void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out) {
  apply_row_mask(x, mask, out);
}

void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx) {
  apply_row_mask(dy, mask, dx);
}

void select_token_forward(const Tensor& x, int64_t token, const Tensor& out) {
  const TokenShape s = token_shape(x);
  const float* px = x.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(po + b * s.dim, px + (b * s.length + token) * s.dim,
                static_cast<size_t>(s.dim) * sizeof(float));
  }
}

void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx) {
  const TokenShape s = token_shape(dx);
  const float* pg = dout.data_as<float>();
  float* pd = dx.data_as<float>();
  std::memset(pd, 0, dx.nbytes());
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(pd + (b * s.length + token) * s.dim, pg + b * s.dim,
                static_cast<size_t>(s.dim) * sizeof(float));
  }
}

}  // namespace zt::kernels::cpu
