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

// Byte offsets of the shared-memory regions (header comment) for padded length Lp, head size d and
// element size of T; computed the same way by the host (budget) and the kernel (pointers).
struct FusedLayout {
  int row_pitch = 0;    // elements of a T row: d + 8
  int score_pitch = 0;  // elements of an f32 score row: max(Lp, d) + 4
  int p_pitch = 0;      // elements of a P~ row: Lp + 8
  size_t q_tile = 0, kv_chunk = 0, scores = 0, diagonal = 0, pk_slice = 0, pq_slice = 0, c2p = 0, p2c = 0,
         p_tilde = 0, total = 0;
};

__host__ __device__ constexpr FusedLayout fused_layout(int padded, int head_size, int element_bytes) {
  FusedLayout l;
  l.row_pitch = head_size + 8;
  l.score_pitch = (padded > head_size ? padded : head_size) + 4;
  l.p_pitch = padded + 8;
  const size_t t_rows = static_cast<size_t>(l.row_pitch) * element_bytes;
  size_t at = 0;
  l.q_tile = at;
  at += align_up(kFusedTileRows * t_rows);
  l.kv_chunk = at;
  at += align_up(kFusedKeyChunk * t_rows);
  l.scores = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * l.score_pitch * sizeof(float));
  l.diagonal = at;
  at += align_up(kFusedSliceRows * sizeof(int32_t));
  // The union: the phase-1 slices and products, or P~.
  const size_t union_begin = at;
  l.pk_slice = at;
  at += align_up(kFusedSliceRows * t_rows);
  l.pq_slice = at;
  at += align_up(kFusedSliceRows * t_rows);
  l.c2p = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * kSlicePitch * sizeof(float));
  l.p2c = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * kSlicePitch * sizeof(float));
  l.p_tilde = union_begin;
  const size_t p_bytes = align_up(static_cast<size_t>(kFusedTileRows) * l.p_pitch * element_bytes);
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

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads) fused_attention_forward_kernel(FusedAttentionParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int L = p.length, Lp = padded_length(L);
  const int64_t D = p.features;
  const FusedLayout layout = fused_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const int row_pitch = layout.row_pitch, score_pitch = layout.score_pitch, p_pitch = layout.p_pitch;
  T* q_tile = reinterpret_cast<T*>(smem + layout.q_tile);
  T* kv_chunk = reinterpret_cast<T*>(smem + layout.kv_chunk);
  float* scores = reinterpret_cast<float*>(smem + layout.scores);
  int32_t* diagonal = reinterpret_cast<int32_t*>(smem + layout.diagonal);
  T* pk_slice = reinterpret_cast<T*>(smem + layout.pk_slice);
  T* pq_slice = reinterpret_cast<T*>(smem + layout.pq_slice);
  float* c2p = reinterpret_cast<float*>(smem + layout.c2p);
  float* p2c = reinterpret_cast<float*>(smem + layout.p2c);
  T* p_tilde = reinterpret_cast<T*>(smem + layout.p_tilde);

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int i0 = static_cast<int>(blockIdx.x) * kFusedTileRows;
  const int tile_rows = min(kFusedTileRows, L - i0);
  const int64_t bh = blockIdx.y, h = bh % p.heads, b = bh / p.heads;
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
    {
      // Q K^T for the chunk: 2 x 2 tiles of 16, one per warp, into score columns j0 .. j0 + 31 (< Lp).
      const int mt = warp / 2, nt = warp % 2;
      product_abt<T, kD>(q_tile + mt * kFragment * row_pitch, row_pitch,
                         kv_chunk + nt * kFragment * row_pitch, row_pitch,
                         scores + mt * kFragment * score_pitch + j0 + nt * kFragment, score_pitch);
    }
    // C2P and P2C: 2 x 4 tiles each, two per warp.
    constexpr int kSliceTiles = (kFusedTileRows / kFragment) * (kFusedSliceRows / kFragment);
    for (int tile = warp; tile < kSliceTiles; tile += kFusedWarps) {
      const int mt = tile / (kFusedSliceRows / kFragment), nt = tile % (kFusedSliceRows / kFragment);
      if (p.c2p)
        product_abt<T, kD>(q_tile + mt * kFragment * row_pitch, row_pitch,
                           pk_slice + nt * kFragment * row_pitch, row_pitch,
                           c2p + mt * kFragment * kSlicePitch + nt * kFragment, kSlicePitch);
      if (p.p2c)
        product_abt<T, kD>(kv_chunk + mt * kFragment * row_pitch, row_pitch,
                           pq_slice + nt * kFragment * row_pitch, row_pitch,
                           p2c + mt * kFragment * kSlicePitch + nt * kFragment, kSlicePitch);
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
  const int chunks = (L + 127) / 128;
  for (int t = warp; t < kFusedTileRows; t += kFusedWarps) {
    T* p_row = p_tilde + t * p_pitch;
    if (t >= tile_rows) {  // rows past L: zeros, so the P~ V fragments read defined values
      for (int j = lane; j < Lp; j += 32) p_row[j] = from_float<T>(0.0f);
      continue;
    }
    float* x = scores + t * score_pitch;
    float row_max = kMasked;
    for (int c = 0; c < chunks; ++c) {
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int j = 128 * c + 4 * lane + q4;
        if (j < L) row_max = fmaxf(row_max, x[j]);
      }
    }
    row_max = cuda_detail::warp_max(row_max);
    float sum = 0.0f;
    for (int c = 0; c < chunks; ++c) {
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int j = 128 * c + 4 * lane + q4;
        if (j < L) {
          x[j] = expf(x[j] - row_max);  // a lane rewrites only its own keys
          sum += x[j];
        }
      }
    }
    const float inverse = 1.0f / cuda_detail::warp_sum(sum);
    const int64_t row = bh * L + i0 + t;  // (b*N + h)*L + i
    T* probs_row = static_cast<T*>(p.probs) + row * L;
    for (int c = 0; c < chunks; ++c) {
      const int j4 = 128 * c + 4 * lane;
      const uint64_t e = static_cast<uint64_t>(row * L + j4);  // the flat index of P[b, h, i, j4]
      const bool aligned = (e & 3) == 0;
      PhiloxCounter block{};
      if (p.dropout && j4 < L && aligned) block = mask_op.group(e >> 2);
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int j = j4 + q4;
        if (j >= L) {
          if (j < Lp) p_row[j] = from_float<T>(0.0f);
          continue;
        }
        const T prob = from_float<T>(x[j] * inverse);  // the one rounding of P
        probs_row[j] = prob;
        float kept = to_float(prob);
        if (p.dropout)
          kept = mask_op(aligned ? block : mask_op.group((e + q4) >> 2), static_cast<int64_t>(e + q4), kept);
        p_row[j] = from_float<T>(kept);
      }
    }
  }
  __syncthreads();

  // ---- phase 3: context tile = P~ V, staged in the (dead) score rows ----
  typename OutputTiles<kD>::Accumulator acc[OutputTiles<kD>::kPerWarp];
