// The fused disentangled-attention forward kernel (see fused_disentangled_attention.cuh).
//
// One CTA of 4 warps per (b, h, tile of 32 query rows i0 .. i0 + 31), in three phases:
//   1. Scores, per chunk of 32 keys j0 .. j0 + 31 (K chunk and the table slices in shared memory):
//        S[t, j]   = Q_t . K_j                         (wmma, into the tile's f32 score rows)
//        C2P[t, r] = Q_t . PK_{r_lo + r}               (wmma, [32, 64] f32, r < 64)
//        P2C[u, r] = K_{j0 + u} . PQ_{r_lo + r}        (wmma, [32, 64] f32)
//      with r_lo = c(i0, j_last), the lowest window row the chunk reaches (c(i, j) is monotone in i - j),
//      then
//        a(i, j) = ((S + C2P[t, c(i,j) - r_lo]) + P2C[j - j0, c(i,j) - r_lo]) / s, or finfo(f32).min unless
//        m_i m_j — the unfused kernel's sum, in its order.
//   2. Softmax, a warp per row (lane: keys 128 c + 4 lane + q, as the unfused kernel, so one Philox block
//      serves a lane's 4 keys): P = T(softmax(a)) stored to probs, P~ = T(P * keep(e) / (1 - p)) with
//      e = ((b*N + h)*L + i)*L + j into shared memory (zero at j >= L).
//   3. context_tile = P~ V, per chunk of 32 rows of V (wmma, f32 fragments), staged in f32 and stored in T.
//
// Shared memory (bytes; T rows padded by 8 elements and f32 rows by 4, which keeps every wmma pointer
// 32-byte aligned and shifts consecutive rows across banks; Lp = L rounded up to 32):
//   q_tile    [32, d + 8] T
//   kv_chunk  [32, d + 8] T          K chunk in phase 1, V chunk in phase 3
//   scores    [32, max(Lp, d) + 4] f32   a(i, j) in phases 1-2, the context tile [32, d + 4] in phase 3
//   diagonal  [64] int32             the chunk's c(i, j) window rows, by i - j
//   union of  phase 1: pk_slice, pq_slice [64, d + 8] T, c2p, p2c [32, 68] f32
//             phase 2-3: p_tilde [32, Lp + 8] T
// At L = 128, d = 64, bf16: 4,608 + 4,608 + 16,896 + 256 + max(35,840, 8,704) = 62,208 bytes.
//
// Synchronization: every phase-1 chunk is load -> sync -> products -> sync -> combine -> sync, so the next
// chunk's loads never overwrite operands still being read; the phase 1 -> 2 boundary is the last chunk's
// trailing sync (p_tilde then overwrites the dead slices), phase 2 -> 3 one sync, and each phase-3 chunk
// load -> sync -> products -> sync; the context staging reuses the score rows after the last of those.
#include "kernels/cuda/fused_disentangled_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/philox.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

namespace wmma = nvcuda::wmma;
using cuda_detail::DropoutMaskOp;

constexpr float kMasked = -3.40282346638528859811704183484516925e+38f;  // finfo(f32).min, as unfused
constexpr int kFragment = 16;                                           // wmma m = n = k
constexpr int kSlicePitch = kFusedSliceRows + 4;                        // f32 row of c2p / p2c
constexpr int kDiagonals = kFusedTileRows + kFusedKeyChunk - 1;         // i - j values one chunk reaches
constexpr size_t kRegionAlign = 128;

__host__ __device__ constexpr size_t align_up(size_t bytes) {
  return (bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
}

__host__ __device__ constexpr int padded_length(int length) {
  return (length + kFusedKeyChunk - 1) / kFusedKeyChunk * kFusedKeyChunk;
}

// Places a region of `bytes` at offset `at` and moves `at` past it (rounded up to kRegionAlign); returns
// the region's offset. The layouts below are sequences of these, in the order of their header comments.
__host__ __device__ constexpr size_t take_region(size_t& at, size_t bytes) {
  const size_t begin = at;
  at += align_up(bytes);
  return begin;
}

// The leading regions of the forward and of the backward rows kernel, from offset 0: a [32, d + 8] T tile
// (Q, dC), a [32, d + 8] T chunk (K / V), [32, max(Lp, d) + 4] f32 rows (scores, grad); plus the pitch of
// their [32, Lp + 8] T rows (P~, G in T). `end` is the offset after the f32 rows.
struct QueryTileLayout {
  int row_pitch = 0;   // elements of a T row: d + 8
  int f32_pitch = 0;   // elements of an f32 row: max(Lp, d) + 4
  int lowp_pitch = 0;  // elements of a [32, Lp] T row: Lp + 8
  size_t tile = 0, chunk = 0, f32_rows = 0, end = 0;
};

__host__ __device__ constexpr QueryTileLayout query_tile_layout(int padded, int head_size,
                                                                int element_bytes) {
  QueryTileLayout l;
  l.row_pitch = head_size + 8;
  l.f32_pitch = (padded > head_size ? padded : head_size) + 4;
  l.lowp_pitch = padded + 8;
  const size_t t_rows = static_cast<size_t>(l.row_pitch) * element_bytes;
  size_t at = 0;
  l.tile = take_region(at, kFusedTileRows * t_rows);
  l.chunk = take_region(at, kFusedKeyChunk * t_rows);
  l.f32_rows = take_region(at, static_cast<size_t>(kFusedTileRows) * l.f32_pitch * sizeof(float));
  l.end = at;
  return l;
}

// Byte offsets of the shared-memory regions (header comment) for padded length Lp, head size d and
// element size of T; computed the same way by the host (budget) and the kernel (pointers). The query tile
// layout's tile, chunk and f32 rows are q_tile, kv_chunk and scores.
struct FusedLayout {
  QueryTileLayout head;
  size_t diagonal = 0, pk_slice = 0, pq_slice = 0, c2p = 0, p2c = 0, p_tilde = 0, total = 0;
};

__host__ __device__ constexpr FusedLayout fused_layout(int padded, int head_size, int element_bytes) {
  FusedLayout l;
  l.head = query_tile_layout(padded, head_size, element_bytes);
  const size_t t_rows = static_cast<size_t>(l.head.row_pitch) * element_bytes;
  size_t at = l.head.end;
  l.diagonal = take_region(at, kFusedSliceRows * sizeof(int32_t));
  // The union: the phase-1 slices and products, or P~.
  const size_t union_begin = at;
  l.pk_slice = take_region(at, kFusedSliceRows * t_rows);
  l.pq_slice = take_region(at, kFusedSliceRows * t_rows);
  l.c2p = take_region(at, static_cast<size_t>(kFusedTileRows) * kSlicePitch * sizeof(float));
  l.p2c = take_region(at, static_cast<size_t>(kFusedTileRows) * kSlicePitch * sizeof(float));
  l.p_tilde = union_begin;
  const size_t p_bytes = align_up(static_cast<size_t>(kFusedTileRows) * l.head.lowp_pitch * element_bytes);
  l.total = union_begin + (at - union_begin > p_bytes ? at - union_begin : p_bytes);
  return l;
}

// The reference point of the header comment: L = 128, d = 64, bf16.
static_assert(fused_layout(128, 64, 2).total == 62208, "update the shared-memory figures in the comments");

// Copies rows [0, total_rows) of a [*, kD] head slice (row stride `stride` elements, 16-byte aligned) into
// shared rows of `pitch` elements, 16 bytes per thread and step; rows >= valid_rows are zero-filled, so no
// fragment ever reads uninitialized shared memory (0 * NaN would reach valid outputs through P~ V).
template <typename T, int kD>
__device__ __forceinline__ void load_rows(T* __restrict__ dst, int pitch, const T* __restrict__ src,
                                          int64_t stride, int valid_rows, int total_rows) {
  constexpr int kPacksPerRow = kD * static_cast<int>(sizeof(T)) / 16;
  for (int idx = static_cast<int>(threadIdx.x); idx < total_rows * kPacksPerRow; idx += kFusedThreads) {
    const int row = idx / kPacksPerRow, column = (idx % kPacksPerRow) * (16 / static_cast<int>(sizeof(T)));
    const uint4 value = row < valid_rows ? *reinterpret_cast<const uint4*>(src + row * stride + column)
                                         : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + row * pitch + column) = value;
  }
}

