// The CUDA LayerNorm backward (kernels/cuda/layernorm.cuh): the dx kernel and the parameter-gradient
// partials kernel of the separate path, the fused kernel (Note [fused LayerNorm backward]), the partials'
// in-order sums, and the host side choosing between them. The forwards are in layernorm.cu; the row helpers
// both use in layernorm_rows.cuh.
#include "kernels/cuda/layernorm.cuh"

#include <algorithm>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/cuda/layernorm_rows.cuh"
#include "runtime/device_allocator.h"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;
using namespace layernorm_rows;

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

// dx (and ds) of one row from its means, by the 32 lanes of a warp over a row whose first element has flat
// index row_start: Pack128 slices of the row in the vector partition (kVectorOut), single elements with one
// Philox block each otherwise; dx_of per element either way, so the two agree bit for bit. Reads dy[j]
// before writing dx[j] in the same thread, so dxr may alias dyr. The output loops of the dx kernel and the
// fused one.
template <typename T, typename W, bool kVectorOut>
__device__ __forceinline__ void store_dx_row(const T* dyr, const T* xr, const W* gamma, float mu,
                                             float inv_std, float2 means, int64_t dim, int lane,
                                             int64_t row_start, const DropoutMaskOp& mask, bool dropout,
                                             T* dxr, T* dsr) {
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
      if (dsr != nullptr) dsr[j] = dropout ? from_float<T>(mask(bits, i, to_float(v))) : v;
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
    // The flat index of the row's first element (r * dim): the mask counts over the whole tensor.
    store_dx_row<T, W, kVectorOut>(dyr, xr, gamma, mu, inv_std, means, dim, lane, r * dim, mask, dropout,
                                   dx + r * dim, ds != nullptr ? ds + r * dim : nullptr);
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

// Note [fused LayerNorm backward]
// The separate path reads dy and x twice from memory: layernorm_param_grad_partials_kernel, two
// add_chunk_partials launches and the dx kernel (under Nsight Compute at [5120, 1536] bf16 on the H100: 16.6,
// 4.4 + 4.4 and 33 us).
// layernorm_backward_fused_kernel does the partials' and the dx kernel's work over one read of each row:
// one block of 8 warps per row chunk of plan_chunks(rows), warp w being the chunk's row lane w. The warp
// takes rows begin + w, begin + w + 8, ... in ascending order and, for each,
//   pass 1: reads dy and x (16-byte packs in the vector partition, else single elements: the dx kernel's
//           partition), sums g = dy gamma and g xhat for the means as dx_row_means does, and adds
//           dy ((x - mean) rstd) and dy into its own sums of those columns (shared memory, below);
//   pass 2: writes dx (and ds) as the dx kernel's loops do (store_dx_row; the re-read hits L1/L2).
// After the chunk, the eight row lanes' sums of column j are added in lane order from 0.0f into
// partial_gamma/partial_beta[chunk, j]. Every term is the partials kernel's f32 value, each column is summed
// in its order (row lane y: rows begin + y, begin + y + 8, ... ascending; then lanes 0..7), and dx/ds are
// the dx kernel's expressions over its partition: the same bits as the separate kernels, which stay the
// path for what the fused kernel does not take (below).
//
// Why the row lanes' sums live in shared memory, not registers: a lane owns dim / 32 columns, 48 at 1536,
// so the two sums need 96 f32 registers on top of the dx loop kernel's ~56: past 128 a thread, one block of
// 256 threads per SM. At 5120 rows that is 160 blocks on the H100's 132 SMs: two waves, the second 28 blocks
// long, and as each warp walks its 4 rows in sequence, the kernel would last two chunks' serial work instead
// of one. In shared memory they take 2 x 8 x (dim + dim / 32) floats, 99 KiB at 1536: two blocks an SM
// (200 of 228 KiB with the 1 KiB the system keeps per block), so all 160 blocks are resident at once, and
// the registers stay near the loop kernel's (ptxas, sm_90a: 89 in bf16, 92 with f32 gamma, 71-72 in f32
// and in the scalar partition; no spills; capped at 128 by __launch_bounds__ to keep two blocks).
//
// Measured (H100, bf16, dim 1536, 2026-12-07, us, separate / fused; without ds, with ds): 1024 rows 13.9 /
// 32.0, 16.8 / 42.0; 2048 rows 16.9 / 32.3, 22.2 / 42.2; 4096 rows 30.5 / 37.3, 46.2 / 52.9; 5120 rows
// 41.9 / 47.9, 55.2 / 63.0; 10240 rows 77.8 / 61.5, 100.1 / 81.0 (5120 x 1024: 28.1 / 27.8, 38.3 / 43.8).
// While every block is resident (two an SM) the fused kernel lasts about one block's serial walk of its
// chunk, which grows with the rows a chunk (47.9 us for 160 chunks of 32, 61.5 for 256 of 40), not with
// the chunk count; the separate kernels grow with the rows. So `automatic` takes
// it from kFusedMinRows = 8192 rows (256 chunks, plan_chunks' most), between the measured 5120 (14 %
// slower) and 10240 (21 % faster): the step's LayerNorms at 16 x 512 and from batch 64 at 128 tokens. Not
// taken either: rows wider than the opt-in shared memory of a block holds (~3500 columns), and the vector
// row partition with dx or ds off 16-byte alignment (scalar stores under a vector partition: the separate
// path's fourth dx variant, kept out of the fused kernel's instantiations).

// Index of column j in a row lane's shared-memory sums: j + j / 32, one padding float every 32 columns. A
// warp's accesses then hit 32 distinct banks in every pattern the kernel has: lane l's element k of its
// pack in the 16-bit vector partition (j = 8 (l + 32 t) + k: bank 8 l + l / 4 + const mod 32), in the f32
// one (j = 4 (l + 32 t) + k: 4 l + l / 8 + const), in the scalar one (j = l + 32 i: l + const), and 32
// consecutive columns in the final lane-order sums. Unpadded, the 16-bit packs' lanes would meet 8 to a bank.
__device__ __forceinline__ int lane_sum_slot(int64_t j) {
  const int column = static_cast<int>(j);  // < dim, which fits a block's shared memory
  return column + (column >> 5);
}
// Floats of one row lane's sums of `dim` columns (every lane_sum_slot below it).
__host__ __device__ inline int64_t lane_sum_pitch(int64_t dim) {
  return dim + (dim + 31) / 32;
}
// Dynamic shared memory of the fused kernel: gamma's and beta's sums of the 8 row lanes.
inline size_t fused_backward_shared_bytes(int64_t dim) {
  return 2 * static_cast<size_t>(kRowLanes * lane_sum_pitch(dim)) * sizeof(float);
}

// The fused backward (Note [fused LayerNorm backward]): block c = blockIdx.x takes chunk c, rows [c
// rows_per_chunk, min(rows, (c + 1) rows_per_chunk)); writes dx, ds (when given) and partial_gamma,
// partial_beta [chunks, dim] as layernorm_backward_dx_kernel<T, W, kVector, kVector> and
// layernorm_param_grad_partials_kernel do. dx may alias dy (each row is read, for both passes, by the warp
// that writes it, and pass 1 reads dy[j] before pass 2 overwrites it); ds overlaps nothing. Two blocks an SM
// at most, by shared memory at xlarge's width, so registers are capped to match.
template <typename T, typename W, bool kVector>
__global__ void __launch_bounds__(kThreadsPerBlock, 2)
    layernorm_backward_fused_kernel(const T* dy, const T* x, const W* gamma, const float* mean,
                                    const float* rstd, int64_t rows, int64_t dim, int64_t rows_per_chunk,
                                    DropoutMaskOp mask, bool dropout, T* dx, T* ds, float* partial_gamma,
                                    float* partial_beta) {
  static_assert(kWarpsPerBlock == kRowLanes, "warp w of the block is the chunk's row lane w");
  extern __shared__ float lane_sums[];  // [2][kRowLanes][lane_sum_pitch(dim)]: gamma's, then beta's
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row_lane = static_cast<int>(threadIdx.x) / 32;
  const int64_t pitch = lane_sum_pitch(dim);
  float* gamma_sums = lane_sums + row_lane * pitch;
  float* beta_sums = lane_sums + (kRowLanes + row_lane) * pitch;
  for (int64_t s = lane; s < pitch; s += 32) {
    gamma_sums[s] = 0.0f;
    beta_sums[s] = 0.0f;
  }
  __syncwarp();  // the lane zeroing a slot is not always the lane adding into it
  const int64_t chunk = blockIdx.x;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = min(rows, begin + rows_per_chunk);
  for (int64_t r = begin + row_lane; r < end; r += kRowLanes) {
    const T* dyr = dy + r * dim;
    const T* xr = x + r * dim;
    const float mu = mean[r], inv_std = rstd[r];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    // Element j (d = dy, v = x): dx_row_means' two terms, then the partials kernel's two, as they write them.
    const auto add = [&](int64_t j, float d, float v) {
      const float g = d * to_float(gamma[j]);
      sum_g += g;
      sum_g_xhat += g * ((v - mu) * inv_std);
      const int s = lane_sum_slot(j);
      gamma_sums[s] += d * ((v - mu) * inv_std);
      beta_sums[s] += d;
    };
    if constexpr (kVector) {
      constexpr int kPack = Pack128<T>::kSize;
      for (int64_t j0 = static_cast<int64_t>(lane) * kPack; j0 < dim; j0 += 32 * kPack) {
        const Pack128<T> dys = load128(dyr + j0), xs = load128(xr + j0);
#pragma unroll
        for (int k = 0; k < kPack; ++k) add(j0 + k, to_float(dys.v[k]), to_float(xs.v[k]));
      }
    } else {
      for (int64_t j = lane; j < dim; j += 32) add(j, to_float(dyr[j]), to_float(xr[j]));
    }
    const float inv_dim = 1.0f / static_cast<float>(dim);
    const float2 means{warp_sum(sum_g) * inv_dim, warp_sum(sum_g_xhat) * inv_dim};
    store_dx_row<T, W, kVector>(dyr, xr, gamma, mu, inv_std, means, dim, lane, r * dim, mask, dropout,
                                dx + r * dim, ds != nullptr ? ds + r * dim : nullptr);
  }
  __syncthreads();
  // Column j's eight row-lane sums in lane order, from 0.0f, as the partials kernel adds them.
  for (int64_t j = threadIdx.x; j < dim; j += kThreadsPerBlock) {
    const int s = lane_sum_slot(j);
    float g = 0.0f, b = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowLanes; ++k) {
      g += lane_sums[k * pitch + s];
      b += lane_sums[(kRowLanes + k) * pitch + s];
    }
    partial_gamma[chunk * dim + j] = g;
    partial_beta[chunk * dim + j] = b;
  }
}

