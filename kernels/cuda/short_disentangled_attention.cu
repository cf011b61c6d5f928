// The stored path's forward at L <= 128 in one kernel: the content scores, the positional terms C2P / P2C,
// the masks, the softmax, the dropout and P~ V, with P written for the stored backward
// (disentangled_attention.cu). It replaces four GEMMs and the softmax kernel there, which wrote and read
// back the f32 scores and the f32 [N, B*L, Wp] positional tables (~250 MB a layer at 40 x 128 for xlarge).
// The backward's first part at the same lengths is below ("backward"): dP~, the softmax backward and the
// bucket gathers in one kernel per (b, h).
//
// One CTA of 4 warps per (b, h, tile of 64 query rows); each warp owns 16 rows and keeps all of their
// scores (at most two key tiles of 64) in registers, so the softmax is exact, as the unfused kernel's:
//   the CTA's diagonals i - j in [i0 - L + 1, i0 + 63] reach the table rows first .. first + 190 (c(i, j)
//   is monotone in i - j and moves at most one row a diagonal: the launcher checks), loaded once as
//   192-row windows of PK and PQ; key tile j0's 127 diagonals reach 128 of them, from base(j0) on, so
//     S = Q_tile K_tile^T,  C2P_w = Q_tile PK_w^T,  P2C_w = K_tile PQ_w^T      (mma.sync, [64, 128] f32)
//     a(i, j) = ((S + C2P_w[i, c(i,j) - first - base]) + P2C_w[j, c(i,j) - first - base]) / s,
//     finfo.min unless m_i m_j (0 on a padded query row: uniform either way), -inf past L;
//   P = T(exp(a - max_i) / sum_i) (exp in base 2), P~ = T(P keep(e) / (1 - p)), context = T(P~ V).
// The unfused kernels' formulas and roundings (P and P~ rounded to T once, every product and sum in f32);
// the order of the f32 sums differs (tensor-core products, a row's sum over a quad) and exp2.approx stands
// for expf (a few ulp before P's rounding). keep(e) is the unfused path's Philox draw
// (flash_tiles::draw_keep_bits): the same keep bits.
//
// Shared memory (107.5 KiB, two CTAs an SM): K of both key tiles; the PK and PQ windows, whose place V's
// tiles take once the products are done (their copies in flight during the softmax); and one [64, 132] f32
// buffer that first stages Q, then holds each warp's C2P_w rows and then, the same rows by key, P2C_w: a warp
// reads only its own C2P rows, so only the P2C rows, which every warp reads, need a barrier. Nsight Compute
// at 40 x 128 (H100): 187 us, issue slots 30 % busy at 12 % occupancy (registers: 200 a thread); the
// Philox draw, the masks and the exponentials are half the instructions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/bucket_gather.cuh"
#include "kernels/cuda/flash_attention_tiles.cuh"
#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/disentangled_attention.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

using namespace flash_tiles;  // NOLINT(google-build-using-namespace): this file's building blocks

constexpr int kKeyTiles = 2;
constexpr int kWindowRows = 3 * kTile;   // table rows the CTA's 191 diagonals reach (192 with the row after)
constexpr int kProductRows = 2 * kTile;  // window rows one key tile's products cover (its 127 diagonals)
constexpr int kTermPitch = kProductRows + 4;  // floats a row of the positional-terms buffer
constexpr size_t kKeyBytes = kKeyTiles * kTile * kPitch * sizeof(uint16_t);
constexpr size_t kWindowBytes = kWindowRows * kPitch * sizeof(uint16_t);  // one table's
constexpr size_t kTermBytes = kTile * kTermPitch * sizeof(float);
constexpr size_t kShortSharedBytes = kKeyBytes + 2 * kWindowBytes + kTermBytes;
static_assert(kTermBytes >= kTile * kPitch * sizeof(uint16_t), "Q is staged in the terms buffer");
static_assert(kWindowBytes >= kKeyBytes, "V's tiles replace the PK window");

__device__ __forceinline__ void wait_for_copies() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// The two values of a pack2 word, as f32 and as T (lo: the lower address).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t word) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&word));
  }
}
template <typename T>
__device__ __forceinline__ T low_half(uint32_t word) {
  const auto bits = static_cast<uint16_t>(word & 0xffffu);
  return *reinterpret_cast<const T*>(&bits);
}
template <typename T>
__device__ __forceinline__ T high_half(uint32_t word) {
  const auto bits = static_cast<uint16_t>(word >> 16);
  return *reinterpret_cast<const T*>(&bits);
}

// Rows first .. first + 191 of head h of a [table_rows, D] table into a [192, kPitch] window (rows past the
// table zero) by cp.async.
template <typename T>
__device__ __forceinline__ void copy_window(T* window, const void* table, int table_rows, int features,
                                            int64_t h, int first) {
  const T* rows = static_cast<const T*>(table);
  for (int chunk = static_cast<int>(threadIdx.x); chunk < kWindowRows * 8; chunk += kThreads) {
    const int r = chunk / 8, c = chunk % 8, row = first + r;
    const bool valid = row < table_rows;
    copy_async16(window + r * kPitch + c * 8,
                 valid ? rows + static_cast<int64_t>(row) * features + h * kD + c * 8 : rows, valid);
  }
}

