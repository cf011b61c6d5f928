#include "kernels/cuda/layernorm.cuh"

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/device_allocator.h"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

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

// LayerNorm of one row xr [dim] by the 32 lanes of a warp (this is lane `lane`), statistics of the shifted
// values xc = x - K with K = xr[0]:
//   mu_c = sum_j xc / D;  var = sum_j (xc - mu_c)^2 / D;  rstd = 1 / sqrt(var + eps)
//   y = ((xc - mu_c) * rstd) * gamma + beta,   mean = K + mu_c
// The shift keeps f32 statistics exact enough for rows whose mean dwarfs their spread (x - K is exact
// when x and K are within a factor of 2, and the sums then carry no large common offset); the CPU gets
// the same effect from double accumulation. Lane 0 writes *mean and *rstd. The kVector flag fixes which lane
// sums which elements, and with it the bits of the statistics.
template <typename T, typename W, bool kVector>
__device__ __forceinline__ void layernorm_row(const T* xr, const W* gamma, const W* beta, float eps,
                                              int64_t dim, int lane, T* yr, float* mean, float* rstd) {
  const float fdim = static_cast<float>(dim);
  const float shift = to_float(xr[0]);
  float sum = 0.0f;
  for_row_elements<T, kVector>(xr, dim, lane, [&](int64_t, float v) { sum += v - shift; });
  const float mu_c = warp_sum(sum) / fdim;
  float squares = 0.0f;
  for_row_elements<T, kVector>(xr, dim, lane, [&](int64_t, float v) {
    const float centered = (v - shift) - mu_c;
    squares += centered * centered;
  });
  const float inv_std = 1.0f / sqrtf(warp_sum(squares) / fdim + eps);
  if constexpr (kVector) {
    constexpr int kPack = Pack128<T>::kSize;
    for (int64_t j0 = static_cast<int64_t>(lane) * kPack; j0 < dim; j0 += 32 * kPack) {
      const Pack128<T> in = load128(xr + j0);
      Pack128<T> out;
#pragma unroll
      for (int k = 0; k < kPack; ++k) {
        const float xhat = ((to_float(in.v[k]) - shift) - mu_c) * inv_std;
        out.v[k] = from_float<T>(xhat * to_float(gamma[j0 + k]) + to_float(beta[j0 + k]));
      }
      store128(yr + j0, out);
    }
  } else {
    for (int64_t j = lane; j < dim; j += 32) {
      const float xhat = ((to_float(xr[j]) - shift) - mu_c) * inv_std;
      yr[j] = from_float<T>(xhat * to_float(gamma[j]) + to_float(beta[j]));
    }
  }
  if (lane == 0) {
    *mean = shift + mu_c;
    *rstd = inv_std;
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

}  // namespace

bool layernorm_keeps_rows_in_registers(DType dtype, int64_t dim, int64_t rows) {
  bool registers = false;
  dispatch_float_storage(dtype, "layernorm_keeps_rows_in_registers",
                         [&](auto tag) { registers = row_registers<decltype(tag)>(dim, rows); });
  return registers;
}

namespace {

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

// layernorm_row over a row held in RowSlices (the same arithmetic, expression for expression). shift is
// the row's element 0, which lane 0 holds as its first slice's first value.
template <typename T, typename W>
__device__ __forceinline__ void layernorm_row_in_registers(const RowSlices<T>& xs, const W* gamma,
                                                           const W* beta, float eps, int64_t dim, int lane,
                                                           T* yr, float* mean, float* rstd) {
  const float fdim = static_cast<float>(dim);
  const float shift = __shfl_sync(0xffffffffu, to_float(xs.slice[0].v[0]), 0);
  float sum = 0.0f;
  xs.visit(dim, lane, [&](int64_t, float v) { sum += v - shift; });
  const float mu_c = warp_sum(sum) / fdim;
  float squares = 0.0f;
  xs.visit(dim, lane, [&](int64_t, float v) {
    const float centered = (v - shift) - mu_c;
    squares += centered * centered;
  });
  const float inv_std = 1.0f / sqrtf(warp_sum(squares) / fdim + eps);
#pragma unroll
  for (int t = 0; t < kRowSlices; ++t) {
    const int64_t j0 = RowSlices<T>::first(lane, t);
    if (j0 >= dim) continue;
    Pack128<T> out;
#pragma unroll
    for (int k = 0; k < RowSlices<T>::kPack; ++k) {
      const float xhat = ((to_float(xs.slice[t].v[k]) - shift) - mu_c) * inv_std;
      out.v[k] = from_float<T>(xhat * to_float(gamma[j0 + k]) + to_float(beta[j0 + k]));
    }
    store128(yr + j0, out);
  }
  if (lane == 0) {
    *mean = shift + mu_c;
    *rstd = inv_std;
  }
}

// One warp per row r of x [rows, dim] (layernorm_row).
// kRegisters (kVector only, dim fits RowSlices): the row held in registers.
template <typename T, typename W, bool kVector, bool kRegisters = false>
__global__ void layernorm_forward_kernel(const T* x, const W* gamma, const W* beta, float eps, int64_t rows,
                                         int64_t dim, T* y, float* mean, float* rstd) {
  static_assert(kVector || !kRegisters, "the row in registers is the vector partition");
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  for (int64_t r = first_row; r < rows; r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    if constexpr (kRegisters) {
      RowSlices<T> xs;
      xs.load(x + r * dim, dim, lane);
      layernorm_row_in_registers<T, W>(xs, gamma, beta, eps, dim, lane, y + r * dim, mean + r, rstd + r);
    } else {
      layernorm_row<T, W, kVector>(x + r * dim, gamma, beta, eps, dim, lane, y + r * dim, mean + r, rstd + r);
    }
  }
}

// Element i (flat index) of s <- Drop(s) + residual, rounded to T after the dropout and after the add, as
// dropout_forward and add_inplace store them. `bits` is the Philox block of i (unused without dropout).
template <typename T>
__device__ __forceinline__ T dropped_sum(const DropoutMaskOp& mask, bool dropout, const PhiloxCounter& bits,
                                         int64_t i, T s, T residual) {
  const T dropped = dropout ? from_float<T>(mask(bits, i, to_float(s))) : s;
  return from_float<T>(to_float(dropped) + to_float(residual));
}

// dropped_sum over a Pack128 whose first element has flat index `first_index` (a multiple of 4: a pack holds
// whole Philox groups).
template <typename T>
__device__ __forceinline__ void dropped_sum_pack(const DropoutMaskOp& mask, bool dropout, int64_t first_index,
                                                 const Pack128<T>& in, const Pack128<T>& add,
                                                 Pack128<T>& out) {
  constexpr int kPack = Pack128<T>::kSize;
#pragma unroll
  for (int g = 0; g < kPack / 4; ++g) {
    const int64_t first = first_index + 4 * g;
    const PhiloxCounter bits = dropout ? mask.group(static_cast<uint64_t>(first) / 4) : PhiloxCounter{};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out.v[4 * g + k] = dropped_sum(mask, dropout, bits, first + k, in.v[4 * g + k], add.v[4 * g + k]);
    }
  }
}

// One warp per row r of s [rows, dim]: first s[r] <- Drop(s[r]) + residual[r] (Pack128 slices when
// kVectorAdd, i.e. every row pointer is aligned, else single elements), then layernorm_row over the stored
// sums with the partition layernorm_forward would choose (kVector), so the statistics have its bits. The
// row's sums come back from L1/L2 rather than HBM; __syncwarp orders the lanes' stores before their loads.
// kRegisters (kVectorAdd only, dim fits RowSlices): the sums this lane stores are kept in registers for the
// LayerNorm, the same T values the loop path reads back.
template <typename T, typename W, bool kVector, bool kVectorAdd, bool kRegisters = false>
__global__ void dropout_add_layernorm_forward_kernel(T* s, const T* residual, DropoutMaskOp mask,
                                                     bool dropout, const W* gamma, const W* beta, float eps,
                                                     int64_t rows, int64_t dim, T* y, float* mean,
                                                     float* rstd) {
  static_assert(kVector || !kVectorAdd, "the vectorized add needs the vectorized row");
  static_assert(kVectorAdd || !kRegisters, "the row in registers is the vector partition");
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  for (int64_t r = first_row; r < rows; r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    T* sr = s + r * dim;
    const T* res = residual + r * dim;
    const int64_t row_start = r * dim;  // flat index of sr[0]: the dropout mask counts over the whole tensor
    if constexpr (kRegisters) {
      RowSlices<T> in, add;
      in.load(sr, dim, lane);
      add.load(res, dim, lane);
#pragma unroll
      for (int t = 0; t < kRowSlices; ++t) {
        const int64_t j0 = RowSlices<T>::first(lane, t);
        if (j0 >= dim) continue;
        dropped_sum_pack(mask, dropout, row_start + j0, in.slice[t], add.slice[t], in.slice[t]);
        store128(sr + j0, in.slice[t]);
      }
      layernorm_row_in_registers<T, W>(in, gamma, beta, eps, dim, lane, y + r * dim, mean + r, rstd + r);
      continue;
    }
    if constexpr (kVectorAdd) {
      // dim is a multiple of the pack (4 or 8), so a pack starts on a Philox group and holds whole groups.
      constexpr int kPack = Pack128<T>::kSize;
      for (int64_t j0 = static_cast<int64_t>(lane) * kPack; j0 < dim; j0 += 32 * kPack) {
        const Pack128<T> in = load128(sr + j0), add = load128(res + j0);
        Pack128<T> out;
        dropped_sum_pack(mask, dropout, row_start + j0, in, add, out);
        store128(sr + j0, out);
      }
    } else {
      for (int64_t j = lane; j < dim; j += 32) {
        const int64_t i = row_start + j;
        const PhiloxCounter bits = dropout ? mask.group(static_cast<uint64_t>(i) / 4) : PhiloxCounter{};
        sr[j] = dropped_sum(mask, dropout, bits, i, sr[j], res[j]);
      }
    }
    __syncwarp();
    layernorm_row<T, W, kVector>(sr, gamma, beta, eps, dim, lane, y + r * dim, mean + r, rstd + r);
  }
}

// The backward's two row means, mean_j g and mean_j (g * xhat) with g = dy * gamma, xhat = (x - mu) * rstd,
// by the 32 lanes of a warp over row dyr / xr (every lane gets both). The element partition of
// for_row_elements<kVector> fixes the summation order, and with it every bit of dx.
template <typename T, typename W, bool kVector>
__device__ __forceinline__ float2 dx_row_means(const T* dyr, const T* xr, const W* gamma, float mu,
                                               float inv_std, int64_t dim, int lane) {
  float sum_g = 0.0f, sum_g_xhat = 0.0f;
  for_row_elements<T, kVector>(dyr, dim, lane, [&](int64_t j, float d) {
    const float g = d * to_float(gamma[j]);
    sum_g += g;
    sum_g_xhat += g * ((to_float(xr[j]) - mu) * inv_std);
  });
  const float inv_dim = 1.0f / static_cast<float>(dim);
  return {warp_sum(sum_g) * inv_dim, warp_sum(sum_g_xhat) * inv_dim};
}

// dx = rstd * (g - mean_j g - xhat * mean_j(g * xhat)) for one element (means from dx_row_means): the one
// expression both dx kernels evaluate, so they round alike.
__device__ __forceinline__ float dx_of(float d, float gamma, float x, float mu, float inv_std, float2 means) {
  const float xhat = (x - mu) * inv_std;
  return inv_std * (d * gamma - means.x - xhat * means.y);
}

// dx (and Drop'(dx) into dss) for the Pack128 at columns j0.. of a row whose first element has flat index
// row_start: dx_of per element, rounded to T, then dropped as dropout_backward stores it (a pack holds whole
// Philox groups).
template <typename T, typename W>
__device__ __forceinline__ void dx_pack(const Pack128<T>& dys, const Pack128<T>& xs, const W* gamma,
                                        int64_t j0, int64_t row_start, float mu, float inv_std, float2 means,
                                        const DropoutMaskOp& mask, bool dropout, Pack128<T>& dxs,
                                        Pack128<T>& dss) {
  constexpr int kPack = Pack128<T>::kSize;
#pragma unroll
  for (int g = 0; g < kPack / 4; ++g) {
    const int64_t first = row_start + j0 + 4 * g;
    const PhiloxCounter bits = dropout ? mask.group(static_cast<uint64_t>(first) / 4) : PhiloxCounter{};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = 4 * g + k;
      dxs.v[e] = from_float<T>(
          dx_of(to_float(dys.v[e]), to_float(gamma[j0 + e]), to_float(xs.v[e]), mu, inv_std, means));
      dss.v[e] = dropout ? from_float<T>(mask(bits, first + k, to_float(dxs.v[e]))) : dxs.v[e];
    }
  }
}

