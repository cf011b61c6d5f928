// The row helpers the CUDA LayerNorm kernels share (kernels/cuda/layernorm.cu: the forwards;
// layernorm_backward.cu: the backward): a warp's element partition of a row, the row held in registers,
// the row grid, the vector-path test and the (x, gamma) dtype dispatch. Internal to kernels/cuda; include
// only from .cu files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/dtype.h"

namespace zt::kernels::gpu::layernorm_rows {

using cuda_detail::current_device_multiprocessors;
using cuda_detail::dispatch_float_storage;
using cuda_detail::is_aligned16;
using cuda_detail::kMaxBlocks;
using cuda_detail::kThreadsPerBlock;
using cuda_detail::load128;
using cuda_detail::Pack128;
using cuda_detail::to_float;

constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;  // one row per warp

// Calls visit(j, value) for every element j of row `row` [dim] that lane `lane` owns: Pack128 slices
// strided by 32 lanes in the vector path (dim a multiple of the pack, base aligned), single elements
// otherwise. Each call site passes the same partition, so every pass over a row sees the same elements.
template <typename T, bool kVector, typename Visit>
__device__ __forceinline__ void for_row_elements(const T* row, int64_t dim, int lane, Visit&& visit) {
  if constexpr (kVector) {
    constexpr int kPack = Pack128<T>::kSize;
    for (int64_t j0 = static_cast<int64_t>(lane) * kPack; j0 < dim; j0 += 32 * kPack) {
      const Pack128<T> pack = load128(row + j0);
#pragma unroll
      for (int k = 0; k < kPack; ++k) visit(j0 + k, to_float(pack.v[k]));
    }
  } else {
    for (int64_t j = lane; j < dim; j += 32) visit(j, to_float(row[j]));
  }
}

// The vector row kernels keep a lane's Pack128 slices of its row in registers — RowSlices, the
// slices for_row_elements<T, true> visits, in its order — instead of reading the row again for every pass.
// The same values in the same order, so the same bits; what changes is latency: a warp's row loads issue
// together, and the statistics' two passes and the output pass read registers, not L1/L2. At bs 8 a
// LayerNorm kernel has ~1024 warps for 132 SMs, and the dropout + residual + LayerNorm tail took 14 us for
// 6 MB (ncu, ninth session): latency-bound; the step is 1 % faster at bs 8 and 40 (docs/DESIGN.md). Rows of
// up to 32 * kRowSlices packs (2048 bf16, 1024 f32 values); wider ones take the loops. Slice t of lane `lane`
// starts at column (lane + 32 t) * kPack; the loops over t are unrolled with constant bounds, so the slices
// stay in registers.
constexpr int kRowSlices = 8;

template <typename T>
struct RowSlices {
  static constexpr int kPack = Pack128<T>::kSize;
  Pack128<T> slice[kRowSlices];

  __device__ __forceinline__ static int64_t first(int lane, int t) {
    return (static_cast<int64_t>(lane) + 32 * t) * kPack;
  }
  __device__ __forceinline__ void load(const T* row, int64_t dim, int lane) {
#pragma unroll
    for (int t = 0; t < kRowSlices; ++t) {
      slice[t] = first(lane, t) < dim ? load128(row + first(lane, t)) : Pack128<T>{};  // never read past dim
    }
  }
  // visit(j, value) over the lane's elements, in for_row_elements<T, true>'s order.
  template <typename Visit>
  __device__ __forceinline__ void visit(int64_t dim, int lane, Visit&& visit) const {
#pragma unroll
    for (int t = 0; t < kRowSlices; ++t) {
      if (first(lane, t) >= dim) continue;
#pragma unroll
      for (int k = 0; k < kPack; ++k) visit(first(lane, t) + k, to_float(slice[t].v[k]));
    }
  }
};

template <typename T>
bool fits_row_slices(int64_t dim) {
  return dim <= int64_t{32} * kRowSlices * Pack128<T>::kSize;
}

// Whether a vector row kernel keeps the row in registers: a row RowSlices holds, and no more rows than one
// block a multiprocessor covers. The register kernels take 102/158/197-200 registers a thread in bf16 (ptxas,
// sm_90a: the plain forward, the dropout + residual tail, the dx kernel; 64-128 in f32) against 40-56 for the
// loops, so one block of 8 warps a multiprocessor instead of four: a gain where there is a block a
// multiprocessor at most anyway (bs 8: 1024 rows, 128 blocks), a loss of occupancy past it. Either choice
// gives the same bits.
template <typename T>
bool row_registers(int64_t dim, int64_t rows) {
  if (!fits_row_slices<T>(dim)) return false;
  return rows <= int64_t{current_device_multiprocessors()} * kWarpsPerBlock;
}

inline unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, kMaxBlocks));
}

template <typename T>
bool rows_vectorizable(int64_t dim, std::initializer_list<const void*> bases) {
  if (dim % Pack128<T>::kSize != 0) return false;
  for (const void* p : bases) {
    if (!is_aligned16(p)) return false;
  }
  return true;
}

// Calls f(T{}, W{}) with the storage types of x (T) and gamma (W: T or f32).
template <typename F>
void dispatch_layernorm_types(DType x_dtype, DType gamma_dtype, const char* op, F&& f) {
  ZT_CHECK(gamma_dtype == x_dtype || gamma_dtype == DType::f32, op, ": gamma must be ", dtype_name(x_dtype),
           " or f32, got ", dtype_name(gamma_dtype));
  dispatch_float_storage(x_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if (gamma_dtype == DType::f32) {
      f(tag, float{});
    } else {
      f(tag, T{});
    }
  });
}

}  // namespace zt::kernels::gpu::layernorm_rows
