// Deterministic column sums of a row-major [rows, cols] matrix, pass 1: the order column_sum_into
// (kernels/cuda/gemm.cuh) sums a bias gradient in, as a block body that kernels writing the summed values can
// share (the FFN's GELU backward sums the dx it writes), so a fused sum is bitwise the separate pass's.
//
// Rows are cut into at most 64 chunks of >= 128 rows (a function of rows only); block (x, chunk) of 32 x 8
// threads sums its chunk of 32 kVec columns into partial[chunk, c]: thread (tx, ty) takes rows ty,
// ty + 8, ... of the chunk for columns c0 = (32 x + tx) kVec .. c0 + kVec, and the eight lane sums are added
// in ty order. kVec (a Pack128's width, or 1) changes no bit: every column is summed in the same order.
// Pass 2 adds the partials in chunk order: add_chunk_partials (kernels/cuda/gemm.cuh), its own kernel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace zt::kernels::cuda_detail {

constexpr int kColumnSumTile = 32;     // column lanes per block (one warp wide: coalesced rows)
constexpr int kColumnSumRowLanes = 8;  // row partial sums per column within a block

struct ColumnSumPlan {
  int64_t chunks = 1, rows_per_chunk = 0;

  explicit ColumnSumPlan(int64_t rows) {
    constexpr int64_t kMaxChunks = 64;
    constexpr int64_t rows_per_chunk_min = 128;
    chunks = std::clamp<int64_t>((rows + rows_per_chunk_min - 1) / rows_per_chunk_min, 1, kMaxChunks);
    rows_per_chunk = (rows + chunks - 1) / chunks;
  }
  static dim3 block() { return dim3(kColumnSumTile, kColumnSumRowLanes); }
  dim3 grid(int64_t cols, int vec) const {
    const int64_t columns_per_block = int64_t{kColumnSumTile} * vec;
    return dim3(static_cast<unsigned int>((cols + columns_per_block - 1) / columns_per_block),
                static_cast<unsigned int>(chunks));
  }
};

// Pass 2 for the 32 x `width` columns [first, first + width) (width a multiple of 32) by one block of
// 32 x 8 threads: thread (tx, ty) adds chunks ty, ty + 8, ... of its column, and the eight lane sums are
// added in ty order — an order that depends only on (chunks, cols): deterministic.
//   out[c] = (overwrite ? 0 : out[c]) + sum_k partial[k, c]
__device__ __forceinline__ void add_tile_partials(const float* partial, int64_t chunks, int64_t cols,
                                                  int64_t first, int width, bool overwrite,
                                                  float* __restrict__ out) {
  __shared__ float lanes[kColumnSumRowLanes][kColumnSumTile + 1];
  for (int group = 0; group < width; group += kColumnSumTile) {
    if (group > 0) __syncthreads();  // the previous group's lane sums are read before they are overwritten
    const int64_t c = first + group + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
      for (int64_t k = threadIdx.y; k < chunks; k += kColumnSumRowLanes) sum += partial[k * cols + c];
    }
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      float total = 0.0f;
      for (int lane = 0; lane < kColumnSumRowLanes; ++lane) total += lanes[lane][threadIdx.x];
      out[c] = (overwrite ? 0.0f : out[c]) + total;  // 0 + total: the accumulation onto a zeroed buffer
    }
  }
}

// The block body. row_values(r, c0, v) puts row r's values at columns c0 .. c0 + kVec into v[0 .. kVec) as
// floats (and may write what it computed); it is called only for columns that exist (kVec > 1: cols is a
// multiple of kVec).
template <int kVec, typename RowValues>
__device__ __forceinline__ void column_sum_partials(const RowValues& row_values, int64_t rows, int64_t cols,
                                                    int64_t rows_per_chunk, float* __restrict__ partial) {
  constexpr int kBlockColumns = kColumnSumTile * kVec;
  __shared__ float lanes[kColumnSumRowLanes][kBlockColumns + 1];
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * kColumnSumTile + threadIdx.x) * kVec;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum[kVec] = {};
  if (c0 < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kColumnSumRowLanes) {
      float v[kVec];
      row_values(r, c0, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kVec; ++k) lanes[threadIdx.y][threadIdx.x * kVec + k] = sum[k];
  __syncthreads();
  for (int col = threadIdx.y * kColumnSumTile + threadIdx.x; col < kBlockColumns;
       col += kColumnSumTile * kColumnSumRowLanes) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kBlockColumns + col;
    if (c >= cols) continue;
    float total = 0.0f;
    for (int lane = 0; lane < kColumnSumRowLanes; ++lane) total += lanes[lane][col];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = total;
  }
}

}  // namespace zt::kernels::cuda_detail