// One warp per row: dx = rstd (g - mean_j g - xhat mean_j(g xhat)) and, when ds is given (the residual
// tail's backward), ds = Drop'(dx) — the stored dx times the keep mask of flat index i over 1 - p, rounded as
// dropout_backward stores it (or dx itself at p = 0). kVectorOut (kVector and dx, ds 16-byte aligned): each
// lane writes the Pack128 slices it read for the means, a pack holding whole Philox groups (dim is a multiple
// of the pack); otherwise single elements, one Philox block per element. Each element's value does not
// depend on which lane writes it, so the paths agree bit for bit. Reads dy[j] before writing dx[j] in the
// same thread (and every lane has read its part of the row for the means before warp_sum returns), so dx
// may alias dy; ds overlaps nothing.
// kRegisters (kVectorOut only, dim fits RowSlices): dy's and x's slices are read once, into registers, for
// both the means and the outputs (dx may still alias dy: every read precedes the lane's first store).
template <typename T, typename W, bool kVector, bool kVectorOut, bool kRegisters = false>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const W* gamma, const float* mean,
                                             const float* rstd, int64_t rows, int64_t dim, DropoutMaskOp mask,
                                             bool dropout, T* dx, T* ds) {
  static_assert(kVector || !kVectorOut, "the vector stores need the vector row partition");
  static_assert(kVectorOut || !kRegisters, "the row in registers is the vector partition");
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first_row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  auto dropped = [&](const PhiloxCounter& bits, int64_t i, T v) {
    return dropout ? from_float<T>(mask(bits, i, to_float(v))) : v;
  };
  for (int64_t r = first_row; r < rows; r += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const T* dyr = dy + r * dim;
    const T* xr = x + r * dim;
    const float mu = mean[r], inv_std = rstd[r];
    if constexpr (kRegisters) {
      constexpr int kPack = Pack128<T>::kSize;
      RowSlices<T> dys, xs;
      dys.load(dyr, dim, lane);
      xs.load(xr, dim, lane);
      // dx_row_means over the registers: g = dy * gamma and g * xhat, summed in the same order.
      float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
      for (int t = 0; t < kRowSlices; ++t) {
        const int64_t j0 = RowSlices<T>::first(lane, t);
        if (j0 >= dim) continue;
#pragma unroll
        for (int k = 0; k < kPack; ++k) {
          const float g = to_float(dys.slice[t].v[k]) * to_float(gamma[j0 + k]);
          sum_g += g;
          sum_g_xhat += g * ((to_float(xs.slice[t].v[k]) - mu) * inv_std);
        }
      }
      const float inv_dim = 1.0f / static_cast<float>(dim);
      const float2 means{warp_sum(sum_g) * inv_dim, warp_sum(sum_g_xhat) * inv_dim};
      T* dxr = dx + r * dim;
      T* dsr = ds != nullptr ? ds + r * dim : nullptr;
      const int64_t row_start = r * dim;
#pragma unroll
      for (int t = 0; t < kRowSlices; ++t) {
        const int64_t j0 = RowSlices<T>::first(lane, t);
        if (j0 >= dim) continue;
        Pack128<T> dxs, dss;
        dx_pack(dys.slice[t], xs.slice[t], gamma, j0, row_start, mu, inv_std, means, mask, dropout, dxs, dss);
        store128(dxr + j0, dxs);
        if (dsr != nullptr) store128(dsr + j0, dss);
      }
      continue;
    }
    const float2 means = dx_row_means<T, W, kVector>(dyr, xr, gamma, mu, inv_std, dim, lane);
    T* dxr = dx + r * dim;
    T* dsr = ds != nullptr ? ds + r * dim : nullptr;
    // The flat index of the row's first element: the mask counts over the whole tensor.
    const int64_t row_start = r * dim;
    if constexpr (kVectorOut) {
      constexpr int kPack = Pack128<T>::kSize;
      for (int64_t j0 = static_cast<int64_t>(lane) * kPack; j0 < dim; j0 += 32 * kPack) {
        Pack128<T> dxs, dss;
        dx_pack(load128(dyr + j0), load128(xr + j0), gamma, j0, row_start, mu, inv_std, means, mask, dropout,
                dxs, dss);
        store128(dxr + j0, dxs);
        if (dsr != nullptr) store128(dsr + j0, dss);
      }
    } else {
      for (int64_t j = lane; j < dim; j += 32) {
        const int64_t i = row_start + j;
        const PhiloxCounter bits = dropout ? mask.group(static_cast<uint64_t>(i) / 4) : PhiloxCounter{};
        const T v =
            from_float<T>(dx_of(to_float(dyr[j]), to_float(gamma[j]), to_float(xr[j]), mu, inv_std, means));
        dxr[j] = v;
        if (dsr != nullptr) dsr[j] = dropped(bits, i, v);
      }
    }
  }
}