// out[16 x 16 tile] = A[16, kD] B[kD, 16] with A row-major (a, lda) and B the transpose of the row-major
// [16, kD] rows (b, ldb) — Q K^T-shaped products — accumulated in f32 and stored to f32 shared memory.
template <typename T, int kD>
__device__ __forceinline__ void product_abt(const T* a, int lda, const T* b, int ldb, float* out, int ldo) {
  wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float> acc;
  wmma::fill_fragment(acc, 0.0f);
#pragma unroll
  for (int kk = 0; kk < kD; kk += kFragment) {
    wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + kk, lda);
    wmma::load_matrix_sync(fb, b + kk,
                           ldb);  // element (k, n) at b[n * ldb + k]: the row-major rows, transposed
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(out, acc, ldo, wmma::mem_row_major);
}

// Output tile (mt, nt) of A B^T for row blocks A, B of pitch row_pitch: rows mt * 16 .. of A against rows
// nt * 16 .. of B, into out[mt * 16 .., nt * 16 ..] (pitch out_pitch).
template <typename T, int kD>
__device__ __forceinline__ void product_abt_tile(const T* a, const T* b, int row_pitch, float* out,
                                                 int out_pitch, int mt, int nt) {
  product_abt<T, kD>(a + mt * kFragment * row_pitch, row_pitch, b + nt * kFragment * row_pitch, row_pitch,
                     out + mt * kFragment * out_pitch + nt * kFragment, out_pitch);
}

// The [32, 32] product A B^T of two [32, kD] row blocks: 2 x 2 tiles of 16, warp w owning (w / 2, w % 2).
template <typename T, int kD>
__device__ __forceinline__ void product_abt_32x32(const T* a, const T* b, int row_pitch, float* out,
                                                  int out_pitch, int warp) {
  product_abt_tile<T, kD>(a, b, row_pitch, out, out_pitch, warp / 2, warp % 2);
}

// The output tiles [32, kD] of a CTA's products A[32, L] B[L, kD], 16 x 16 each; warp w owns tiles w, w + 4,
// ...
template <int kD>
struct OutputTiles {
  static constexpr int kCount = (kFusedTileRows / kFragment) * (kD / kFragment);
  static constexpr int kPerWarp = (kCount + kFusedWarps - 1) / kFusedWarps;
  using Accumulator = wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float>;
};

// acc (this warp's tiles of [32, kD]) += A B with A [32, L] in shared memory (T, row-major, pitch a_pitch,
// zero in columns L .. Lp - 1) and B = rows 0 .. L - 1 of a [*, kD] head slice in global memory (row stride
// `stride`), streamed through `chunk` ([32, kD + 8] T) 32 rows at a time: load -> barrier -> products ->
// barrier per chunk, so the caller may overwrite `chunk` and read A's buffer's neighbours after it returns.
// Called by every thread of the CTA.
template <typename T, int kD>
__device__ __forceinline__ void accumulate_a_times_rows(typename OutputTiles<kD>::Accumulator* acc,
                                                        const T* a, int a_pitch, const T* b_rows,
                                                        int64_t stride, int L, T* chunk, int row_pitch) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (int j0 = 0; j0 < L; j0 += kFusedKeyChunk) {
    const int rows = min(kFusedKeyChunk, L - j0);
    load_rows<T, kD>(chunk, row_pitch, b_rows + static_cast<int64_t>(j0) * stride, stride, rows,
                     kFusedKeyChunk);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < OutputTiles<kD>::kPerWarp; ++w) {
      const int tile = warp + w * kFusedWarps;  // warp-uniform
      if (tile >= OutputTiles<kD>::kCount) continue;
      const int mt = tile / (kD / kFragment), nt = tile % (kD / kFragment);
#pragma unroll
      for (int kk = 0; kk < kFusedKeyChunk; kk += kFragment) {
        wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, a + mt * kFragment * a_pitch + j0 + kk, a_pitch);
        wmma::load_matrix_sync(fb, chunk + kk * row_pitch + nt * kFragment, row_pitch);
        wmma::mma_sync(acc[w], fa, fb, acc[w]);
      }
    }
    __syncthreads();
  }
}

