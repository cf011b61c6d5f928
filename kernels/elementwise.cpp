// elementwise: the entry points of kernels/elementwise.h. Each checks its arguments once, for both backends,
// and sends the call to one: CUDA tensors to kernels/cuda/elementwise.cu on the calling thread's current
// stream (runtime/stream.h), host tensors to kernels/cpu/elementwise.cpp.
#include "kernels/elementwise.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/elementwise.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/elementwise.cuh"
#endif

namespace zt::kernels {
namespace {

// Where a call runs, and the float dtype its tensors share unless an op says otherwise: f32 on the CPU, the
// deciding tensor's (f32, bf16 or f16) on CUDA.
struct Placement {
  DeviceKind device;
  DType dtype;
};
Placement placement_of(bool cuda, const Tensor& t) {
  return {cuda ? DeviceKind::cuda : DeviceKind::cpu, cuda ? t.dtype() : DType::f32};
}

// x and out [..., D] of one dtype and shape; mask f32 or i64 with x's leading shape.
void check_row_mask(const Placement& p, const Tensor& x, const Tensor& mask, const Tensor& out,
                    const char* op, const char* x_name, const char* out_name) {
  check_arg(x, p.dtype, p.device, op, x_name);
  check_arg(out, p.dtype, p.device, op, out_name);
  check_same_shape(out, x, op, out_name, x_name);
  ZT_CHECK(x.rank() >= 1, op, ": ", x_name, " must have a feature dimension");
  ZT_CHECK(mask.dtype() == DType::f32 || mask.dtype() == DType::i64, op, ": mask must be f32 or i64, got ",
           mask.describe());
  check_arg(mask, mask.dtype(), p.device, op, "mask");
  bool same = mask.rank() + 1 == x.rank();
  for (int i = 0; same && i < mask.rank(); ++i) same = mask.dim(i) == x.dim(i);
  ZT_CHECK(same, op, ": mask ", mask.shape().to_string(), " must have the leading shape of ",
           x.shape().to_string());
}

// full [B, L, D] and rows [B, D] of one dtype; token in [0, L).
void check_select_token(const Placement& p, const Tensor& full, const Tensor& rows, int64_t token,
                        const char* op, const char* full_name, const char* rows_name) {
  check_arg(full, p.dtype, p.device, op, full_name);
  check_arg(rows, p.dtype, p.device, op, rows_name);
  ZT_CHECK(full.rank() == 3, op, ": ", full_name, " must be [B, L, D], got ", full.describe());
  check_shape(rows, Shape{full.dim(0), full.dim(2)}, rows_name);
  ZT_CHECK(token >= 0 && token < full.dim(1), op, ": token ", token, " outside [0, ", full.dim(1), ")");
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  constexpr const char* op = "add";
  const bool cuda = runs_on_cuda(a, op);
  const Placement p = placement_of(cuda, a);
  check_arg(a, p.dtype, p.device, op, "a");
  check_arg(b, p.dtype, p.device, op, "b");
  check_arg(out, p.dtype, p.device, op, "out");
  check_same_shape(b, a, op, "b", "a");
  check_same_shape(out, a, op, "out", "a");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::add(a, b, out, current_stream());
#endif
  }
  cpu::add(a, b, out);
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  constexpr const char* op = "add_inplace";
  const bool cuda = runs_on_cuda(dst, op);
  const Placement p = placement_of(cuda, dst);
  check_arg(dst, p.dtype, p.device, op, "dst");
  // On CUDA a 16-bit src may accumulate into an f32 dst (summed in f32); not the other way round.
  check_arg(src, cuda && p.dtype == DType::f32 ? src.dtype() : p.dtype, p.device, op, "src");
  check_same_shape(src, dst, op, "src", "dst");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::add_inplace(dst, src, current_stream());
#endif
  }
  cpu::add_inplace(dst, src);
}

void scale(const Tensor& x, float alpha, const Tensor& out) {
  constexpr const char* op = "scale";
  const bool cuda = runs_on_cuda(x, op);
  const Placement p = placement_of(cuda, x);
  check_arg(x, p.dtype, p.device, op, "x");
  check_arg(out, p.dtype, p.device, op, "out");
  check_same_shape(out, x, op, "out", "x");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::scale(x, alpha, out, current_stream());
#endif
  }
  cpu::scale(x, alpha, out);
}

void copy(const Tensor& src, const Tensor& dst) {
  constexpr const char* op = "copy";
  const bool cuda = runs_on_cuda(src, op);
  const Placement p = placement_of(cuda, src);
  check_arg(src, p.dtype, p.device, op, "src");
  check_arg(dst, cuda ? dst.dtype() : p.dtype, p.device, op, "dst");  // CUDA converts between float dtypes
  check_same_shape(dst, src, op, "dst", "src");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::copy(src, dst, current_stream());
#endif
  }
  cpu::copy(src, dst);
}

void fill(const Tensor& dst, float value) {
  constexpr const char* op = "fill";
  const bool cuda = runs_on_cuda(dst, op);
  const Placement p = placement_of(cuda, dst);
  check_arg(dst, p.dtype, p.device, op, "dst");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::fill(dst, value, current_stream());
#endif
  }
  cpu::fill(dst, value);
}

void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out) {
  constexpr const char* op = "mask_rows_forward";
  const bool cuda = runs_on_cuda(x, op);
  check_row_mask(placement_of(cuda, x), x, mask, out, op, "x", "out");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::mask_rows_forward(x, mask, out, current_stream());
#endif
  }
  cpu::mask_rows_forward(x, mask, out);
}

void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx) {
  constexpr const char* op = "mask_rows_backward";
  const bool cuda = runs_on_cuda(dy, op);
  check_row_mask(placement_of(cuda, dy), dy, mask, dx, op, "dy", "dx");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::mask_rows_backward(dy, mask, dx, current_stream());
#endif
  }
  cpu::mask_rows_backward(dy, mask, dx);
}

void select_token_forward(const Tensor& x, int64_t token, const Tensor& out) {
  constexpr const char* op = "select_token_forward";
  const bool cuda = runs_on_cuda(x, op);
  check_select_token(placement_of(cuda, x), x, out, token, op, "x", "out");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::select_token_forward(x, token, out, current_stream());
#endif
  }
  cpu::select_token_forward(x, token, out);
}

void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx) {
  constexpr const char* op = "select_token_backward";
  const bool cuda = runs_on_cuda(dx, op);
  check_select_token(placement_of(cuda, dx), dx, dout, token, op, "dx", "dout");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::select_token_backward(dout, token, dx, current_stream());
#endif
  }
  cpu::select_token_backward(dout, token, dx);
}

}  // namespace zt::kernels