// terms[row0 + r][c] = (A W^T)[r][c] for this warp's 16 rows r and 128 rows c of a window W: A as fragments
// (Q, in registers) or as rows row0 .. of a [64, kPitch] tile (K).
__device__ __forceinline__ void store_rows(float* terms, int row0, const float part[8][4], int column0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  float* top = terms + (row0 + g) * kTermPitch + column0 + 2 * q;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    *reinterpret_cast<float2*>(top + nt * 8) = make_float2(part[nt][0], part[nt][1]);
    *reinterpret_cast<float2*>(top + 8 * kTermPitch + nt * 8) = make_float2(part[nt][2], part[nt][3]);
  }
}
template <typename T>
__device__ __forceinline__ void query_window_product(const uint32_t qa[4][4], const T* window, float* terms,
                                                     int row0) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float part[8][4];
    product_with_rows(qa, window + half * kTile * kPitch, part);
    store_rows(terms, row0, part, half * kTile);
  }
}
template <typename T>
__device__ __forceinline__ void key_window_product(const T* key_tile, const T* window, float* terms,
                                                   int row0) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float part[8][4];
    product_with_rows(key_tile, row0, window + half * kTile * kPitch, part);
    store_rows(terms, row0, part, half * kTile);
  }
}

template <typename T, bool kDropout>
__global__ void __launch_bounds__(kThreads, 2) short_attention_forward_kernel(FlashAttentionParams p) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  T* keys = reinterpret_cast<T*>(dynamic_shared);  // K tile 0, K tile 1
  T* pk_window = reinterpret_cast<T*>(dynamic_shared + kKeyBytes);
  T* pq_window = pk_window + kWindowRows * kPitch;
  T* values = pk_window;  // V tile 0, V tile 1, once the products are done
  float* terms = reinterpret_cast<float*>(dynamic_shared + kKeyBytes + 2 * kWindowBytes);
  // Per key tile: c(i, j) - first - base[kt] at i - j = i0 - j0 - 63 + t, in [0, 128).
  __shared__ int tile_diagonal[kKeyTiles][kDiagonals];
  __shared__ uint32_t key_words[kKeyTiles * 2];  // bit l of word w: key 32 w + l is < L and m_j != 0
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int L = p.length;
  const int i0 = static_cast<int>(blockIdx.x) * kTile;
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  const bool has_c2p = p.pos_key != nullptr, has_p2c = p.pos_query != nullptr;
  const bool positional = has_c2p || has_p2c;
  const int key_tiles = (L + kTile - 1) / kTile;
  auto key_tile = [&](int t) { return keys + t * kTile * kPitch; };
  auto value_tile = [&](int t) { return values + t * kTile * kPitch; };

  // Everything but V in one group: Q (through the terms buffer), K of every key tile, and the table rows the
  // CTA's diagonals i - j in [i0 - L + 1, i0 + 63] reach, from first = c(i0, L - 1) (window rows
  // first .. first + 191: the launcher checks that 191 consecutive diagonals reach at most 192 rows). Key
  // tile kt's products take the 128 window rows from base[kt] = min(c(i0, j0 + 63) - first, 64) on.
  T* q_stage = reinterpret_cast<T*>(terms);
  prefetch_tile(q_stage, static_cast<const T*>(p.q), p, b, h, i0);
  for (int t = 0; t < key_tiles; ++t)
    prefetch_tile(key_tile(t), static_cast<const T*>(p.k), p, b, h, t * kTile);
  int first = 0, base[kKeyTiles] = {0, 0};
  if (positional) {
    first = p.diagonal[i0];  // i - j = i0 - (L - 1)
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) base[kt] = min(diagonal_at(p, i0, kt * kTile, 0) - first, kTile);
    if (has_c2p) copy_window(pk_window, p.pos_key, p.table_rows, p.features, h, p.window_begin + first);
    if (has_p2c) copy_window(pq_window, p.pos_query, p.table_rows, p.features, h, p.window_begin + first);
  }
  commit_async_copies();
  {
    static_assert(kThreads == kKeyTiles * kTile, "a thread a key for the key bits");
    const int j = static_cast<int>(threadIdx.x);
    const uint32_t bits = __ballot_sync(0xffffffffu, j < L && p.keep[b * L + j] != 0);
    if (j % 32 == 0) key_words[j / 32] = bits;
  }
  if (positional) {
    for (int t = static_cast<int>(threadIdx.x); t < kKeyTiles * kDiagonals; t += kThreads) {
      const int kt = t / kDiagonals;
      const int tile_base = kt == 0 ? base[0] : base[1];  // not base[kt]: a register, not the stack
      tile_diagonal[kt][t % kDiagonals] = diagonal_at(p, i0, kt * kTile, t % kDiagonals) - first - tile_base;
    }
  }
  wait_for_copies();
  __syncthreads();
  uint32_t qa[4][4];
  load_a_fragments(q_stage, warp * 16, qa);

  const int local_row[2] = {warp * 16 + g, warp * 16 + g + 8};
  bool row_kept[2];
  query_rows_kept(p.keep, b, L, i0, local_row, row_kept);

  float s[kKeyTiles][8][4];
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    if (kt < key_tiles) {
      product_with_rows(qa, key_tile(kt), s[kt]);
    } else {  // L <= 64: no keys here
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) s[kt][nt][0] = s[kt][nt][1] = s[kt][nt][2] = s[kt][nt][3] = -INFINITY;
    }
  }
  if (positional) {
    __syncthreads();  // every warp holds its Q fragments: the terms buffer is free
#pragma unroll
    for (int kt = 0; kt < kKeyTiles; ++kt) {
      if (kt >= key_tiles) break;
      // Element (r, nt, e): query local_row[r], key j0 + kj, diagonal t = local_row[r] - kj + 63.
      auto add_terms = [&](bool by_key) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e / 2, kj = nt * 8 + 2 * q + (e & 1);
            const int c = tile_diagonal[kt][local_row[r] - kj + kTile - 1];
            s[kt][nt][e] += terms[(by_key ? kj : local_row[r]) * kTermPitch + c];
          }
      };
      if (has_c2p) {
        query_window_product(qa, pk_window + base[kt] * kPitch, terms, warp * 16);
        __syncwarp();
        add_terms(false);
        __syncwarp();  // this warp's C2P rows read before its P2C rows replace them
      }
      if (has_p2c) {
        key_window_product(key_tile(kt), pq_window + base[kt] * kPitch, terms, warp * 16);
        __syncthreads();
        add_terms(true);
      }
      __syncthreads();  // every warp done with the terms (and, after the last tile, with the windows)
    }
  }
  // V into the PK window's place, in flight while the softmax runs.
  for (int t = 0; t < key_tiles; ++t)
    prefetch_tile(value_tile(t), static_cast<const T*>(p.v), p, b, h, t * kTile);
  commit_async_copies();

  // a = ((S + C2P) + P2C) / s, finfo.min unless m_i m_j, -inf past L (no key there); a padded query row
  // (every score finfo.min: uniform over the keys < L) takes 0 instead, so exp2's scaled scores stay finite.
  // Then the softmax over the whole row, whose keys are spread over the 4 lanes of a quad, in base 2:
  // exp(a - m) = 2^(a log2 e - m log2 e), one FFMA and one MUFU.EX2 (within a few ulp of expf; P is then
  // rounded to T).
  const float masked_score[2] = {row_kept[0] ? kMasked : 0.0f, row_kept[1] ? kMasked : 0.0f};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    const uint32_t words[2] = {key_words[2 * kt] >> (2 * q), key_words[2 * kt + 1] >> (2 * q)};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = kt * kTile + nt * 8 + 2 * q + (e & 1);
        const bool kept = row_kept[e / 2] && ((words[nt / 4] >> ((nt % 4) * 8 + (e & 1))) & 1u) != 0;
        const float a = s[kt][nt][e] * p.inverse_scale;
        s[kt][nt][e] = j >= L ? -INFINITY : (kept ? a : masked_score[e / 2]);
        row_max[e / 2] = fmaxf(row_max[e / 2], s[kt][nt][e]);
      }
  }
  float scaled_max[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 1));
    row_max[r] = fmaxf(row_max[r], __shfl_xor_sync(0xffffffffu, row_max[r], 2));
    scaled_max[r] = row_max[r] * kLog2e;  // finite: key i of a kept row i is kept
  }
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        // finfo.min log2 e and -inf give -inf: 0.
        s[kt][nt][e] = exp2_approx(fmaf(s[kt][nt][e], kLog2e, -scaled_max[e / 2]));
        row_sum[e / 2] += s[kt][nt][e];
      }
  float inverse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    inverse[r] = 1.0f / row_sum[r];
  }

  // P = T(x / sum), two neighbouring keys of a row as one word, stored; P~ = T(P keep / (1 - p)) kept as the
  // A fragments of the product with V (dropped[kt][nt][r]: row g + 8 r, keys 8 nt + 2 q, + 1 of tile kt).
  const uint32_t keep_threshold = attention_keep_threshold(p.dropout_p);
  T* prob_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) prob_row[r] = static_cast<T*>(p.probs) + (bh * L + i0 + local_row[r]) * L;
  const bool pairs = L % 2 == 0;  // a word per pair of keys (4-byte aligned)
  uint32_t dropped[kKeyTiles][8][2];
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    if (kt >= key_tiles) break;
    const int j0 = kt * kTile;
    uint32_t keep = ~0u;
    if constexpr (kDropout) keep = draw_keep_bits(p, keep_threshold, bh, i0 + local_row[0], j0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = j0 + nt * 8 + 2 * q;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t prob = pack2<T>(s[kt][nt][2 * r] * inverse[r], s[kt][nt][2 * r + 1] * inverse[r]);
        if constexpr (kDropout) {
          const float2 value = unpack2<T>(prob);
          const bool keep0 = ((keep >> (4 * nt + 2 * r)) & 1u) != 0,
                     keep1 = ((keep >> (4 * nt + 2 * r + 1)) & 1u) != 0;
          dropped[kt][nt][r] =
              pack2<T>(keep0 ? value.x * p.kept_scale : 0.0f, keep1 ? value.y * p.kept_scale : 0.0f);
        } else {
          dropped[kt][nt][r] = prob;
        }
        if (i0 + local_row[r] >= L || j >= L) continue;
        T* out = prob_row[r] + j;
        if (pairs) {
          *reinterpret_cast<uint32_t*>(out) = prob;
        } else {
          out[0] = low_half<T>(prob);
          if (j + 1 < L) out[1] = high_half<T>(prob);
        }
      }
    }
  }

  wait_for_copies();
  __syncthreads();
  float o[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
#pragma unroll
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    if (kt >= key_tiles) break;
    const uint32_t lane_address = key_chunk_address(value_tile(kt));
    unrolled<4>([&](auto kc) {
      const uint32_t a[4] = {dropped[kt][2 * kc][0], dropped[kt][2 * kc][1], dropped[kt][2 * kc + 1][0],
                             dropped[kt][2 * kc + 1][1]};
      accumulate_key_chunk<T, kc>(a, lane_address, o);
    });
  }
  T* context = static_cast<T*>(p.context);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + local_row[r];
    if (i >= L) continue;
    T* out = context + (b * L + i) * p.features + h * kD;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      *reinterpret_cast<uint32_t*>(out + nt * 8 + 2 * q) = pack2<T>(o[nt][2 * r], o[nt][2 * r + 1]);
  }
}