// Stores this warp's tiles of a [32, kD] f32 result in T: staged through `staged` ([32, kD + 4] f32, free
// shared memory), then rows 0 .. valid_rows - 1 to dst (row stride `stride`, 16-byte aligned), 16 bytes per
// thread. Called by every thread; ends with a barrier, so `staged` may be reused at once.
template <typename T, int kD>
__device__ __forceinline__ void store_output_tiles(const typename OutputTiles<kD>::Accumulator* acc,
                                                   float* staged, T* dst, int64_t stride, int valid_rows) {
  constexpr int kPitch = kD + 4;
  const int warp = static_cast<int>(threadIdx.x) / 32;
#pragma unroll
  for (int w = 0; w < OutputTiles<kD>::kPerWarp; ++w) {
    const int tile = warp + w * kFusedWarps;
    if (tile >= OutputTiles<kD>::kCount) continue;
    const int mt = tile / (kD / kFragment), nt = tile % (kD / kFragment);
    wmma::store_matrix_sync(staged + mt * kFragment * kPitch + nt * kFragment, acc[w], kPitch,
                            wmma::mem_row_major);
  }
  __syncthreads();
  constexpr int kPerPack = 16 / static_cast<int>(sizeof(T));
  constexpr int kPacksPerRow = kD / kPerPack;
  for (int idx = static_cast<int>(threadIdx.x); idx < valid_rows * kPacksPerRow; idx += kFusedThreads) {
    const int t = idx / kPacksPerRow, column = (idx % kPacksPerRow) * kPerPack;
    cuda_detail::Pack128<T> pack;
#pragma unroll
    for (int e = 0; e < kPerPack; ++e) pack.v[e] = from_float<T>(staged[t * kPitch + column + e]);
    cuda_detail::store128(dst + t * stride + column, pack);
  }
  __syncthreads();
}

template <int kD>
__device__ __forceinline__ void zero_tiles(typename OutputTiles<kD>::Accumulator* acc) {
#pragma unroll
  for (int w = 0; w < OutputTiles<kD>::kPerWarp; ++w) wmma::fill_fragment(acc[w], 0.0f);
}

// dst rows 0 .. valid_rows - 1 (row stride `stride`) = A B: accumulate_a_times_rows from zero, then
// store_output_tiles through `staged`. Called by every thread of the CTA.
template <typename T, int kD>
__device__ __forceinline__ void store_a_times_rows(const T* a, int a_pitch, const T* b_rows, int64_t stride,
                                                   int L, T* chunk, int row_pitch, float* staged, T* dst,
                                                   int valid_rows) {
  typename OutputTiles<kD>::Accumulator acc[OutputTiles<kD>::kPerWarp];
  zero_tiles<kD>(acc);
  accumulate_a_times_rows<T, kD>(acc, a, a_pitch, b_rows, stride, L, chunk, row_pitch);
  store_output_tiles<T, kD>(acc, staged, dst, stride, valid_rows);
}

// The keep decisions of 4 consecutive entries e .. e + 3 of P (flat index): one Philox block drawn up front
// when e is a multiple of 4 and `draw` holds, otherwise each entry's own block, drawn when asked.
struct DropoutQuad {
  uint64_t e = 0;
  bool aligned = false;
  PhiloxCounter block{};

  __device__ DropoutQuad(const DropoutMaskOp& op, bool draw, uint64_t first)
      : e(first), aligned((first & 3) == 0) {
    if (draw && aligned) block = op.group(e >> 2);
  }
  __device__ PhiloxCounter bits(const DropoutMaskOp& op, int q4) const {
    return aligned ? block : op.group((e + q4) >> 2);
  }
  // x kept and scaled, or 0, as entry e + q4 decides.
  __device__ float apply(const DropoutMaskOp& op, int q4, float x) const {
    return op(bits(op, q4), static_cast<int64_t>(e + q4), x);
  }
};

// The unfused kernels' lane layout of a softmax row, a warp per row: lane `lane` takes keys j4 .. j4 + 3 for
// j4 = 128 c + 4 lane, c = 0 .. ceil(L / 128) - 1 (one Philox block per 4 keys when aligned). Calls key(j)
// for the lane's keys in that order, j up to ceil(L / 128) * 128 - 1: the caller bounds j by L.
template <typename F>
__device__ __forceinline__ void for_lane_keys(int L, int lane, F&& key) {
  const int chunks = (L + 127) / 128;
  for (int c = 0; c < chunks; ++c) {
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) key(128 * c + 4 * lane + q4);
  }
}

// for_lane_keys with the keys' dropout decisions: key(quad, q4, j) for j = j4 + q4, where quad holds entries
// e = row * L + j4 .. e + 3 (row = (b*N + h)*L + i, so e is the flat index of P[b, h, i, j4]), its Philox
// block drawn once per 4 keys when `dropout` is on and j4 < L.
template <typename F>
__device__ __forceinline__ void for_lane_key_quads(int L, int lane, const DropoutMaskOp& op, bool dropout,
                                                   int64_t row, F&& key) {
  const int chunks = (L + 127) / 128;
  for (int c = 0; c < chunks; ++c) {
    const int j4 = 128 * c + 4 * lane;
    const DropoutQuad quad(op, dropout && j4 < L, static_cast<uint64_t>(row * L + j4));
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) key(quad, q4, j4 + q4);
  }
}

// The CTA's head (b, h) = (bh / N, bh % N) and its block of rows (query rows, or keys) first .. first +
// count - 1, for the grid (ceil(L / 32), B * N); L, Lp = L rounded up to 32, D, and the thread's warp, lane.
struct HeadBlock {
  int L = 0, Lp = 0;
  int64_t D = 0;
  int warp = 0, lane = 0, first = 0, count = 0;
  int64_t bh = 0, h = 0, b = 0;
};

