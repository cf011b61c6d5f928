// Deterministic column sums of a row-major [rows, cols] matrix, pass 1: the order column_sum_into
// (kernels/cuda/gemm.cuh) sums a bias gradient in, as a block body that kernels writing the summed values can
// share (the FFN's GELU backward sums the dx it writes), so a fused sum is bitwise the separate pass's.
//
// Rows are cut into at most 64 chunks of >= 128 rows (a function of rows only; >= 32 rows with
// ZT_SMALL_SUM_CHUNKS=1, below); block (x, chunk) of
// 32 x 8 threads sums its chunk of 32 kVec columns into partial[chunk, c]: thread (tx, ty) takes rows ty,
// ty + 8, ... of the chunk for columns c0 = (32 x + tx) kVec .. c0 + kVec, and the eight lane sums are added
// in ty order. kVec (a Pack128's width, or 1) changes no bit: every column is summed in the same order.
// Pass 2 adds the partials in chunk order: add_chunk_partials (kernels/cuda/gemm.cuh) as its own kernel, or,
// with a ChunkFinish, the last block of each column tile to write its partials (add_tile_partials below, the
// same code and so the same bits): at bs 8 a second launch cost more than the sum itself (~2.5 us each, a
// dozen times a layer).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/env_switch.h"

namespace zt::kernels::cuda_detail {

constexpr int kColumnSumTile = 32;     // column lanes per block (one warp wide: coalesced rows)
constexpr int kColumnSumRowLanes = 8;  // row partial sums per column within a block

// ZT_SMALL_SUM_CHUNKS=1 (runtime/env_switch.h, read for every plan; off by default until the GPU has run
// it): chunks of >= 32 rows instead of >= 128. At bs 8 (1024 rows) a 1536-column sum is then 6 x 32 blocks
// instead of 6 x 8 — 48 blocks left two thirds of the 132 SMs idle (4.6-6.2 us a sum, ninth session's ncu)
// — at the price of other summation orders (deterministic still: a function of rows only, and the fused
// GELU sums follow the same plan) and up to 4x the partials. The plans agree only from 8065 rows on (64
// chunks both); at bs 40 (5120 rows) they are 40 and 64 chunks.
inline bool small_sum_chunks() {
  return read_env_switch("ZT_SMALL_SUM_CHUNKS");
}

struct ColumnSumPlan {
  int64_t chunks = 1, rows_per_chunk = 0;

  explicit ColumnSumPlan(int64_t rows, bool small_chunks = small_sum_chunks()) {
    constexpr int64_t kMaxChunks = 64;
    const int64_t rows_per_chunk_min = small_chunks ? 32 : 128;
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
// kWrittenThisKernel (the one-pass form: other blocks wrote the partials during this kernel) reads them past
// L1 (__ldcg); the separate kernel keeps its plain loads. A caller that runs it twice in a row (two outputs)
// puts a __syncthreads between: the second call's first group writes `lanes` the first call's last read.
template <bool kWrittenThisKernel = false>
__device__ __forceinline__ void add_tile_partials(const float* partial, int64_t chunks, int64_t cols,
                                                  int64_t first, int width, bool overwrite,
                                                  float* __restrict__ out) {
  __shared__ float lanes[kColumnSumRowLanes][kColumnSumTile + 1];
  for (int group = 0; group < width; group += kColumnSumTile) {
    if (group > 0) __syncthreads();  // the previous group's lane sums are read before they are overwritten
    const int64_t c = first + group + threadIdx.x;
    float sum = 0.0f;
    if (c < cols) {
      for (int64_t k = threadIdx.y; k < chunks; k += kColumnSumRowLanes)
        sum += kWrittenThisKernel ? __ldcg(partial + k * cols + c) : partial[k * cols + c];
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

// Pass 2 inside pass 1: column tile blockIdx.x's gridDim.y chunk blocks each count themselves in
// counters[blockIdx.x] once their partials are written; the block that counts last adds the tile's
// partials (add_tile_partials) and resets the counter to 0 for the next kernel on the stream. `counters`
// is per stream (chunk_counters, kernels/cuda/gemm.cuh), so kernels of one stream, which run one after
// the other, never share a count. Null counters: pass 1 only.
struct ChunkFinish {
  unsigned int* counters = nullptr;
  float* out = nullptr;
  bool overwrite = false;
};

// True, in every thread, in the last block of column tile blockIdx.x to arrive. Each thread fences its own
// partial writes before the block's count (the threadFenceReduction pattern of the CUDA samples).
__device__ __forceinline__ bool last_block_of_tile(unsigned int* counters) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    const unsigned int arrived = atomicAdd(counters + blockIdx.x, 1u);
    last = arrived + 1 == gridDim.y;
    if (last) counters[blockIdx.x] = 0;  // every block of the tile has counted
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// The block body. row_values(r, c0, v) puts row r's values at columns c0 .. c0 + kVec into v[0 .. kVec) as
// floats (and may write what it computed); it is called only for columns that exist (kVec > 1: cols is a
// multiple of kVec). kOnePass (with finish.counters) adds the last block's pass 2; without it the kernels
// compile to the two-pass code that ran before.
template <int kVec, bool kOnePass, typename RowValues>
__device__ __forceinline__ void column_sum_partials(const RowValues& row_values, int64_t rows, int64_t cols,
                                                    int64_t rows_per_chunk, float* __restrict__ partial,
                                                    ChunkFinish finish = {}) {
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
  if constexpr (kOnePass) {
    if (last_block_of_tile(finish.counters)) {
      add_tile_partials<true>(partial, gridDim.y, cols, static_cast<int64_t>(blockIdx.x) * kBlockColumns,
                              kBlockColumns, finish.overwrite, finish.out);
    }
  }
}

}  // namespace zt::kernels::cuda_detail