// ---- backward -------------------------------------------------------------------------------------------
//
// The stored backward at L <= 128 up to the GEMMs that read G and P~, one CTA of 8 warps per (b, h): all
// L <= 128 query rows, 16 a warp, so every column of G is in the CTA for the bucket gathers. It replaces the
// dP~ GEMM (an f32 [B, N, L, L] write and read), the softmax backward kernel and the gather kernel's re-read
// of G (disentangled_attention.cu has the formulas):
//   dP~ = dC V^T (mma.sync, f32),  dP_j = factor_j dP~_j,  D_i = sum over kept k of P_k dP_k,
//   G_j = m_i m_j ? P_j (dP_j - D_i) / s : 0   (P the stored probabilities, in T),   P~_j = T(P_j factor_j),
// with factor_j = keep_j / (1 - p) (1 without dropout); T(G) and P~ go to global memory for dV = P~^T dC,
// dQ = T(G) K and dK = T(G)^T Q (the host's GEMMs), and, where every window row of the relative tables holds
// one distance (rel_first; DeBERTa's at L <= 128), the bucket gathers Gc[(b, i), r] = T(G)[i, i - first_r],
// Gp[(b, j), r] = T(G)[j + first_r, j] (0 outside the block), the values bucket_gather_block_kernel writes;
// elsewhere G in f32 for the gather kernels. D_i is summed over a quad of lanes (another order than the row
// kernel's) and dP~ in tensor-core order: within the tolerances, not the bits, of the unfused path.
//
// Shared memory (104 KiB with dropout, two CTAs an SM): V and dC as [128, kPitch] rows (rows past L zero),
// P as [128, kScorePitch], which G replaces element by element (each thread overwrites only what it read),
// and P~ as [128, kScorePitch].
constexpr int kBackwardWarps = kKeyTiles * kTile / 16;
constexpr int kBackwardThreads = kBackwardWarps * 32;
constexpr int kScoreRows = kKeyTiles * kTile;
constexpr int kScorePitch = kScoreRows + 8;  // T elements a P / G / P~ row (272 bytes: 16-byte rows)
constexpr size_t kRowsBytes = kScoreRows * kPitch * sizeof(uint16_t);  // 128 rows of V or dC
constexpr size_t kScoreBytes = kScoreRows * kScorePitch * sizeof(uint16_t);
constexpr int kMaxWindow = 2 * kScoreRows - 1;  // table rows L <= 128 reaches
// V, dC, P / G and, with dropout, P~ (so a CTA without dropout takes less).
constexpr size_t short_backward_shared_bytes(bool dropout) {
  return 2 * kRowsBytes + (dropout ? 2 : 1) * kScoreBytes;
}