#pragma unroll
  for (int w = 0; w < OutputTiles<kD>::kPerWarp; ++w) wmma::fill_fragment(acc[w], 0.0f);
  accumulate_a_times_rows<T, kD>(acc, p_tilde, p_pitch, v, D, L, kv_chunk, row_pitch);
  store_output_tiles<T, kD>(
      acc, scores, static_cast<T*>(p.context) + b * L * D + head_column + static_cast<int64_t>(i0) * D, D,
      tile_rows);
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

struct RowsLayout {
  int row_pitch = 0, grad_pitch = 0, g_pitch = 0;
  size_t dc_tile = 0, kv_chunk = 0, grad = 0, g_lowp = 0, total = 0;
};

__host__ __device__ constexpr RowsLayout rows_layout(int padded, int head_size, int element_bytes) {
  RowsLayout l;
  l.row_pitch = head_size + 8;
  l.grad_pitch = (padded > head_size ? padded : head_size) + 4;
  l.g_pitch = padded + 8;
  const size_t t_rows = static_cast<size_t>(l.row_pitch) * element_bytes;
  size_t at = 0;
  l.dc_tile = at;
  at += align_up(kFusedTileRows * t_rows);
  l.kv_chunk = at;
  at += align_up(kFusedKeyChunk * t_rows);
  l.grad = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * l.grad_pitch * sizeof(float));
  l.g_lowp = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * l.g_pitch * element_bytes);
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
  l.v_tile = at;
  at += align_up(kFusedKeyChunk * t_rows);
  l.dc_chunk = at;
  at += align_up(kFusedTileRows * t_rows);
  l.q_chunk = at;
  at += align_up(kFusedTileRows * t_rows);
  l.dp_chunk = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * kChunkPitchF32 * sizeof(float));
  l.p_chunk = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * kChunkPitchT * element_bytes);
  l.g_chunk = at;
  at += align_up(static_cast<size_t>(kFusedTileRows) * kChunkPitchT * element_bytes);
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

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads)
    fused_attention_backward_rows_kernel(FusedAttentionBackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int L = p.length, Lp = padded_length(L);
  const int64_t D = p.features;
  const RowsLayout layout = rows_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const int row_pitch = layout.row_pitch, grad_pitch = layout.grad_pitch, g_pitch = layout.g_pitch;
  T* dc_tile = reinterpret_cast<T*>(smem + layout.dc_tile);
  T* kv_chunk = reinterpret_cast<T*>(smem + layout.kv_chunk);
  float* grad = reinterpret_cast<float*>(smem + layout.grad);
  T* g_lowp = reinterpret_cast<T*>(smem + layout.g_lowp);

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int i0 = static_cast<int>(blockIdx.x) * kFusedTileRows;
  const int tile_rows = min(kFusedTileRows, L - i0);
  const int64_t bh = blockIdx.y, h = bh % p.heads, b = bh / p.heads;
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
    const int mt = warp / 2, nt = warp % 2;
    product_abt<T, kD>(dc_tile + mt * kFragment * row_pitch, row_pitch, kv_chunk + nt * kFragment * row_pitch,
                       row_pitch, grad + mt * kFragment * grad_pitch + j0 + nt * kFragment, grad_pitch);
    __syncthreads();
  }
  // G per row, a warp per row (the unfused softmax backward's lane layout, Philox grouping and sum order).
  const DropoutMaskOp mask_op{p.dropout_p, p.kept_scale, p.seed, p.site_id};
  const int chunks = (L + 127) / 128;
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
    for (int c = 0; c < chunks; ++c) {
      const int j4 = 128 * c + 4 * lane;
      const uint64_t e = static_cast<uint64_t>(row * L + j4);
      const bool aligned = (e & 3) == 0;
      PhiloxCounter block{};
      if (p.dropout && j4 < L && aligned) block = mask_op.group(e >> 2);
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int j = j4 + q4;
        if (j >= L) break;
        float dp = g[j];
        if (p.dropout)
          dp = mask_op(aligned ? block : mask_op.group((e + q4) >> 2), static_cast<int64_t>(e + q4), dp);
        g[j] = dp;  // a lane rewrites only its own keys
        if (query_kept && key_keep[j] != 0) weighted += to_float(probs_row[j]) * dp;
      }
    }
    weighted = cuda_detail::warp_sum(weighted);
    if (lane == 0) p.row_dot[row] = weighted;
    for (int c = 0; c < chunks; ++c) {
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4) {
        const int j = 128 * c + 4 * lane + q4;
        if (j >= L) {
          if (j < Lp) g_row[j] = from_float<T>(0.0f);
          continue;
        }
        const bool kept = query_kept && key_keep[j] != 0;
        const float value = kept ? to_float(probs_row[j]) * (g[j] - weighted) * p.inverse_scale : 0.0f;
        g[j] = value;
        g_row[j] = from_float<T>(value);
      }
    }
  }
  __syncthreads();
  // Gc rows: a warp per query row, lanes along r, padding columns r >= W zero.
  if (p.gc != nullptr) {
    for (int t = warp; t < tile_rows; t += kFusedWarps) {
      const int i = i0 + t;
      T* gc_row = static_cast<T*>(p.gc) + ((h * p.batch + b) * L + i) * static_cast<int64_t>(p.window_pitch);
      for (int r = lane; r < p.window_pitch; r += 32) {
        float sum = 0.0f;
        if (r < p.window) {
          const int first = p.rel_first[r], last = p.rel_last[r];
          if (first <= last) sum = sum_range(grad + t * grad_pitch, 1, i - last, i - first, L);
        }
        gc_row[r] = from_float<T>(sum);
      }
    }
  }
  // dQ_tile = G K over key chunks, staged in the grad rows (their Gc reads end before the first barrier).
  typename OutputTiles<kD>::Accumulator acc[OutputTiles<kD>::kPerWarp];
