// Argument checks shared by the kernel entry points: every failure names the op and the argument, so a
// caller sees "layernorm_forward: gamma must be f32, got bf16[7] cpu" rather than a crash inside a loop.
#pragma once

#include <cstdint>

#include "runtime/check.h"
#include "runtime/tensor.h"

#ifdef ZT_WITH_CUDA
// CUDA tensors passed to the stream-less entry points (kernels/<op>.h) are queued on the calling thread's
// current stream, zt::current_stream() (the legacy default stream unless a StreamScope says otherwise; the
// rule is in runtime/stream.h); code that must name another stream calls the kernels/cuda/<op>.cuh launchers.
#include "runtime/stream.h"
#endif

namespace zt::kernels {

// Throws unless t is defined, of `dtype`, on `device` and contiguous.
inline void check_arg(const Tensor& t, DType dtype, DeviceKind device, const char* op, const char* name) {
  ZT_CHECK(t.defined(), op, ": ", name, " is undefined");
  ZT_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ", t.describe());
  ZT_CHECK(t.device() == device, op, ": ", name, " must be a ", device == DeviceKind::cuda ? "CUDA" : "CPU",
           " tensor, got ", t.describe());
  ZT_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe());
}

// Throws unless t is defined, of `dtype`, contiguous and in host memory (what the CPU references read).
inline void check_cpu_arg(const Tensor& t, DType dtype, const char* op, const char* name) {
  check_arg(t, dtype, DeviceKind::cpu, op, name);
}

// Which backend an entry point (kernels/<op>.cpp) sends its call to: CUDA when `t`, the argument that decides
// (x, or the output where there is no input tensor), is a CUDA tensor — an error in a build without CUDA —
// else the CPU. The backends check that the other arguments live there too.
inline bool runs_on_cuda(const Tensor& t, const char* op) {
  if (t.device() != DeviceKind::cuda) return false;
#ifndef ZT_WITH_CUDA
  ZT_FAIL(op, ": a CUDA tensor, but this build has no CUDA backend");
#endif
  return true;
}

// Throws unless `got` has exactly the shape of `like`.
inline void check_same_shape(const Tensor& got, const Tensor& like, const char* op, const char* got_name,
                             const char* like_name) {
  ZT_CHECK(got.shape() == like.shape(), op, ": ", got_name, " must have the shape of ", like_name, " ",
           like.shape().to_string(), ", got ", got.shape().to_string());
}

// The gradients a weight layer's backward (linear, conv1d) writes, each where defined: dx like x in the
// storage dtype, not over dy (its GEMM reads dy while writing dx); dweight like the weight and dbias
// [weight.dim(0)] in the f32 gradient buffers.
inline void check_weight_layer_grads(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     DType storage, DeviceKind device, const char* op) {
  if (dx.defined()) {
    check_arg(dx, storage, device, op, "dx");
    check_same_shape(dx, x, op, "dx", "x");
    ZT_CHECK(dx.data() != dy.data() || dx.numel() == 0, op, ": dx must not alias dy");
  }
  if (dweight.defined()) {
    check_arg(dweight, DType::f32, device, op, "dweight");
    check_same_shape(dweight, weight, op, "dweight", "weight");
  }
  if (dbias.defined()) {
    check_arg(dbias, DType::f32, device, op, "dbias");
    // check_shape's message, built only on failure (this runs on every layer's backward).
    ZT_CHECK(dbias.shape() == Shape{weight.dim(0)}, op, ": dbias: expected shape ",
             Shape{weight.dim(0)}.to_string(), ", got ", dbias.shape().to_string());
  }
}

// Throws unless `loss` is an f32 tensor of one element on `device` (what the loss kernels write).
inline void check_loss_arg(const Tensor& loss, DeviceKind device, const char* op) {
  check_arg(loss, DType::f32, device, op, "loss");
  ZT_CHECK(loss.numel() == 1, op, ": loss must hold one element, got ", loss.describe());
}

// Whether the storage of a and b shares any byte.
inline bool overlaps(const Tensor& a, const Tensor& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), b0 = reinterpret_cast<uintptr_t>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// Rows of a tensor seen as [numel / last_dim, last_dim]: leading dimensions are flattened.
inline int64_t rows_of(const Tensor& t) {
  ZT_CHECK(t.rank() >= 1, "rows_of: a scalar has no rows");
  const int64_t last = t.dim(-1);
  return last == 0 ? 0 : t.numel() / last;
}

}  // namespace zt::kernels