// Rows 0 .. L - 1 of head h of a [B, L, D] tensor into a [128, kPitch] buffer (rows past L zero), by cp.async
// with every thread of the 8-warp CTA.
template <typename T>
__device__ __forceinline__ void copy_rows(T* rows, const void* x, const FlashAttentionParams& p, int64_t b,
                                          int64_t h) {
  prefetch_tile<T, kScoreRows, kBackwardThreads>(rows, static_cast<const T*>(x), p, b, h, 0);
}

// The [L, L] block bh of a [B, N, L, L] tensor in T between global memory and a [128, kScorePitch] buffer,
// 16 bytes a thread a step (L % 8 == 0, the launcher checks): in by cp.async, out by plain stores.
template <typename T>
__device__ __forceinline__ void copy_scores_in(T* block, const void* x, int L, int64_t bh) {
  const T* from = static_cast<const T*>(x) + bh * L * L;
  const int chunks_per_row = L / 8;
  for (int chunk = static_cast<int>(threadIdx.x); chunk < L * chunks_per_row; chunk += kBackwardThreads) {
    const int i = chunk / chunks_per_row, c = chunk % chunks_per_row;
    copy_async16(block + i * kScorePitch + c * 8, from + i * L + c * 8, true);
  }
}
template <typename T>
__device__ __forceinline__ void copy_scores_out(void* x, const T* block, int L, int64_t bh) {
  T* to = static_cast<T*>(x) + bh * L * L;
  const int chunks_per_row = L / 8;
  for (int chunk = static_cast<int>(threadIdx.x); chunk < L * chunks_per_row; chunk += kBackwardThreads) {
    const int i = chunk / chunks_per_row, c = chunk % chunks_per_row;
    *reinterpret_cast<uint4*>(to + i * L + c * 8) =
        *reinterpret_cast<const uint4*>(block + i * kScorePitch + c * 8);
  }
}