__device__ __forceinline__ HeadBlock head_block(int length, int features, int heads) {
  static_assert(kFusedKeyChunk == kFusedTileRows, "a CTA's block of keys is a tile of query rows");
  HeadBlock c;
  c.L = length;
  c.Lp = padded_length(length);
  c.D = features;
  c.warp = static_cast<int>(threadIdx.x) / 32;
  c.lane = static_cast<int>(threadIdx.x) % 32;
  c.first = static_cast<int>(blockIdx.x) * kFusedTileRows;
  c.count = min(kFusedTileRows, c.L - c.first);
  c.bh = blockIdx.y;
  c.h = c.bh % heads;
  c.b = c.bh / heads;
  return c;
}

template <typename U>
__device__ __forceinline__ U* region(unsigned char* smem, size_t offset) {
  return reinterpret_cast<U*>(smem + offset);
}

// A QueryTileLayout's pitches and regions as pointers into the CTA's shared memory.
template <typename T>
struct QueryTileRegions {
  int row_pitch = 0, f32_pitch = 0, lowp_pitch = 0;
  T* tile = nullptr;
  T* chunk = nullptr;
  float* f32_rows = nullptr;
};

template <typename T>
__device__ __forceinline__ QueryTileRegions<T> query_tile_regions(unsigned char* smem,
                                                                  const QueryTileLayout& l) {
  QueryTileRegions<T> r;
  r.row_pitch = l.row_pitch;
  r.f32_pitch = l.f32_pitch;
  r.lowp_pitch = l.lowp_pitch;
  r.tile = region<T>(smem, l.tile);
  r.chunk = region<T>(smem, l.chunk);
  r.f32_rows = region<float>(smem, l.f32_rows);
  return r;
}

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads) fused_attention_forward_kernel(FusedAttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const auto [L, Lp, D, warp, lane, i0, tile_rows, bh, h, b] = head_block(p.length, p.features, p.heads);
  const FusedLayout layout = fused_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const auto [row_pitch, score_pitch, p_pitch, q_tile, kv_chunk, scores] =
      query_tile_regions<T>(smem, layout.head);
  int32_t* diagonal = region<int32_t>(smem, layout.diagonal);
  T* pk_slice = region<T>(smem, layout.pk_slice);
  T* pq_slice = region<T>(smem, layout.pq_slice);
  float* c2p = region<float>(smem, layout.c2p);
  float* p2c = region<float>(smem, layout.p2c);
  T* p_tilde = region<T>(smem, layout.p_tilde);

  const int64_t head_column = h * kD;
  const T* q = static_cast<const T*>(p.q) + b * L * D + head_column;  // row i at q + i * D
  const T* k = static_cast<const T*>(p.k) + b * L * D + head_column;
  const T* v = static_cast<const T*>(p.v) + b * L * D + head_column;
  const T* pk = p.c2p ? static_cast<const T*>(p.pos_key_window) + head_column : nullptr;
  const T* pq = p.p2c ? static_cast<const T*>(p.pos_query_window) + head_column : nullptr;
  const uint8_t* key_keep = p.keep + b * L;
  const bool positional = p.c2p || p.p2c;

  load_rows<T, kD>(q_tile, row_pitch, q + static_cast<int64_t>(i0) * D, D, tile_rows, kFusedTileRows);

  // ---- phase 1: scores ----
  for (int j0 = 0; j0 < L; j0 += kFusedKeyChunk) {
    const int keys = min(kFusedKeyChunk, L - j0);
    load_rows<T, kD>(kv_chunk, row_pitch, k + static_cast<int64_t>(j0) * D, D, keys, kFusedKeyChunk);
    int r_lo = 0;
    if (positional) {
      // Window rows reached: c(i, j) for i0 <= i < i0 + tile_rows, j0 <= j < j0 + keys, lowest at the
      // lowest i - j. diagonal[u] holds the row of i - j = i0 - j0 - 31 + u (u = t - (j - j0) + 31).
      r_lo = p.diagonal[i0 - (j0 + keys - 1) + L - 1];
      const int first = i0 - j0 - (kFusedKeyChunk - 1) + L - 1;
      for (int u = static_cast<int>(threadIdx.x); u < kDiagonals; u += kFusedThreads) {
        const int index = first + u;
        diagonal[u] = index >= 0 && index < 2 * L - 1 ? p.diagonal[index] : r_lo;
      }
      const int slice_rows = min(kFusedSliceRows, p.window - r_lo);
      if (p.c2p) load_rows<T, kD>(pk_slice, row_pitch, pk + r_lo * D, D, slice_rows, kFusedSliceRows);
      if (p.p2c) load_rows<T, kD>(pq_slice, row_pitch, pq + r_lo * D, D, slice_rows, kFusedSliceRows);
    }
    __syncthreads();
    // Q K^T for the chunk into score columns j0 .. j0 + 31 (< Lp).
    product_abt_32x32<T, kD>(q_tile, kv_chunk, row_pitch, scores + j0, score_pitch, warp);
    // C2P and P2C: 2 x 4 tiles each, two per warp.
    constexpr int kSliceTiles = (kFusedTileRows / kFragment) * (kFusedSliceRows / kFragment);
    for (int tile = warp; tile < kSliceTiles; tile += kFusedWarps) {
      const int mt = tile / (kFusedSliceRows / kFragment), nt = tile % (kFusedSliceRows / kFragment);
      if (p.c2p) product_abt_tile<T, kD>(q_tile, pk_slice, row_pitch, c2p, kSlicePitch, mt, nt);
      if (p.p2c) product_abt_tile<T, kD>(kv_chunk, pq_slice, row_pitch, p2c, kSlicePitch, mt, nt);
    }
    __syncthreads();
    // a(i, j) in place of the content score, for the chunk's valid (i, j).
    for (int e = static_cast<int>(threadIdx.x); e < kFusedTileRows * kFusedKeyChunk; e += kFusedThreads) {
      const int t = e / kFusedKeyChunk, u = e % kFusedKeyChunk;
      if (t >= tile_rows || u >= keys) continue;
      const int j = j0 + u;
      float a = scores[t * score_pitch + j];
      if (positional) {
        const int r = diagonal[t - u + kFusedKeyChunk - 1] - r_lo;  // in [0, 64): host-checked span
        if (p.c2p) a += c2p[t * kSlicePitch + r];
        if (p.p2c) a += p2c[u * kSlicePitch + r];
      }
      a *= p.inverse_scale;
      scores[t * score_pitch + j] = (key_keep[i0 + t] != 0 && key_keep[j] != 0) ? a : kMasked;
    }
    __syncthreads();
  }

  // ---- phase 2: softmax, P to HBM, P~ to shared memory ----
  const DropoutMaskOp mask_op{p.dropout_p, p.kept_scale, p.seed, p.site_id};
  for (int t = warp; t < kFusedTileRows; t += kFusedWarps) {
    T* p_row = p_tilde + t * p_pitch;
    if (t >= tile_rows) {  // rows past L: zeros, so the P~ V fragments read defined values
      for (int j = lane; j < Lp; j += 32) p_row[j] = from_float<T>(0.0f);
      continue;
    }
    float* x = scores + t * score_pitch;
    float row_max = kMasked;
    for_lane_keys(L, lane, [&](int j) {
      if (j < L) row_max = fmaxf(row_max, x[j]);
    });
    row_max = cuda_detail::warp_max(row_max);
    float sum = 0.0f;
    for_lane_keys(L, lane, [&](int j) {
      if (j < L) {
        x[j] = expf(x[j] - row_max);  // a lane rewrites only its own keys
        sum += x[j];
      }
    });
    const float inverse = 1.0f / cuda_detail::warp_sum(sum);
    const int64_t row = bh * L + i0 + t;  // (b*N + h)*L + i
    T* probs_row = static_cast<T*>(p.probs) + row * L;
    for_lane_key_quads(L, lane, mask_op, p.dropout, row, [&](const DropoutQuad& quad, int q4, int j) {
      if (j >= L) {
        if (j < Lp) p_row[j] = from_float<T>(0.0f);
        return;
      }
      const T prob = from_float<T>(x[j] * inverse);  // the one rounding of P
      probs_row[j] = prob;
      float kept = to_float(prob);
      if (p.dropout) kept = quad.apply(mask_op, q4, kept);
      p_row[j] = from_float<T>(kept);
    });
  }
  __syncthreads();

  // ---- phase 3: context tile = P~ V, staged in the (dead) score rows ----
  store_a_times_rows<T, kD>(
      p_tilde, p_pitch, v, D, L, kv_chunk, row_pitch, scores,
      static_cast<T*>(p.context) + b * L * D + head_column + static_cast<int64_t>(i0) * D, tile_rows);
}

