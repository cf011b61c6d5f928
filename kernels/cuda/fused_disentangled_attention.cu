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

  // ---- phase 3: context tile = P~ V ----
  constexpr int kOutTiles = (kFusedTileRows / kFragment) * (kD / kFragment);
  constexpr int kTilesPerWarp = (kOutTiles + kFusedWarps - 1) / kFusedWarps;
  wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float> acc[kTilesPerWarp];
#pragma unroll
  for (int w = 0; w < kTilesPerWarp; ++w) wmma::fill_fragment(acc[w], 0.0f);
  for (int j0 = 0; j0 < L; j0 += kFusedKeyChunk) {
    const int keys = min(kFusedKeyChunk, L - j0);
    load_rows<T, kD>(kv_chunk, row_pitch, v + static_cast<int64_t>(j0) * D, D, keys, kFusedKeyChunk);
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kTilesPerWarp; ++w) {
      const int tile = warp + w * kFusedWarps;  // warp-uniform
      if (tile >= kOutTiles) continue;
      const int mt = tile / (kD / kFragment), nt = tile % (kD / kFragment);
#pragma unroll
      for (int kk = 0; kk < kFusedKeyChunk; kk += kFragment) {
        wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, T, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, T, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, p_tilde + mt * kFragment * p_pitch + j0 + kk, p_pitch);
        wmma::load_matrix_sync(fb, kv_chunk + kk * row_pitch + nt * kFragment, row_pitch);
        wmma::mma_sync(acc[w], fa, fb, acc[w]);
      }
    }
    __syncthreads();
  }
  // Stage the f32 tile in the (dead) score rows, then store T rows of the context, 16 bytes per thread.
  constexpr int kOutPitch = kD + 4;
  float* out = scores;
#pragma unroll
  for (int w = 0; w < kTilesPerWarp; ++w) {
    const int tile = warp + w * kFusedWarps;
    if (tile >= kOutTiles) continue;
    const int mt = tile / (kD / kFragment), nt = tile % (kD / kFragment);
    wmma::store_matrix_sync(out + mt * kFragment * kOutPitch + nt * kFragment, acc[w], kOutPitch,
                            wmma::mem_row_major);
  }
  __syncthreads();
  constexpr int kPerPack = 16 / static_cast<int>(sizeof(T));
  constexpr int kPacksPerRow = kD / kPerPack;
  T* context = static_cast<T*>(p.context) + b * L * D + head_column;
  for (int idx = static_cast<int>(threadIdx.x); idx < tile_rows * kPacksPerRow; idx += kFusedThreads) {
    const int t = idx / kPacksPerRow, column = (idx % kPacksPerRow) * kPerPack;
    cuda_detail::Pack128<T> pack;
#pragma unroll
    for (int e = 0; e < kPerPack; ++e) pack.v[e] = from_float<T>(out[t * kOutPitch + column + e]);
    cuda_detail::store128(context + static_cast<int64_t>(i0 + t) * D + column, pack);
  }
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