// Parameter-gradient partials. Block (32 column lanes x 8 row lanes) for column tile blockIdx.x and row chunk
// blockIdx.y = c, rows [c * rows_per_chunk, min(rows, (c + 1) * rows_per_chunk)):
//   partial_gamma[c, j] = sum_{r in chunk} dy[r, j] * xhat[r, j],   partial_beta[c, j] = sum dy[r, j]
// Each row lane sums every 8th row of the chunk; the 8 lane sums are then added in lane order. A column lane
// takes kVec adjacent columns (kVec = the Pack128 size where dim and the bases allow: one 16-byte load per
// row instead of a 2-byte one; else 1). Every column is summed in the same order either way, so kVec changes
// no bit of the result.
constexpr int kColumnTile = 32;
constexpr int kRowLanes = 8;

template <typename T, int kVec>
__global__ void layernorm_param_grad_partials_kernel(const T* dy, const T* x, const float* mean,
                                                     const float* rstd, int64_t rows, int64_t dim,
                                                     int64_t rows_per_chunk, float* partial_gamma,
                                                     float* partial_beta) {
  constexpr int kBlockColumns = kColumnTile * kVec;
  __shared__ float lane_gamma[kRowLanes][kBlockColumns];
  __shared__ float lane_beta[kRowLanes][kBlockColumns];
  const int64_t j0 = (static_cast<int64_t>(blockIdx.x) * kColumnTile + threadIdx.x) * kVec;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = min(rows, begin + rows_per_chunk);
  float sum_gamma[kVec] = {}, sum_beta[kVec] = {};
  if (j0 < dim) {  // kVec > 1: dim is a multiple of kVec, so the thread's columns all exist
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) {
      const FloatSlice<T, kVec> d(dy + r * dim + j0), v(x + r * dim + j0);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        sum_gamma[k] += d[k] * ((v[k] - mean[r]) * rstd[r]);
        sum_beta[k] += d[k];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    lane_gamma[threadIdx.y][threadIdx.x * kVec + k] = sum_gamma[k];
    lane_beta[threadIdx.y][threadIdx.x * kVec + k] = sum_beta[k];
  }
  __syncthreads();
  // Column `col` of the block's kBlockColumns, its eight lane sums added in lane order.
  for (int col = threadIdx.y * kColumnTile + threadIdx.x; col < kBlockColumns;
       col += kColumnTile * kRowLanes) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * kBlockColumns + col;
    if (j >= dim) continue;
    float g = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) {
      g += lane_gamma[k][col];
      b += lane_beta[k][col];
    }
    partial_gamma[chunk * dim + j] = g;
    partial_beta[chunk * dim + j] = b;
  }
}