// ---- the fused backward (fused_disentangled_attention.cuh) ----
//
// Shared memory of the rows kernel (per (b, h, 32 query rows); Lp and pitches as the forward's):
//   dc_tile   [32, d + 8] T
//   kv_chunk  [32, d + 8] T                  V chunks, then K chunks
//   grad      [32, max(Lp, d) + 4] f32       dP~, then dP, then G; the dQ tile [32, d + 4] at the end
//   g_lowp    [32, Lp + 8] T                 G rounded to T, the dQ product's A operand
// and of the keys kernel (per (b, h, 32 keys j0 .. j0 + 31)):
//   v_tile, dc_chunk, q_chunk [32, d + 8] T
//   dp_chunk  [32 queries, 36] f32           dP~ of one query chunk
//   p_chunk, g_chunk [32 queries, 40] T      P~ and G of the chunk, the A operands (transposed) of dV, dK
//   union of  g_columns [Lp, 33] f32         G[i, j0 + u] for every i, for Gp (pitch 33: column walks
//                                            conflict-free)
//             the dV / dK tile [32, d + 4] f32, staged one after the other at the end
constexpr int kChunkPitchF32 = kFusedKeyChunk + 4;  // dp_chunk
constexpr int kChunkPitchT = kFusedKeyChunk + 8;    // p_chunk, g_chunk
constexpr int kColumnPitch = kFusedKeyChunk + 1;    // g_columns

// The query tile layout's tile, chunk and f32 rows are dc_tile, kv_chunk and grad.
struct RowsLayout {
  QueryTileLayout head;
  size_t g_lowp = 0, total = 0;
};

__host__ __device__ constexpr RowsLayout rows_layout(int padded, int head_size, int element_bytes) {
  RowsLayout l;
  l.head = query_tile_layout(padded, head_size, element_bytes);
  size_t at = l.head.end;
  l.g_lowp = take_region(at, static_cast<size_t>(kFusedTileRows) * l.head.lowp_pitch * element_bytes);
  l.total = at;
  return l;
}

struct KeysLayout {
  int row_pitch = 0;
  size_t v_tile = 0, dc_chunk = 0, q_chunk = 0, dp_chunk = 0, p_chunk = 0, g_chunk = 0, g_columns = 0,
         total = 0;
};

__host__ __device__ constexpr KeysLayout keys_layout(int padded, int head_size, int element_bytes) {
  KeysLayout l;
  l.row_pitch = head_size + 8;
  const size_t t_rows = static_cast<size_t>(l.row_pitch) * element_bytes;
  size_t at = 0;
  l.v_tile = take_region(at, kFusedKeyChunk * t_rows);
  l.dc_chunk = take_region(at, kFusedTileRows * t_rows);
  l.q_chunk = take_region(at, kFusedTileRows * t_rows);
  l.dp_chunk = take_region(at, static_cast<size_t>(kFusedTileRows) * kChunkPitchF32 * sizeof(float));
  l.p_chunk = take_region(at, static_cast<size_t>(kFusedTileRows) * kChunkPitchT * element_bytes);
  l.g_chunk = take_region(at, static_cast<size_t>(kFusedTileRows) * kChunkPitchT * element_bytes);
  l.g_columns = at;
  const size_t columns = align_up(static_cast<size_t>(padded) * kColumnPitch * sizeof(float));
  const size_t staging = align_up(static_cast<size_t>(kFusedKeyChunk) * (head_size + 4) * sizeof(float));
  at += columns > staging ? columns : staging;
  l.total = at;
  return l;
}

