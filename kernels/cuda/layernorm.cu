// The CUDA LayerNorm forwards (kernels/cuda/layernorm.cuh): the plain one and the dropout + residual +
// LayerNorm tail, one warp per row. The backward is in layernorm_backward.cu; the row helpers both use in
// layernorm_rows.cuh.
#include "kernels/cuda/layernorm.cuh"

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/cuda/layernorm_rows.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;
using namespace layernorm_rows;

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

}  // namespace

bool layernorm_keeps_rows_in_registers(DType dtype, int64_t dim, int64_t rows) {
  bool registers = false;
  dispatch_float_storage(dtype, "layernorm_keeps_rows_in_registers",
                         [&](auto tag) { registers = row_registers<decltype(tag)>(dim, rows); });
  return registers;
}

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

}  // namespace zt::kernels::gpu