// ZT_SHORT_BACKWARD_PRODUCTS: rows L .. 127 of a [128, kScorePitch] score buffer zeroed, as the products over
// all 128 query rows read them (against zero rows of dC / Q: uninitialized shared memory could hold a NaN
// pattern).
template <typename T>
__device__ __forceinline__ void zero_rows_past(T* block, int L) {
  for (int chunk = static_cast<int>(threadIdx.x); chunk < (kScoreRows - L) * (kScoreRows / 8);
       chunk += kBackwardThreads) {
    const int i = L + chunk / (kScoreRows / 8), c = chunk % (kScoreRows / 8);
    *reinterpret_cast<uint4*>(block + i * kScorePitch + c * 8) = make_uint4(0, 0, 0, 0);
  }
}

// Rows row0 .. row0 + 15 (this warp's) of head h of a [B, L, D] tensor (batch b) from a [16, 64] product in
// C fragments, rounded to T; rows >= L are not written.
template <typename T>
__device__ __forceinline__ void store_head_rows(void* out, const FlashAttentionParams& p, int64_t b,
                                                int64_t h, int row0, const float acc[8][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row0 + g + 8 * r;
    if (i >= p.length) continue;
    T* row = static_cast<T*>(out) + (b * p.length + i) * p.features + h * kD;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      *reinterpret_cast<uint32_t*>(row + nt * 8 + 2 * q) = pack2<T>(acc[nt][2 * r], acc[nt][2 * r + 1]);
  }
}