// Chunks of at least 32 rows, at most 256 of them: a function of R only, so the reduction order (and with it
// every bit of dgamma, dbeta) does not depend on the device.
constexpr int64_t kMinRowsPerChunk = 32;
constexpr int64_t kMaxChunks = 256;

struct ChunkPlan {
  int64_t chunks, rows_per_chunk;
};
ChunkPlan plan_chunks(int64_t rows) {
  const int64_t chunks = std::clamp<int64_t>((rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk, 1, kMaxChunks);
  return {chunks, (rows + chunks - 1) / chunks};
}

unsigned row_blocks(int64_t rows) {
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

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                       const Tensor& mean, const Tensor& rstd, cudaStream_t stream) {
  constexpr const char* op = "layernorm_forward";
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  if (rows == 0) return;
  dispatch_layernorm_types(x.dtype(), gamma.dtype(), op, [&](auto t_tag, auto w_tag) {
    using T = decltype(t_tag);
    using W = decltype(w_tag);
    const bool vector = rows_vectorizable<T>(dim, {x.data(), y.data()});
    const auto kernel = vector && row_registers<T>(dim, rows) ? layernorm_forward_kernel<T, W, true, true>
                        : vector                              ? layernorm_forward_kernel<T, W, true>
                                                              : layernorm_forward_kernel<T, W, false>;
    kernel<<<row_blocks(rows), kThreadsPerBlock, 0, stream>>>(typed<T>(x), typed<W>(gamma), typed<W>(beta),
                                                              eps, rows, dim, typed<T>(y), typed<float>(mean),
                                                              typed<float>(rstd));
    ZT_CUDA_CHECK_LAUNCH(op);
  });
}

void dropout_add_layernorm_forward(const Tensor& s, const Tensor& residual, const DropoutSite& site,
                                   const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                   const Tensor& mean, const Tensor& rstd, cudaStream_t stream) {
  constexpr const char* op = "dropout_add_layernorm_forward";
  const int64_t dim = s.dim(-1);
  const int64_t rows = rows_of(s);
  if (rows == 0) return;
  // p == 0: dropout_forward(s, s) leaves s as it is, and so does the kernel (no Philox rounds either).
  const bool dropout = site.p != 0.0f;
  const DropoutMaskOp mask{site.p, dropout ? 1.0f / (1.0f - site.p) : 1.0f, site.seed, site.site_id};
  dispatch_layernorm_types(s.dtype(), gamma.dtype(), op, [&](auto t_tag, auto w_tag) {
    using T = decltype(t_tag);
    using W = decltype(w_tag);
    // The row partition of layernorm_forward(s, ..., y, ...), whatever the residual's alignment.
    const bool row_vector = rows_vectorizable<T>(dim, {s.data(), y.data()});
    const bool add_vector = row_vector && is_aligned16(residual.data());
    const auto kernel = add_vector && row_registers<T>(dim, rows)
                            ? dropout_add_layernorm_forward_kernel<T, W, true, true, true>
                        : add_vector ? dropout_add_layernorm_forward_kernel<T, W, true, true>
                        : row_vector ? dropout_add_layernorm_forward_kernel<T, W, true, false>
                                     : dropout_add_layernorm_forward_kernel<T, W, false, false>;
    kernel<<<row_blocks(rows), kThreadsPerBlock, 0, stream>>>(
        typed<T>(s), typed<T>(residual), mask, dropout, typed<W>(gamma), typed<W>(beta), eps, rows, dim,
        typed<T>(y), typed<float>(mean), typed<float>(rstd));
    ZT_CUDA_CHECK_LAUNCH(op);
  });
}

namespace {

// layernorm_backward, and with `drop` (ds and its site) layernorm_dropout_backward: the parameter-gradient
// partials and their in-order sums, then the dx kernel.
struct DropoutOutput {
  const Tensor* ds;
  DropoutSite site;
};
void queue_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                              GradWrite write, const DropoutOutput* drop, cudaStream_t stream,
                              const char* op) {
  const int64_t dim = x.dim(-1);
  const int64_t rows = rows_of(x);
  if (rows == 0 || dim == 0) {
    if (write == GradWrite::overwrite) {  // the sum over no rows
      fill(dgamma, 0.0f, stream);
      fill(dbeta, 0.0f, stream);
    }
    return;
  }
  const ChunkPlan plan = plan_chunks(rows);
  DeviceBuffer scratch =
      device_allocator().allocate(2 * static_cast<size_t>(plan.chunks * dim) * sizeof(float),
                                  MemoryCategory::scratch, "layernorm_backward partials");
  float* partial_gamma = scratch.data_as<float>();
  float* partial_beta = partial_gamma + plan.chunks * dim;
  dispatch_layernorm_types(x.dtype(), gamma.dtype(), op, [&](auto t_tag, auto w_tag) {
    using T = decltype(t_tag);
    using W = decltype(w_tag);
    // The partials read dy before the dx kernel may overwrite it (dx aliasing dy): same stream, in order.
    constexpr int kPack = Pack128<T>::kSize;
    const bool row_vector = rows_vectorizable<T>(dim, {dy.data(), x.data()});
    const int columns_per_block = kColumnTile * (row_vector ? kPack : 1);
    const dim3 tiles(static_cast<unsigned>((dim + columns_per_block - 1) / columns_per_block),
                     static_cast<unsigned>(plan.chunks));
    const auto partials = row_vector ? layernorm_param_grad_partials_kernel<T, kPack>
                                     : layernorm_param_grad_partials_kernel<T, 1>;
    partials<<<tiles, dim3(kColumnTile, kRowLanes), 0, stream>>>(
        typed<T>(dy), typed<T>(x), typed<float>(mean), typed<float>(rstd), rows, dim, plan.rows_per_chunk,
        partial_gamma, partial_beta);
    ZT_CUDA_CHECK_LAUNCH("layernorm_param_grad_partials");
    // dgamma[j] (+)= sum_c partial_gamma[c, j], dbeta[j] (+)= sum_c partial_beta[c, j], in a fixed order.
    add_chunk_partials(partial_gamma, plan.chunks, dim, typed<float>(dgamma), write, stream);
    add_chunk_partials(partial_beta, plan.chunks, dim, typed<float>(dbeta), write, stream);
    // Without `drop` or at p == 0 no Philox rounds run (dropout_backward is then a copy, and so is ds).
    const DropoutSite site = drop != nullptr ? drop->site : DropoutSite{};
    const bool dropout = site.p != 0.0f;
    const DropoutMaskOp mask{site.p, dropout ? 1.0f / (1.0f - site.p) : 1.0f, site.seed, site.site_id};
    T* ds = drop != nullptr ? typed<T>(*drop->ds) : nullptr;
    const bool out_vector = row_vector && is_aligned16(dx.data()) && (ds == nullptr || is_aligned16(ds));
    const auto kernel = out_vector && row_registers<T>(dim, rows)
                            ? layernorm_backward_dx_kernel<T, W, true, true, true>
                        : out_vector ? layernorm_backward_dx_kernel<T, W, true, true>
                        : row_vector ? layernorm_backward_dx_kernel<T, W, true, false>
                                     : layernorm_backward_dx_kernel<T, W, false, false>;
    kernel<<<row_blocks(rows), kThreadsPerBlock, 0, stream>>>(typed<T>(dy), typed<T>(x), typed<W>(gamma),
                                                              typed<float>(mean), typed<float>(rstd), rows,
                                                              dim, mask, dropout, typed<T>(dx), ds);
    ZT_CUDA_CHECK_LAUNCH("layernorm_backward_dx");
  });
}

}  // namespace

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        GradWrite write, cudaStream_t stream) {
  queue_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, nullptr, stream,
                           "layernorm_backward");
}

void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta, GradWrite write,
                                cudaStream_t stream) {
  const DropoutOutput drop{&ds, site};
  queue_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, &drop, stream,
                           "layernorm_dropout_backward");
}

}  // namespace zt::kernels::gpu