// Pass 2 of both parameter gradients in one launch: block (x, 0) adds partial_gamma's chunks of columns
// [32 x, 32 x + 32) into dgamma, block (x, 1) partial_beta's into dbeta, by add_chunk_partials' own block
// body (add_tile_partials, kernels/cuda/column_sum.cuh): the order, and so the bits, of its two launches.
__global__ void add_param_grad_partials_kernel(const float* __restrict__ partial_gamma,
                                               const float* __restrict__ partial_beta, int64_t chunks,
                                               int64_t dim, bool overwrite, float* __restrict__ dgamma,
                                               float* __restrict__ dbeta) {
  const bool beta = blockIdx.y == 1;
  add_tile_partials(beta ? partial_beta : partial_gamma, chunks, dim,
                    static_cast<int64_t>(blockIdx.x) * kColumnSumTile, kColumnSumTile, overwrite,
                    beta ? dbeta : dgamma);
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

// Whether the backward runs layernorm_backward_fused_kernel (Note [fused LayerNorm backward]): where it can
// (a row's sums fit a block's shared memory; a vector row partition has vector stores) and, under
// `automatic`, from kFusedMinRows rows on. `fused` where it cannot is an error, so that a test asking for it
// knows it ran.
constexpr int64_t kFusedMinRows = 8192;
bool takes_fused_backward(int64_t dim, int64_t rows, bool row_vector, bool out_vector,
                          LayerNormBackwardPath path, const char* op) {
  if (path == LayerNormBackwardPath::separate) return false;
  const bool fits =
      fused_backward_shared_bytes(dim) <= static_cast<size_t>(current_device_limits().shared_per_block_optin);
  const bool can = fits && (out_vector || !row_vector);
  if (path == LayerNormBackwardPath::fused) {
    ZT_CHECK(can, op, ": the fused backward needs a row's sums within a block's shared memory (", dim,
             " columns take ", fused_backward_shared_bytes(dim),
             " bytes) and, with dy and x 16-byte aligned, dx and ds aligned too");
    return true;
  }
  return can && rows >= kFusedMinRows;
}

// layernorm_backward, and with `drop` (ds and its site) layernorm_dropout_backward: dx (and ds) with the
// parameter-gradient partials, by one fused kernel or by the partials kernel and then the dx kernel; then the
// partials' in-order sums into dgamma and dbeta.
struct DropoutOutput {
  const Tensor* ds;
  DropoutSite site;
};
void queue_layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                              GradWrite write, const DropoutOutput* drop, LayerNormBackwardPath path,
                              cudaStream_t stream, const char* op) {
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
    // Without `drop` or at p == 0 no Philox rounds run (dropout_backward is then a copy, and so is ds).
    const DropoutSite site = drop != nullptr ? drop->site : DropoutSite{};
    const bool dropout = site.p != 0.0f;
    const DropoutMaskOp mask{site.p, dropout ? 1.0f / (1.0f - site.p) : 1.0f, site.seed, site.site_id};
    T* ds = drop != nullptr ? typed<T>(*drop->ds) : nullptr;
    const bool row_vector = rows_vectorizable<T>(dim, {dy.data(), x.data()});
    const bool out_vector = row_vector && is_aligned16(dx.data()) && (ds == nullptr || is_aligned16(ds));
    const bool fused = takes_fused_backward(dim, rows, row_vector, out_vector, path, op);
    if (fused) {
      const auto kernel = row_vector ? layernorm_backward_fused_kernel<T, W, true>
                                     : layernorm_backward_fused_kernel<T, W, false>;
      const size_t bytes = fused_backward_shared_bytes(dim);
      const DeviceLaunchLimits& limits = current_device_limits();
      // The opt-in limit rather than `bytes`: a rank on another thread launching a wider row between this
      // call and the launch below cannot leave the limit short.
      ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         limits.shared_per_block_optin));
      // Enough of the unified L1 as shared memory for two blocks an SM, the rest stays L1 for pass 2's
      // re-read: no more are resident anyway (__launch_bounds__), and at xlarge's width two take the whole
      // 228 KiB. A percentage of a multiprocessor's shared memory, which the driver rounds up to a
      // configuration it has.
      const size_t two_blocks = 2 * (bytes + static_cast<size_t>(limits.shared_reserved_per_block));
      const auto per_multiprocessor = static_cast<size_t>(limits.shared_per_multiprocessor);
      const int percent = static_cast<int>(
          std::min<size_t>(100, (100 * two_blocks + per_multiprocessor - 1) / per_multiprocessor));
      ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
      kernel<<<static_cast<unsigned>(plan.chunks), kThreadsPerBlock, bytes, stream>>>(
          typed<T>(dy), typed<T>(x), typed<W>(gamma), typed<float>(mean), typed<float>(rstd), rows, dim,
          plan.rows_per_chunk, mask, dropout, typed<T>(dx), ds, partial_gamma, partial_beta);
      ZT_CUDA_CHECK_LAUNCH("layernorm_backward_fused");
    } else {
      // The partials read dy before the dx kernel may overwrite it (dx aliasing dy): same stream, in order.
      constexpr int kPack = Pack128<T>::kSize;
      const int columns_per_block = kColumnTile * (row_vector ? kPack : 1);
      const dim3 tiles(static_cast<unsigned>((dim + columns_per_block - 1) / columns_per_block),
                       static_cast<unsigned>(plan.chunks));
      const auto partials = row_vector ? layernorm_param_grad_partials_kernel<T, kPack>
                                       : layernorm_param_grad_partials_kernel<T, 1>;
      partials<<<tiles, dim3(kColumnTile, kRowLanes), 0, stream>>>(
          typed<T>(dy), typed<T>(x), typed<float>(mean), typed<float>(rstd), rows, dim, plan.rows_per_chunk,
          partial_gamma, partial_beta);
      ZT_CUDA_CHECK_LAUNCH("layernorm_param_grad_partials");
    }
    // dgamma[j] (+)= sum_c partial_gamma[c, j], dbeta[j] (+)= sum_c partial_beta[c, j], in a fixed order.
    const dim3 column_tiles(static_cast<unsigned>((dim + kColumnSumTile - 1) / kColumnSumTile), 2);
    add_param_grad_partials_kernel<<<column_tiles, dim3(kColumnSumTile, kColumnSumRowLanes), 0, stream>>>(
        partial_gamma, partial_beta, plan.chunks, dim, write == GradWrite::overwrite, typed<float>(dgamma),
        typed<float>(dbeta));
    ZT_CUDA_CHECK_LAUNCH("layernorm_add_param_grad_partials");
    if (fused) return;
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
                        GradWrite write, cudaStream_t stream, LayerNormBackwardPath path) {
  queue_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, nullptr, path, stream,
                           "layernorm_backward");
}

void layernorm_dropout_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                const Tensor& rstd, const DropoutSite& site, const Tensor& dx,
                                const Tensor& ds, const Tensor& dgamma, const Tensor& dbeta, GradWrite write,
                                cudaStream_t stream, LayerNormBackwardPath path) {
  const DropoutOutput drop{&ds, site};
  queue_layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, write, &drop, path, stream,
                           "layernorm_dropout_backward");
}

}  // namespace zt::kernels::gpu