// acc[16, 64] = A times a [128, kPitch] row buffer (V's, dC's, K's or Q's rows: the product's 128-deep k),
// A being rows row0 .. row0 + 15 of a [128, kScorePitch] score buffer (G K: a query's G over the keys), or
// with kTransposed its columns row0 .. (G^T Q and P~^T dC: a key's G / P~ over the queries). ldmatrix.x4
// matrix m holds A's rows 8 (m % 2) .. and k 8 (m / 2) .. of a 16-deep chunk, stored as such, or with
// .trans read from the buffer's rows k (lane (g, q) then receives buffer rows 2q, 2q + 1 of column g: A's
// row g, k 2q, 2q + 1, the A fragment's layout).
template <typename T, bool kTransposed>
__device__ __forceinline__ void score_times_rows(const T* scores, int row0, const T* rows, float acc[8][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8;
  const uint32_t a_address =
      kTransposed ? shared_address(scores + ((m / 2) * 8 + lane % 8) * kScorePitch + row0 + (m % 2) * 8)
                  : shared_address(scores + (row0 + (m % 2) * 8 + lane % 8) * kScorePitch + (m / 2) * 8);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  unrolled<kKeyTiles>([&](auto half) {
    const uint32_t b_address = key_chunk_address(rows + half * kTile * kPitch);
    unrolled<4>([&](auto kc) {
      constexpr int chunk = 4 * half + kc;  // 16-deep chunk of the 128
      uint32_t a[4];
      if constexpr (kTransposed) {
        load_matrices_transposed<static_cast<int>(sizeof(T)) * chunk * 16 * kScorePitch>(a, a_address);
      } else {
        load_matrices<static_cast<int>(sizeof(T)) * chunk * 16>(a, a_address);
      }
      accumulate_key_chunk<T, kc>(a, b_address, acc);
    });
  });
}

// dP~ = dC V^T for this warp's 16 rows and key tile kt: dC's rows (the tile of 64 holding them) times V's.
template <typename T>
__device__ __forceinline__ void score_grad_tile(const T* dc_rows, const T* v_rows, int kt, float dp[8][4]) {
  const int warp = static_cast<int>(threadIdx.x) / 32;
  product_with_rows(dc_rows + (warp / 4) * kTile * kPitch, (warp % 4) * 16, v_rows + kt * kTile * kPitch, dp);
}

// The softmax backward of this warp's 16 rows from the stored P (in T, staged in `scores`), a key tile at a
// time in two passes, dP~ computed in each (the same mma.sync, the same values: 32 registers for a tile
// instead of 64 for a row): pass 1 draws the keep bits, writes P~ to `dropped` and sums D_i; pass 2 writes
// T(G) over P in `scores` (both [128, kScorePitch]) and G in f32 to p.score_grad_f32 where it is given.
template <typename T, bool kDropout>
__device__ __forceinline__ void softmax_backward_from_stored(const FlashAttentionParams& p,
                                                             const uint32_t* key_words,
                                                             const int local_row[2], const bool row_kept[2],
                                                             int key_tiles, const T* dc_rows, const T* v_rows,
                                                             T* dropped, T* scores) {
  const int q = static_cast<int>(threadIdx.x) % 4;
  const int L = p.length;
  const int64_t bh = blockIdx.x;
  const uint32_t keep_threshold = attention_keep_threshold(p.dropout_p);
  float weighted[2] = {0.0f, 0.0f};
  // Per key tile (two scalars each, picked by kt: the loops stay rolled, no array in local memory), bit
  // 4 nt + e: element (nt, e) kept by the dropout / a kept pair (m_i m_j, j < L).
  uint32_t keep_of[kKeyTiles] = {~0u, ~0u}, kept_of[kKeyTiles] = {0u, 0u};
  float dp[8][4];
#pragma unroll 1
  for (int kt = 0; kt < key_tiles; ++kt) {
    const int j0 = kt * kTile;
    const uint32_t keep = kDropout ? draw_keep_bits(p, keep_threshold, bh, local_row[0], j0) : ~0u;
    uint32_t kept_bits = 0;
    score_grad_tile(dc_rows, v_rows, kt, dp);
    const uint32_t words[2] = {key_words[2 * kt] >> (2 * q), key_words[2 * kt + 1] >> (2 * q)};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = local_row[r], j = j0 + nt * 8 + 2 * q;
        const float2 stored = unpack2<T>(*reinterpret_cast<const uint32_t*>(scores + i * kScorePitch + j));
        float kept_drop[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c;
          const bool valid = j + c < L;
          const float prob = c == 0 ? stored.x : stored.y;
          const float factor = kDropout ? (((keep >> (4 * nt + e)) & 1u) != 0 ? p.kept_scale : 0.0f) : 1.0f;
          const bool kept = valid && row_kept[r] && ((words[nt / 4] >> ((nt % 4) * 8 + c)) & 1u) != 0;
          kept_drop[c] = valid ? prob * factor : 0.0f;
          kept_bits |= static_cast<uint32_t>(kept) << (4 * nt + e);
          if (kept) weighted[r] += prob * (dp[nt][e] * factor);  // masked keys drop out of the sum
        }
        if constexpr (kDropout)
          *reinterpret_cast<uint32_t*>(dropped + i * kScorePitch + j) = pack2<T>(kept_drop[0], kept_drop[1]);
      }
    if (kt == 0) {
      keep_of[0] = keep, kept_of[0] = kept_bits;
    } else {
      keep_of[1] = keep, kept_of[1] = kept_bits;
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    weighted[r] += __shfl_xor_sync(0xffffffffu, weighted[r], 1);
    weighted[r] += __shfl_xor_sync(0xffffffffu, weighted[r], 2);
  }
  // G = P (dP - D) / s on kept pairs (0 elsewhere, key tiles past L included), T(G) over P.
#pragma unroll 1
  for (int kt = 0; kt < kKeyTiles; ++kt) {
    if (kt < key_tiles) score_grad_tile(dc_rows, v_rows, kt, dp);
    const uint32_t keep = kt == 0 ? keep_of[0] : keep_of[1];
    const uint32_t kept_bits = kt < key_tiles ? (kt == 0 ? kept_of[0] : kept_of[1]) : 0u;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = local_row[r], j = kt * kTile + nt * 8 + 2 * q;
        uint32_t* slot = reinterpret_cast<uint32_t*>(scores + i * kScorePitch + j);
        const float2 stored = unpack2<T>(*slot);
        float value[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int e = 2 * r + c;
          const bool kept = ((kept_bits >> (4 * nt + e)) & 1u) != 0;
          const float factor = kDropout ? (((keep >> (4 * nt + e)) & 1u) != 0 ? p.kept_scale : 0.0f) : 1.0f;
          const float prob = c == 0 ? stored.x : stored.y;
          value[c] = kept ? prob * (dp[nt][e] * factor - weighted[r]) * p.inverse_scale : 0.0f;
        }
        *slot = pack2<T>(value[0], value[1]);
        if (p.score_grad_f32 == nullptr || i >= L || j >= L) continue;
        float* out = p.score_grad_f32 + (bh * L + i) * L + j;
        if (j + 1 < L) {
          *reinterpret_cast<float2*>(out) = make_float2(value[0], value[1]);
        } else {
          out[0] = value[0];
        }
      }
  }
}

