#include "kernels/cpu/elementwise.h"

#include <cstdint>
#include <cstring>

#include "kernels/arg_checks.h"

namespace zt::kernels::cpu {
namespace {

// The mask must have x's shape without its last dimension.
void check_mask_shape(const Tensor& mask, const Tensor& x, const char* op) {
  bool same = mask.rank() + 1 == x.rank();
  for (int i = 0; same && i < mask.rank(); ++i) same = mask.dim(i) == x.dim(i);
  ZT_CHECK(same, op, ": mask ", mask.shape().to_string(), " must have the leading shape of ",
           x.shape().to_string());
}

template <typename MaskT>
void mask_rows_cpu(const float* x, const MaskT* mask, float* out, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float m = static_cast<float>(mask[r]);
    for (int64_t j = 0; j < dim; ++j) out[r * dim + j] = x[r * dim + j] * m;
  }
}

void apply_row_mask(const Tensor& x, const Tensor& mask, const Tensor& out, const char* op,
                    const char* x_name, const char* out_name) {
  check_cpu_arg(x, DType::f32, op, x_name);
  check_cpu_arg(out, DType::f32, op, out_name);
  check_same_shape(out, x, op, out_name, x_name);
  ZT_CHECK(x.rank() >= 1, op, ": ", x_name, " must have a feature dimension");
  ZT_CHECK(mask.dtype() == DType::f32 || mask.dtype() == DType::i64, op, ": mask must be f32 or i64, got ",
           mask.describe());
  check_cpu_arg(mask, mask.dtype(), op, "mask");
  check_mask_shape(mask, x, op);
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

TokenShape check_select_token(const Tensor& full, const Tensor& rows, int64_t token, const char* op,
                              const char* full_name, const char* rows_name) {
  check_cpu_arg(full, DType::f32, op, full_name);
  check_cpu_arg(rows, DType::f32, op, rows_name);
  ZT_CHECK(full.rank() == 3, op, ": ", full_name, " must be [B, L, D], got ", full.describe());
  check_shape(rows, Shape{full.dim(0), full.dim(2)}, rows_name);
  ZT_CHECK(token >= 0 && token < full.dim(1), op, ": token ", token, " outside [0, ", full.dim(1), ")");
  return {full.dim(0), full.dim(1), full.dim(2)};
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* op = "add";
  check_cpu_arg(a, DType::f32, op, "a");
  check_cpu_arg(b, DType::f32, op, "b");
  check_cpu_arg(out, DType::f32, op, "out");
  check_same_shape(b, a, op, "b", "a");
  check_same_shape(out, a, op, "out", "a");
  const float* pa = a.data_as<float>();
  const float* pb = b.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  constexpr const char* op = "add_inplace";
  check_cpu_arg(dst, DType::f32, op, "dst");
  check_cpu_arg(src, DType::f32, op, "src");
  check_same_shape(src, dst, op, "src", "dst");
  float* pd = dst.data_as<float>();
  const float* ps = src.data_as<float>();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) pd[i] += ps[i];
}

void scale(const Tensor& x, float alpha, const Tensor& out) {
  constexpr const char* op = "scale";
  check_cpu_arg(x, DType::f32, op, "x");
  check_cpu_arg(out, DType::f32, op, "out");
  check_same_shape(out, x, op, "out", "x");
  const float* px = x.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = alpha * px[i];
}

void copy(const Tensor& src, const Tensor& dst) {
  constexpr const char* op = "copy";
  check_cpu_arg(src, DType::f32, op, "src");
  check_cpu_arg(dst, DType::f32, op, "dst");
  check_same_shape(dst, src, op, "dst", "src");
  if (dst.data() != src.data()) std::memmove(dst.data(), src.data(), src.nbytes());
}

void fill(const Tensor& dst, float value) {
  constexpr const char* op = "fill";
  check_cpu_arg(dst, DType::f32, op, "dst");
  float* pd = dst.data_as<float>();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) pd[i] = value;
}

void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out) {
  apply_row_mask(x, mask, out, "mask_rows_forward", "x", "out");
}

void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx) {
  apply_row_mask(dy, mask, dx, "mask_rows_backward", "dy", "dx");
}

void select_token_forward(const Tensor& x, int64_t token, const Tensor& out) {
  const TokenShape s = check_select_token(x, out, token, "select_token_forward", "x", "out");
  const float* px = x.data_as<float>();
  float* po = out.data_as<float>();
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(po + b * s.dim, px + (b * s.length + token) * s.dim,
                static_cast<size_t>(s.dim) * sizeof(float));
  }
}

void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx) {
  const TokenShape s = check_select_token(dx, dout, token, "select_token_backward", "dx", "dout");
  const float* pg = dout.data_as<float>();
  float* pd = dx.data_as<float>();
  std::memset(pd, 0, dx.nbytes());
  for (int64_t b = 0; b < s.batch; ++b) {
    std::memcpy(pd + (b * s.length + token) * s.dim, pg + b * s.dim,
                static_cast<size_t>(s.dim) * sizeof(float));
  }
}

}  // namespace zt::kernels::cpu