#pragma unroll
  for (int w = 0; w < OutputTiles<kD>::kPerWarp; ++w) wmma::fill_fragment(acc[w], 0.0f);
  accumulate_a_times_rows<T, kD>(acc, g_lowp, g_pitch, k, D, L, kv_chunk, row_pitch);
  store_output_tiles<T, kD>(acc, grad, static_cast<T*>(p.dq) + head_base + static_cast<int64_t>(i0) * D, D,
                            tile_rows);
}

template <typename T, int kD>
__global__ void __launch_bounds__(kFusedThreads)
    fused_attention_backward_keys_kernel(FusedAttentionBackwardParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int L = p.length, Lp = padded_length(L);
  const int64_t D = p.features;
  const KeysLayout layout = keys_layout(Lp, kD, static_cast<int>(sizeof(T)));
  const int row_pitch = layout.row_pitch;
  T* v_tile = reinterpret_cast<T*>(smem + layout.v_tile);
  T* dc_chunk = reinterpret_cast<T*>(smem + layout.dc_chunk);
  T* q_chunk = reinterpret_cast<T*>(smem + layout.q_chunk);
  float* dp_chunk = reinterpret_cast<float*>(smem + layout.dp_chunk);
  T* p_chunk = reinterpret_cast<T*>(smem + layout.p_chunk);
  T* g_chunk = reinterpret_cast<T*>(smem + layout.g_chunk);
  float* g_columns = reinterpret_cast<float*>(smem + layout.g_columns);

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int j0 = static_cast<int>(blockIdx.x) * kFusedKeyChunk;
  const int tile_keys = min(kFusedKeyChunk, L - j0);
  const int64_t bh = blockIdx.y, h = bh % p.heads, b = bh / p.heads;
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
#pragma unroll
  for (int w = 0; w < kTilesPerWarp; ++w) {
    wmma::fill_fragment(dv_acc[w], 0.0f);
    wmma::fill_fragment(dk_acc[w], 0.0f);
  }
  for (int i0 = 0; i0 < L; i0 += kFusedTileRows) {
    const int rows = min(kFusedTileRows, L - i0);
    load_rows<T, kD>(dc_chunk, row_pitch, dc + static_cast<int64_t>(i0) * D, D, rows, kFusedTileRows);
    load_rows<T, kD>(q_chunk, row_pitch, q + static_cast<int64_t>(i0) * D, D, rows, kFusedTileRows);
    __syncthreads();
    {
      // dP~ [32 queries, 32 keys] = dC_chunk V_tile^T: 2 x 2 tiles, one per warp.
      const int mt = warp / 2, nt = warp % 2;
      product_abt<T, kD>(dc_chunk + mt * kFragment * row_pitch, row_pitch,
                         v_tile + nt * kFragment * row_pitch, row_pitch,
                         dp_chunk + mt * kFragment * kChunkPitchF32 + nt * kFragment, kChunkPitchF32);
    }
    __syncthreads();
    // P~ and G of the chunk: a thread per 4 consecutive keys of a query row (one Philox block when aligned).
    for (int item = static_cast<int>(threadIdx.x); item < kFusedTileRows * (kFusedKeyChunk / 4);
         item += kFusedThreads) {
      const int t = item / (kFusedKeyChunk / 4), u4 = (item % (kFusedKeyChunk / 4)) * 4;
      const int i = i0 + t;
      const bool row_valid = t < rows;
      const int64_t row = bh * L + i;
      const uint64_t e = row_valid ? static_cast<uint64_t>(row * L + j0 + u4) : 0;
      const bool aligned = (e & 3) == 0;
      PhiloxCounter block{};
      if (p.dropout && row_valid && u4 < tile_keys && aligned) block = mask_op.group(e >> 2);
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
            const PhiloxCounter bits = aligned ? block : mask_op.group((e + q4) >> 2);
            p_tilde = mask_op(bits, static_cast<int64_t>(e + q4), prob);
            dp = mask_op(bits, static_cast<int64_t>(e + q4), dp);
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
    for (int u = warp; u < tile_keys; u += kFusedWarps) {
      const int j = j0 + u;
      T* gp_row = static_cast<T*>(p.gp) + ((h * p.batch + b) * L + j) * static_cast<int64_t>(p.window_pitch);
      for (int r = lane; r < p.window_pitch; r += 32) {
        float sum = 0.0f;
        if (r < p.window) {
          const int first = p.rel_first[r], last = p.rel_last[r];
          if (first <= last) sum = sum_range(g_columns + u, kColumnPitch, j + first, j + last, L);
        }
        gp_row[r] = from_float<T>(sum);
      }
    }
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

void launch_fused_attention_backward(const FusedAttentionBackwardParams& params, DType dtype,
                                     cudaStream_t stream) {
  ZT_CHECK(dtype == DType::bf16 || dtype == DType::f16,
           "fused attention backward: storage must be bf16 or f16, got ", dtype_name(dtype));
  ZT_CHECK(params.length >= 1 && params.length <= kFusedMaxLength, "fused attention backward: length ",
           params.length, " outside [1, ", kFusedMaxLength, "]");
  ZT_CHECK(fused_attention_head_size_supported(params.head_size), "fused attention backward: head size ",
           params.head_size, " is not one of 16, 32, 64, 128");
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
  const int64_t blocks = static_cast<int64_t>(params.batch) * params.heads;
  ZT_CHECK(blocks >= 1 && blocks <= 65535, "fused attention backward: B * N = ", blocks,
           " outside the grid's y range");
  const dim3 grid(static_cast<unsigned>((params.length + kFusedTileRows - 1) / kFusedTileRows),
                  static_cast<unsigned>(blocks));
  dispatch_storage(dtype, "fused attention backward", [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<S, float>) {
      dispatch_head_size(params.head_size, [&](auto head) {
        constexpr int kD = decltype(head)::value;
        const auto rows_kernel = fused_attention_backward_rows_kernel<S, kD>;
        ZT_CUDA_CHECK(cudaFuncSetAttribute(rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(rows_shared)));
        rows_kernel<<<grid, kFusedThreads, rows_shared, stream>>>(params);
        ZT_CUDA_CHECK_LAUNCH("fused_attention_backward_rows");
        // Stream order: the keys kernel reads the rows kernel's row_dot.
        const auto keys_kernel = fused_attention_backward_keys_kernel<S, kD>;
        ZT_CUDA_CHECK(cudaFuncSetAttribute(keys_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(keys_shared)));
        keys_kernel<<<grid, kFusedThreads, keys_shared, stream>>>(params);
        ZT_CUDA_CHECK_LAUNCH("fused_attention_backward_keys");
      });
    }
  });
}

void launch_fused_attention_forward(const FusedAttentionParams& params, DType dtype, cudaStream_t stream) {
  ZT_CHECK(dtype == DType::bf16 || dtype == DType::f16, "fused attention: storage must be bf16 or f16, got ",
           dtype_name(dtype));
  ZT_CHECK(params.length >= 1 && params.length <= kFusedMaxLength, "fused attention: length ", params.length,
           " outside [1, ", kFusedMaxLength, "]");
  ZT_CHECK(fused_attention_head_size_supported(params.head_size), "fused attention: head size ",
           params.head_size, " is not one of 16, 32, 64, 128");
  const size_t shared = fused_attention_shared_bytes(params.length, params.head_size, dtype);
  ZT_CHECK(shared <= kFusedMaxSharedBytes, "fused attention: ", shared, " bytes of shared memory over the ",
           kFusedMaxSharedBytes, "-byte budget");
  const int64_t blocks = static_cast<int64_t>(params.batch) * params.heads;
  ZT_CHECK(blocks >= 1 && blocks <= 65535, "fused attention: B * N = ", blocks,
           " outside the grid's y range");
  const dim3 grid(static_cast<unsigned>((params.length + kFusedTileRows - 1) / kFusedTileRows),
                  static_cast<unsigned>(blocks));
  dispatch_storage(dtype, "fused attention", [&](auto tag) {
    using S = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<S, float>) {
      dispatch_head_size(params.head_size, [&](auto head) {
        const auto kernel = fused_attention_forward_kernel<S, decltype(head)::value>;
        ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
        kernel<<<grid, kFusedThreads, shared, stream>>>(params);
        ZT_CUDA_CHECK_LAUNCH("fused_attention_forward");
      });
    }
  });
}

}  // namespace zt::kernels::gpu