// The bucket gathers from T(G) in shared memory (one_distance_gathers, as the stored path's block gather), a
// warp per position (query i for Gc, key j for Gp), lanes along two window rows each (a 4-byte store);
// padding columns r >= W get zeros. kBands (ZT_GATHER_BANDS): each term's row as its band
// (attention_host::BucketGrad), the gathers_band_width rows from gathers_band_first on.
template <typename T, bool kBands>
__device__ __forceinline__ void write_bucket_gathers(const T* grad_rows, const int* first_of,
                                                     const FlashAttentionParams& p, int64_t b, int64_t h) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int L = p.length;
  if constexpr (!kBands) {
    const int64_t out_rows = (h * p.batch + b) * L;  // row (b, 0) of head h in [N, B*L, window_pitch]
    T* gc = static_cast<T*>(p.gc_lowp);
    T* gp = static_cast<T*>(p.gp_lowp);
    for (int position = warp; position < L; position += kBackwardWarps) {
      for (int r0 = 2 * lane; r0 < p.window_pitch; r0 += 64) {
        float sum_c[2] = {0.0f, 0.0f}, sum_p[2] = {0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = r0 + c;
          if (r >= p.window) continue;
          const float2 sums =
              cuda_detail::one_distance_gathers(grad_rows, kScorePitch, L, position, first_of[r], true, true);
          sum_c[c] = sums.x;
          sum_p[c] = sums.y;
        }
        const int64_t at = (out_rows + position) * p.window_pitch + r0;
        if (gc != nullptr) *reinterpret_cast<uint32_t*>(gc + at) = pack2<T>(sum_c[0], sum_c[1]);
        if (gp != nullptr) *reinterpret_cast<uint32_t*>(gp + at) = pack2<T>(sum_p[0], sum_p[1]);
      }
    }
  } else {
    const int width = p.gathers_band_width;
    const int64_t out_rows = (h * p.batch + b) * L;  // row (b, 0) of head h in [N, B*L, width]
    T* gc = static_cast<T*>(p.gc_lowp);
    T* gp = static_cast<T*>(p.gp_lowp);
    // One term's band: window rows first .. first + width - 1.
    auto write_band = [&](T* out, int position, bool by_query) {
      const int first = static_cast<int>(gathers_band_first(L, position, !by_query));
      for (int t0 = 2 * lane; t0 < width; t0 += 64) {
        float sums[2] = {0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = first + t0 + c;
          if (r >= p.window) continue;
          const float2 both = cuda_detail::one_distance_gathers(grad_rows, kScorePitch, L, position,
                                                                first_of[r], by_query, !by_query);
          sums[c] = by_query ? both.x : both.y;
        }
        *reinterpret_cast<uint32_t*>(out + (out_rows + position) * width + t0) = pack2<T>(sums[0], sums[1]);
      }
    };
    for (int position = warp; position < L; position += kBackwardWarps) {
      if (gc != nullptr) write_band(gc, position, true);
      if (gp != nullptr) write_band(gp, position, false);
    }
  }
}

template <typename T, bool kDropout, bool kProducts, bool kBands>
__global__ void __launch_bounds__(kBackwardThreads, 2)
    short_attention_backward_kernel(FlashAttentionParams p) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  T* v_rows = reinterpret_cast<T*>(dynamic_shared);
  T* dc_rows = v_rows + kScoreRows * kPitch;
  T* scores = dc_rows + kScoreRows * kPitch;       // [128 rows i, kScorePitch]: P, then T(G)
  T* dropped = scores + kScoreRows * kScorePitch;  // [128 rows i, kScorePitch]: P~ (with dropout)
  __shared__ uint32_t key_words[kKeyTiles * 2];
  __shared__ int first_of[kMaxWindow];  // the one i - j of window row r (gathers in this kernel)
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4;
  const int L = p.length;
  const int64_t bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int key_tiles = (L + kTile - 1) / kTile;
  const bool gathers = p.rel_first != nullptr;

  copy_rows(v_rows, p.v, p, b, h);
  copy_rows(dc_rows, p.dcontext, p, b, h);
  copy_scores_in(scores, p.probs, L, bh);
  if constexpr (kProducts) zero_rows_past(scores, L);
  commit_async_copies();
  if (threadIdx.x < kScoreRows) {
    const int j = static_cast<int>(threadIdx.x);
    const uint32_t bits = __ballot_sync(0xffffffffu, j < L && p.keep[b * L + j] != 0);
    if (j % 32 == 0) key_words[j / 32] = bits;
  }
  if (gathers) {
    for (int r = static_cast<int>(threadIdx.x); r < p.window; r += kBackwardThreads)
      first_of[r] = p.rel_first[r];
  }
  wait_for_copies();
  __syncthreads();

  // ZT_SHORT_BACKWARD_PRODUCTS: dV, dQ and dK here, K and Q into V's and dC's buffers once read.
  const int row0 = warp * 16;  // this warp's queries (softmax backward, dQ) or keys (dK, dV)
  float acc[8][4];
  if constexpr (kProducts && !kDropout) {  // dV = P^T dC from P before G replaces it
    score_times_rows<T, true>(scores, row0, dc_rows, acc);
    store_head_rows<T>(p.dv, p, b, h, row0, acc);
    __syncthreads();
  }
  const int local_row[2] = {row0 + g, row0 + g + 8};
  bool row_kept[2];
  query_rows_kept(p.keep, b, L, 0, local_row, row_kept);
  softmax_backward_from_stored<T, kDropout>(p, key_words, local_row, row_kept, key_tiles, dc_rows, v_rows,
                                            dropped, scores);
  __syncthreads();  // T(G) and P~ staged; V read for the last time
  if constexpr (!kProducts) {
    copy_scores_out(p.score_grad_lowp, scores, L, bh);
    if constexpr (kDropout) copy_scores_out(p.dropped_probs, dropped, L, bh);
    if (gathers) write_bucket_gathers<T, kBands>(scores, first_of, p, b, h);
  } else {
    copy_rows(v_rows, p.k, p, b, h);
    if constexpr (kDropout) {
      commit_async_copies();
      score_times_rows<T, true>(dropped, row0, dc_rows, acc);  // dV = P~^T dC
      store_head_rows<T>(p.dv, p, b, h, row0, acc);
    } else {
      copy_rows(dc_rows, p.q, p, b, h);
      commit_async_copies();
    }
    if (gathers) write_bucket_gathers<T, kBands>(scores, first_of, p, b, h);
    wait_for_copies();
    __syncthreads();  // K staged (and Q without dropout); with dropout every warp is past dV's reads of dC
    if constexpr (kDropout) {
      copy_rows(dc_rows, p.q, p, b, h);
      commit_async_copies();
    }
    score_times_rows<T, false>(scores, row0, v_rows, acc);  // dQ = T(G) K
    store_head_rows<T>(p.dq, p, b, h, row0, acc);
    if constexpr (kDropout) {
      wait_for_copies();
      __syncthreads();
    }
    score_times_rows<T, true>(scores, row0, dc_rows, acc);  // dK = T(G)^T Q
    store_head_rows<T>(p.dk, p, b, h, row0, acc);
  }
}

}  // namespace