static_assert(rows_layout(128, 64, 2).total == 34816, "update the backward's shared-memory figures");
static_assert(keys_layout(128, 64, 2).total == 40448, "update the backward's shared-memory figures");

// Sums G over the contiguous index range [begin, end] (clipped to [0, L - 1]) in increasing index order,
// reading element x at values[x * stride]: the bucket sums of bucket_gather_block_kernel, in its order.
__device__ __forceinline__ float sum_range(const float* values, int stride, int begin, int end, int L) {
  begin = max(begin, 0);
  end = min(end, L - 1);
  float sum = 0.0f;
  for (int x = begin; x <= end; ++x) sum += values[x * stride];
  return sum;
}

// Row `row` of a bucket-gradient table ([N, B*L, window_pitch] T, head h, batch b), lanes along r: the sum of
// G over window row r's i - j range [first, last] along one line of G through `at` — for a query row
// (kQueryRow, Gc) j = at - (i - j) over values[j], for a key (Gp) i = at + (i - j) over values[i * stride] —
// and zero in the padding columns r >= W. Called by one warp.
template <bool kQueryRow, typename T>
__device__ __forceinline__ void store_bucket_row(void* table, const FusedAttentionBackwardParams& p,
                                                 int64_t h, int64_t b, int at, const float* values,
                                                 int stride, int lane) {
  const int L = p.length;
  T* out = static_cast<T*>(table) + ((h * p.batch + b) * L + at) * static_cast<int64_t>(p.window_pitch);
  for (int r = lane; r < p.window_pitch; r += 32) {
    float sum = 0.0f;
    if (r < p.window) {
      const int first = p.rel_first[r], last = p.rel_last[r];
      if (first <= last)
        sum = kQueryRow ? sum_range(values, stride, at - last, at - first, L)
                        : sum_range(values, stride, at + first, at + last, L);
    }
    out[r] = from_float<T>(sum);
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads)
    fused_attention_backward_rows_kernel(FusedAttentionBackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const auto [L, Lp, D, warp, lane, i0, tile_rows, bh, h, b] = head_block(p.length, p.features, p.heads);
  const RowsLayout layout = rows_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const auto [row_pitch, grad_pitch, g_pitch, dc_tile, kv_chunk, grad] =
      query_tile_regions<T>(smem, layout.head);
  T* g_lowp = region<T>(smem, layout.g_lowp);

  const int64_t head_base = b * L * D + h * kD;  // element (b, 0, h*d) of a [B, L, D] tensor
  const T* k = static_cast<const T*>(p.k) + head_base;
  const T* v = static_cast<const T*>(p.v) + head_base;
  const uint8_t* key_keep = p.keep + b * L;

  load_rows<T, kD>(dc_tile, row_pitch,
                   static_cast<const T*>(p.dcontext) + head_base + static_cast<int64_t>(i0) * D, D, tile_rows,
                   kFusedTileRows);
  // dP~ = dC_tile V^T, chunk by chunk into the grad rows.
  for (int j0 = 0; j0 < L; j0 += kFusedKeyChunk) {
    const int keys = min(kFusedKeyChunk, L - j0);
    load_rows<T, kD>(kv_chunk, row_pitch, v + static_cast<int64_t>(j0) * D, D, keys, kFusedKeyChunk);
    __syncthreads();
    product_abt_32x32<T, kD>(dc_tile, kv_chunk, row_pitch, grad + j0, grad_pitch, warp);
    __syncthreads();
  }
  // G per row, a warp per row (the unfused softmax backward's lane layout, Philox grouping and sum order).
  const DropoutMaskOp mask_op{p.dropout_p, p.kept_scale, p.seed, p.site_id};
  for (int t = warp; t < kFusedTileRows; t += kFusedWarps) {
    T* g_row = g_lowp + t * g_pitch;
    if (t >= tile_rows) {
      for (int j = lane; j < Lp; j += 32) g_row[j] = from_float<T>(0.0f);
      continue;
    }
    const int i = i0 + t;
    const int64_t row = bh * L + i;
    const T* probs_row = static_cast<const T*>(p.probs) + row * L;
    const bool query_kept = key_keep[i] != 0;
    float* g = grad + t * grad_pitch;
    float weighted = 0.0f;
    for_lane_key_quads(L, lane, mask_op, p.dropout, row, [&](const DropoutQuad& quad, int q4, int j) {
      if (j >= L) return;  // so are the lane's later keys of these 4
      float dp = g[j];
      if (p.dropout) dp = quad.apply(mask_op, q4, dp);
      g[j] = dp;  // a lane rewrites only its own keys
      if (query_kept && key_keep[j] != 0) weighted += to_float(probs_row[j]) * dp;
    });
    weighted = cuda_detail::warp_sum(weighted);
    if (lane == 0) p.row_dot[row] = weighted;
    for_lane_keys(L, lane, [&](int j) {
      if (j >= L) {
        if (j < Lp) g_row[j] = from_float<T>(0.0f);
        return;
      }
      const bool kept = query_kept && key_keep[j] != 0;
      const float value = kept ? to_float(probs_row[j]) * (g[j] - weighted) * p.inverse_scale : 0.0f;
      g[j] = value;
      g_row[j] = from_float<T>(value);
    });
  }
  __syncthreads();
  // Gc rows: a warp per query row, lanes along r, padding columns r >= W zero.
  if (p.gc != nullptr) {
    for (int t = warp; t < tile_rows; t += kFusedWarps)
      store_bucket_row<true, T>(p.gc, p, h, b, i0 + t, grad + t * grad_pitch, 1, lane);
  }
  // dQ_tile = G K over key chunks, staged in the grad rows (their Gc reads end before the first barrier).
  store_a_times_rows<T, kD>(g_lowp, g_pitch, k, D, L, kv_chunk, row_pitch, grad,
                            static_cast<T*>(p.dq) + head_base + static_cast<int64_t>(i0) * D, tile_rows);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads)
    fused_attention_backward_keys_kernel(FusedAttentionBackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const auto [L, Lp, D, warp, lane, j0, tile_keys, bh, h, b] = head_block(p.length, p.features, p.heads);
  const KeysLayout layout = keys_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const int row_pitch = layout.row_pitch;
  T* v_tile = region<T>(smem, layout.v_tile);
  T* dc_chunk = region<T>(smem, layout.dc_chunk);
  T* q_chunk = region<T>(smem, layout.q_chunk);
  float* dp_chunk = region<float>(smem, layout.dp_chunk);
  T* p_chunk = region<T>(smem, layout.p_chunk);
  T* g_chunk = region<T>(smem, layout.g_chunk);
  float* g_columns = region<float>(smem, layout.g_columns);

  const int64_t head_base = b * L * D + h * kD;
  const T* q = static_cast<const T*>(p.q) + head_base;
  const T* dc = static_cast<const T*>(p.dcontext) + head_base;
  const T* probs = static_cast<const T*>(p.probs) + bh * L * L;  // P[b, h] [L, L]
  const uint8_t* key_keep = p.keep + b * L;
  const DropoutMaskOp mask_op{p.dropout_p, p.kept_scale, p.seed, p.site_id};

  load_rows<T, kD>(v_tile, row_pitch, static_cast<const T*>(p.v) + head_base + static_cast<int64_t>(j0) * D,
                   D, tile_keys, kFusedKeyChunk);
  // Output tiles [32 keys, d] (kFusedKeyChunk == kFusedTileRows): the same tiles of dV and dK per warp.
  static_assert(kFusedKeyChunk == kFusedTileRows, "OutputTiles counts 32 rows");
  constexpr int kOutTiles = OutputTiles<kD>::kCount;
  constexpr int kTilesPerWarp = OutputTiles<kD>::kPerWarp;
  typename OutputTiles<kD>::Accumulator dv_acc[kTilesPerWarp], dk_acc[kTilesPerWarp];
  zero_tiles<kD>(dv_acc);
  zero_tiles<kD>(dk_acc);
  for (int i0 = 0; i0 < L; i0 += kFusedTileRows) {
    const int rows = min(kFusedTileRows, L - i0);
    load_rows<T, kD>(dc_chunk, row_pitch, dc + static_cast<int64_t>(i0) * D, D, rows, kFusedTileRows);
    load_rows<T, kD>(q_chunk, row_pitch, q + static_cast<int64_t>(i0) * D, D, rows, kFusedTileRows);
    __syncthreads();
    // dP~ [32 queries, 32 keys] = dC_chunk V_tile^T.
    product_abt_32x32<T, kD>(dc_chunk, v_tile, row_pitch, dp_chunk, kChunkPitchF32, warp);
    __syncthreads();
    // P~ and G of the chunk: a thread per 4 consecutive keys of a query row (one Philox block when aligned).
    for (int item = static_cast<int>(threadIdx.x); item < kFusedTileRows * (kFusedKeyChunk / 4);
         item += kFusedThreads) {
      const int t = item / (kFusedKeyChunk / 4), u4 = (item % (kFusedKeyChunk / 4)) * 4;
      const int i = i0 + t;
      const bool row_valid = t < rows;
      const int64_t row = bh * L + i;
      const DropoutQuad quad(mask_op, p.dropout && row_valid && u4 < tile_keys,
                             row_valid ? static_cast<uint64_t>(row * L + j0 + u4) : 0);
      const float row_dot = row_valid ? p.row_dot[row] : 0.0f;
      const bool query_kept = row_valid && key_keep[i] != 0;
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int u = u4 + q4, j = j0 + u;
        float p_tilde = 0.0f, g = 0.0f;
        if (row_valid && u < tile_keys) {
          const float prob = to_float(probs[static_cast<int64_t>(i) * L + j]);
          float dp = dp_chunk[t * kChunkPitchF32 + u];
          p_tilde = prob;
          if (p.dropout) {
            const PhiloxCounter bits = quad.bits(mask_op, q4);
            p_tilde = mask_op(bits, static_cast<int64_t>(quad.e + q4), prob);
            dp = mask_op(bits, static_cast<int64_t>(quad.e + q4), dp);
          }
          if (query_kept && key_keep[j] != 0) g = prob * (dp - row_dot) * p.inverse_scale;
          g_columns[i * kColumnPitch + u] = g;
        }
        p_chunk[t * kChunkPitchT + u] = from_float<T>(p_tilde);
        g_chunk[t * kChunkPitchT + u] = from_float<T>(g);
      }
    }
    __syncthreads();
    // dV_tile += P~^T dC_chunk, dK_tile += G^T Q_chunk: A = the chunk's [queries, keys] tile read transposed
    // (col_major: element (key m, query k) at chunk[k * pitch + m]).
#pragma unroll
    for (int w = 0; w < kTilesPerWarp; ++w) {
      const int tile = warp + w * kFusedWarps;  // warp-uniform
      if (tile >= kOutTiles) continue;
      const int mt = tile / (kD / kFragment), nt = tile % (kD / kFragment);
#pragma unroll
      for (int kk = 0; kk < kFusedTileRows; kk += kFragment) {
        wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, T, wmma::col_major> fa;
        wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, p_chunk + kk * kChunkPitchT + mt * kFragment, kChunkPitchT);
        wmma::load_matrix_sync(fb, dc_chunk + kk * row_pitch + nt * kFragment, row_pitch);
        wmma::mma_sync(dv_acc[w], fa, fb, dv_acc[w]);
        wmma::load_matrix_sync(fa, g_chunk + kk * kChunkPitchT + mt * kFragment, kChunkPitchT);
        wmma::load_matrix_sync(fb, q_chunk + kk * row_pitch + nt * kFragment, row_pitch);
        wmma::mma_sync(dk_acc[w], fa, fb, dk_acc[w]);
      }
    }
    __syncthreads();
  }
  // Gp rows: a warp per key, lanes along r; G[i, j] for every i is in g_columns.
  if (p.gp != nullptr) {
    for (int u = warp; u < tile_keys; u += kFusedWarps)
      store_bucket_row<false, T>(p.gp, p, h, b, j0 + u, g_columns + u, kColumnPitch, lane);
  }
  __syncthreads();  // the Gp reads end before the staging overwrites g_columns
  const int64_t tile_offset = head_base + static_cast<int64_t>(j0) * D;
  store_output_tiles<T, kD>(dv_acc, g_columns, static_cast<T*>(p.dv) + tile_offset, D, tile_keys);
  store_output_tiles<T, kD>(dk_acc, g_columns, static_cast<T*>(p.dk) + tile_offset, D, tile_keys);
}

// Calls f(std::integral_constant<int, d>) for a supported head size.
template <typename F>
void dispatch_head_size(int64_t head_size, F&& f) {
  switch (head_size) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      ZT_FAIL("fused attention: head size ", head_size, " is not one of 16, 32, 64, 128");
  }
}

}  // namespace

bool fused_attention_head_size_supported(int64_t head_size) {
  return head_size == 16 || head_size == 32 || head_size == 64 || head_size == 128;
}

size_t fused_attention_shared_bytes(int64_t length, int64_t head_size, DType dtype) {
  return fused_layout(padded_length(static_cast<int>(length)), static_cast<int>(head_size),
                      static_cast<int>(dtype_size(dtype)))
      .total;
}

size_t fused_attention_backward_shared_bytes(int64_t length, int64_t head_size, DType dtype) {
  const int padded = padded_length(static_cast<int>(length)), d = static_cast<int>(head_size),
            element = static_cast<int>(dtype_size(dtype));
  const size_t rows = rows_layout(padded, d, element).total, keys = keys_layout(padded, d, element).total;
  return rows > keys ? rows : keys;
}

namespace {

// The argument checks both launchers start with; `op` names the caller in the messages.
void check_fused_arguments(DType dtype, int length, int head_size, const char* op) {
  ZT_CHECK(dtype == DType::bf16 || dtype == DType::f16, op, ": storage must be bf16 or f16, got ",
           dtype_name(dtype));
  ZT_CHECK(length >= 1 && length <= kFusedMaxLength, op, ": length ", length, " outside [1, ",
           kFusedMaxLength, "]");
  ZT_CHECK(fused_attention_head_size_supported(head_size), op, ": head size ", head_size,
           " is not one of 16, 32, 64, 128");
}

// The grid of every fused kernel: (ceil(L / 32) tiles, B * N heads).
dim3 fused_grid(int length, int batch, int heads, const char* op) {
  const int64_t blocks = static_cast<int64_t>(batch) * heads;
  ZT_CHECK(blocks >= 1 && blocks <= 65535, op, ": B * N = ", blocks, " outside the grid's y range");
  return dim3(static_cast<unsigned>((length + kFusedTileRows - 1) / kFusedTileRows),
              static_cast<unsigned>(blocks));
}

// Calls f(StorageTag<S>, std::integral_constant<int, d>) for 16-bit storage S and a supported head size d.
template <typename F>
void dispatch_fused(DType dtype, int64_t head_size, const char* op, F&& f) {
  dispatch_storage(dtype, op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<S, float>) {
      dispatch_head_size(head_size, [&](auto head) { f(tag, head); });
    }
  });
}