void launch_short_attention_forward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream) {
  ZT_CHECK(params.length >= 1 && params.length <= kShortAttentionMaxLength, "short_attention_forward: L ",
           params.length, " is not in [1, ", kShortAttentionMaxLength, "]");
  ZT_CHECK(!params.dropout || params.dropout_p < 1.0f, "short_attention_forward: dropout p ",
           params.dropout_p, " is not < 1");
  cuda_detail::dispatch_half(dtype, "short_attention_forward", [&](auto tag) {
    using T = decltype(tag);
    const auto kernel =
        params.dropout ? short_attention_forward_kernel<T, true> : short_attention_forward_kernel<T, false>;
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kShortSharedBytes)));
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    const dim3 grid(static_cast<unsigned>((params.length + kTile - 1) / kTile),
                    static_cast<unsigned>(params.batch * params.heads));
    kernel<<<grid, kThreads, kShortSharedBytes, stream>>>(params);
    ZT_CUDA_CHECK_LAUNCH("short_attention_forward");
  });
}

void launch_short_attention_backward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream) {
  ZT_CHECK(params.length >= 1 && params.length <= kShortAttentionMaxLength && params.length % 8 == 0,
           "short_attention_backward: L ", params.length, " is not a multiple of 8 in [8, ",
           kShortAttentionMaxLength, "]");
  ZT_CHECK(params.rel_first == nullptr || (params.window <= kMaxWindow && params.window_pitch % 2 == 0),
           "short_attention_backward: a window of ", params.window, " rows (pitch ", params.window_pitch,
           ") for the gathers");
  ZT_CHECK(params.content_products
               ? params.q != nullptr && params.k != nullptr && params.dq != nullptr && params.dk != nullptr &&
                     params.dv != nullptr
               : params.score_grad_lowp != nullptr && (!params.dropout || params.dropped_probs != nullptr),
           "short_attention_backward: no buffer for G or P~, or (taking the products) for Q, K, dQ, dK, dV");
  ZT_CHECK(
      params.gathers_band_width == 0 ||
          (params.rel_first != nullptr && params.gathers_band_width == gathers_band_width(params.length) &&
           params.window == 2 * params.length - 1),
      "short_attention_backward: bands of ", params.gathers_band_width, " for a window of ", params.window,
      " rows at L ", params.length);
  cuda_detail::dispatch_half(dtype, "short_attention_backward", [&](auto tag) {
    using T = decltype(tag);
    const auto pick = [&](auto dropout, auto products, auto bands) {
      return short_attention_backward_kernel<T, decltype(dropout)::value, decltype(products)::value,
                                             decltype(bands)::value>;
    };
    using On = std::true_type;
    using Off = std::false_type;
    const bool bands = params.gathers_band_width > 0;
    const auto kernel =
        params.content_products
            ? (bands ? (params.dropout ? pick(On{}, On{}, On{}) : pick(Off{}, On{}, On{}))
                     : (params.dropout ? pick(On{}, On{}, Off{}) : pick(Off{}, On{}, Off{})))
            : (bands ? (params.dropout ? pick(On{}, Off{}, On{}) : pick(Off{}, Off{}, On{}))
                     : (params.dropout ? pick(On{}, Off{}, Off{}) : pick(Off{}, Off{}, Off{})));
    const size_t shared = short_backward_shared_bytes(params.dropout);
    ZT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    kernel<<<static_cast<unsigned>(params.batch * params.heads), kBackwardThreads, shared, stream>>>(params);
    ZT_CUDA_CHECK_LAUNCH("short_attention_backward");
  });
}

}  // namespace zt::kernels::gpu