// Launches one fused kernel with `shared` bytes of dynamic shared memory (raising its limit first).
template <typename Params>
void launch_with_shared(void (*kernel)(Params), dim3 grid, size_t shared, cudaStream_t stream,
                        const Params& params, const char* name) {
  ZT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
  kernel<<<grid, kFusedThreads, shared, stream>>>(params);
  ZT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace

void launch_fused_attention_backward(const FusedAttentionBackwardParams& params, DType dtype,
                                     cudaStream_t stream) {
  check_fused_arguments(dtype, params.length, params.head_size, "fused attention backward");
  ZT_CHECK(params.row_dot != nullptr, "fused attention backward: no row_dot scratch");
  ZT_CHECK((params.gc == nullptr && params.gp == nullptr) ||
               (params.rel_first != nullptr && params.rel_last != nullptr && params.window >= 1 &&
                params.window_pitch >= params.window),
           "fused attention backward: bucket outputs without index tables");
  const int padded = padded_length(params.length), element = static_cast<int>(dtype_size(dtype));
  const size_t rows_shared = rows_layout(padded, params.head_size, element).total;
  const size_t keys_shared = keys_layout(padded, params.head_size, element).total;
  ZT_CHECK(rows_shared <= kFusedMaxSharedBytes && keys_shared <= kFusedMaxSharedBytes,
           "fused attention backward: ", rows_shared, " / ", keys_shared, " bytes of shared memory over the ",
           kFusedMaxSharedBytes, "-byte budget");
  const dim3 grid = fused_grid(params.length, params.batch, params.heads, "fused attention backward");
  dispatch_fused(dtype, params.head_size, "fused attention backward", [&](auto tag, auto head) {
    using S = typename decltype(tag)::type;
    constexpr int kD = decltype(head)::value;
    launch_with_shared(fused_attention_backward_rows_kernel<S, kD>, grid, rows_shared, stream, params,
                       "fused_attention_backward_rows");
    // Stream order: the keys kernel reads the rows kernel's row_dot.
    launch_with_shared(fused_attention_backward_keys_kernel<S, kD>, grid, keys_shared, stream, params,
                       "fused_attention_backward_keys");
  });
}

void launch_fused_attention_forward(const FusedAttentionParams& params, DType dtype, cudaStream_t stream) {
  check_fused_arguments(dtype, params.length, params.head_size, "fused attention");
  const size_t shared = fused_attention_shared_bytes(params.length, params.head_size, dtype);
  ZT_CHECK(shared <= kFusedMaxSharedBytes, "fused attention: ", shared, " bytes of shared memory over the ",
           kFusedMaxSharedBytes, "-byte budget");
  const dim3 grid = fused_grid(params.length, params.batch, params.heads, "fused attention");
  dispatch_fused(dtype, params.head_size, "fused attention", [&](auto tag, auto head) {
    using S = typename decltype(tag)::type;
    launch_with_shared(fused_attention_forward_kernel<S, decltype(head)::value>, grid, shared, stream, params,
                       "fused_attention_forward");
  });
}

}  // namespace zt::kernels::gpu
