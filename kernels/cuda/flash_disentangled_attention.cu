// The flash disentangled-attention forward kernel (see flash_disentangled_attention.cuh for the algorithm,
// flash_attention_tiles.cuh for the fragments, tiles and staging they are built from).
#include "kernels/cuda/flash_disentangled_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/flash_attention_tiles.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

using namespace flash_tiles;  // NOLINT(google-build-using-namespace): this file's building blocks

// ---- forward -------------------------------------------------------------------------------------------
//
// Note [forward pipeline]: while tile t is computed, everything tile t + 1 reads is on its way: its K and V
// rows by cp.async into the other of two buffers from the start of tile t, its 127 diagonals and 64 key-mask
// bytes by plain loads into registers, stored into the other of two info buffers once tile t's scores are
// formed; then its positional slices by cp.async into the one slice buffer (after a barrier: every warp has
// read tile t's) or, on a uniform tile, its per-query and per-key terms into the other info buffer. The
// barrier at the top of tile t + 1 publishes them and frees tile t's buffers. The dropout keep bits never
// touch shared memory: each thread draws the Philox blocks of its own accumulator elements (Note [keep bits
// in registers]). Issue slots, not memory, bound the kernel, so the integer work a score is kept small: each
// thread's copy addresses are fixed per tile up to a constant, the diagonals are stored as byte offsets, and
// eight Philox blocks run round by round with one key schedule.

// A staged slice row: 68 floats from the 4-aligned column at or below its first bucket (17 16-byte copies
// cover the 64 buckets the row can reach). 68 = 4 mod 32: a warp's P2C reads (rows 2q, columns ~g) hit 32
// distinct banks.
constexpr int kForwardSlicePitch = kTile + 4;
constexpr int kForwardSliceChunks = kForwardSlicePitch / 4;
constexpr int kForwardSliceFloats = 2 * kTile * kForwardSlicePitch;  // C2P slice, then P2C slice
// Dynamic shared memory: two buffers of (K, V) tiles, then (staged variant) one of slices: 72 KiB, so three
// CTAs (12 warps) share an SM.
constexpr size_t kForwardKvBytes = 2 * 2 * kTile * kPitch * sizeof(uint16_t);
constexpr size_t kForwardSliceBytes = kForwardSliceFloats * sizeof(float);

// What one key tile's scores read besides K, V and the slices (one per buffer).
struct ForwardTileInfo {
  int diag_bytes[kDiagonals + 1];  // 4 (c(i, j) - window_begin) at i - j = i0 - j0 - 63 + t
  uint32_t key_bits[2];            // bit l of word w: key j0 + 32 w + l is < L and m_j != 0
  float query_term[kTile];         // uniform tiles: C2P[i0 + t, c0]
  float key_term[kTile];           //                P2C[j0 + t, c0]
};

// The next tile's metadata, in flight in registers (Note [forward pipeline]).
struct NextTileLoads {
  int diag = 0;             // diag[threadIdx.x] (threads < 127)
  int slice_diag = 0;       // the first diagonal of the slice row this lane copies (copy_positional)
  int first = 0, last = 0;  // diag[0], diag[126]: equal on a uniform tile
  bool key_kept = false;    // threads < 64: key j0 + threadIdx.x
};

// cp.async of 4 or 16 bytes through L1 (zero-filled when !valid): the slice rows' neighbouring copies share
// 32-byte sectors.
__device__ __forceinline__ void copy_async4(void* shared, const void* global, bool valid) {
  const auto destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int source_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(global),
               "r"(source_bytes));
}
__device__ __forceinline__ void copy_async16_cached(void* shared, const void* global, bool valid) {
  const auto destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(global),
               "r"(source_bytes));
}
__device__ __forceinline__ void wait_all_copies() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// This thread's four 16-byte chunks of a [64, kD] tile of K or V (rows threadIdx / 8 + 16 k, columns
// 8 (threadIdx % 8) ..): the source of tile j0 is a fixed pointer plus j0 rows, the destination a fixed
// offset.
template <typename T>
struct TileCopier {
  const T* origin;  // the tensor: a readable address for the empty copies
  const T* source;  // row threadIdx / 8 of key tile 0
  int row;          // threadIdx / 8
  int64_t pitch;    // elements between rows
  int offset;       // into a [64, kPitch] tile
  __device__ __forceinline__ TileCopier(const T* x, const FlashAttentionParams& p, int64_t b, int64_t h) {
    const int t = static_cast<int>(threadIdx.x);
    row = t / 8;
    pitch = p.features;
    origin = x;
    source = x + (b * p.length + row) * pitch + h * kD + (t % 8) * 8;
    offset = row * kPitch + (t % 8) * 8;
  }
  __device__ __forceinline__ void copy(T* tile, int j0, int length) const {
    const T* first = source + j0 * pitch;
#pragma unroll
    for (int k = 0; k < kTile * 8 / kThreads; ++k) {
      const bool valid = j0 + row + 16 * k < length;
      copy_async16(tile + offset + 16 * k * kPitch, valid ? first + 16 * k * pitch : origin, valid);
    }
  }
};

// Lane l of warp w copies slice row l: C2P row 16 w + l (first bucket diag[16 w + l]) for l < 16, P2C row
// 16 w + l - 16 (first bucket diag[63 - (16 w + l - 16)]) after.
__device__ __forceinline__ int slice_row_diagonal_index(int warp, int lane) {
  return lane < 16 ? warp * 16 + lane : kTile - 1 - (warp * 16 + lane - 16);
}

__device__ __forceinline__ NextTileLoads load_next_tile(const FlashAttentionParams& p, int64_t b, int i0,
                                                        int j0, bool positional) {
  NextTileLoads n;
  const int t = static_cast<int>(threadIdx.x);
  if (t < kTile) n.key_kept = j0 + t < p.length && p.keep[b * p.length + j0 + t] != 0;
  if (positional) {
    if (t < kDiagonals) n.diag = diagonal_at(p, i0, j0, t);
    n.slice_diag = diagonal_at(p, i0, j0, slice_row_diagonal_index(t / 32, t % 32));
    n.first = diagonal_at(p, i0, j0, 0);
    n.last = diagonal_at(p, i0, j0, kDiagonals - 1);
  }
  return n;
}

// Issues the cp.async copies of the next tile's positional data into `info` (uniform terms) or `slices`.
template <bool kStaged>
__device__ __forceinline__ void copy_positional(const FlashAttentionParams& p, const NextTileLoads& n,
                                                ForwardTileInfo& info, float* slices, int64_t head_rows,
                                                int i0, int j0) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const bool query = lane < 16;
  const int t = warp * 16 + lane % 16, row = (query ? i0 : j0) + t;
  const float* scores = query ? p.c2p : p.p2c;
  const bool row_valid = scores != nullptr && row < p.length;
  const float* any_scores = p.c2p != nullptr ? p.c2p : p.p2c;  // a readable address for the empty copies
  if (n.first == n.last) {
    const float* source = row_valid ? scores + (head_rows + row) * p.window_pitch + n.first : any_scores;
    copy_async4(query ? &info.query_term[t] : &info.key_term[t], source, row_valid);
    return;
  }
  if constexpr (kStaged) {
    const int base = n.slice_diag & ~3;
    // Chunks past the table's (4-aligned) width or of rows past L are zero-filled.
    const int chunks = row_valid ? (p.window_pitch - base) / 4 : 0;
    const float* source = row_valid ? scores + (head_rows + row) * p.window_pitch + base : any_scores;
    float* destination = slices + (query ? 0 : kTile * kForwardSlicePitch) + t * kForwardSlicePitch;
#pragma unroll
    for (int chunk = 0; chunk < kForwardSliceChunks; ++chunk) {
      const bool valid = chunk < chunks;
      copy_async16_cached(destination + 4 * chunk, valid ? source + 4 * chunk : any_scores, valid);
    }
  }
}

// Stores the next tile's diagonals and key bits (the loads issued at the top of the current tile).
__device__ __forceinline__ void publish_next_tile(const NextTileLoads& n, ForwardTileInfo& info,
                                                  bool positional) {
  const int t = static_cast<int>(threadIdx.x);
  if (positional && t < kDiagonals) info.diag_bytes[t] = n.diag * static_cast<int>(sizeof(float));
  if (t < kTile) {
    const uint32_t bits = __ballot_sync(0xffffffffu, n.key_kept);
    if (t % 32 == 0) info.key_bits[t / 32] = bits;
  }
}

template <typename T, bool kStaged, bool kDropout>
__global__ void __launch_bounds__(kThreads, kStaged ? 3 : 2)
    flash_attention_forward_kernel(FlashAttentionParams p) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  // [buffer][K, V][kTile * kPitch]; Q goes through buffer 1's K tile before any copy into it.
  T* kv = reinterpret_cast<T*>(dynamic_shared);
  float* slices = reinterpret_cast<float*>(dynamic_shared + kForwardKvBytes);  // [C2P, P2C]
  __shared__ ForwardTileInfo info[2];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int L = p.length;
  const int i0 = static_cast<int>(blockIdx.x) * kTile;
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  const int64_t head_rows = (h * p.batch + b) * L;  // row (b, 0) of head h in the positional scores
  const bool positional = p.c2p != nullptr || p.p2c != nullptr;
  const bool has_c2p = p.c2p != nullptr, has_p2c = p.p2c != nullptr;
  auto kv_tile = [&](int buffer, int which) { return kv + (2 * buffer + which) * kTile * kPitch; };
  const TileCopier<T> k_copier(static_cast<const T*>(p.k), p, b, h);
  const TileCopier<T> v_copier(static_cast<const T*>(p.v), p, b, h);

  // Tile 0's data in flight, Q's fragments read.
  load_tile(kv_tile(1, 0), static_cast<const T*>(p.q), p, b, h, i0);
  k_copier.copy(kv_tile(0, 0), 0, L);
  v_copier.copy(kv_tile(0, 1), 0, L);
  {
    const NextTileLoads first = load_next_tile(p, b, i0, 0, positional);
    if (positional) copy_positional<kStaged>(p, first, info[0], slices, head_rows, i0, 0);
    publish_next_tile(first, info[0], positional);
  }
  commit_async_copies();
  __syncthreads();
  uint32_t qa[4][4];
  load_a_fragments(kv_tile(1, 0), warp * 16, qa);

  const int local_row[2] = {warp * 16 + g, warp * 16 + g + 8};
  bool row_kept[2];
  query_rows_kept(p.keep, b, L, i0, local_row, row_kept);
  const bool warp_rows_kept = __all_sync(0xffffffffu, row_kept[0] && row_kept[1]);
  // A padded query row attends uniformly to every key < L (every score finfo.min in the unfused path): its
  // scores are taken as 0 here and its saved max is finfo.min, so the backward's exp(a - max) is 1 too.
  const float masked_score[2] = {row_kept[0] ? kMasked : 0.0f, row_kept[1] ? kMasked : 0.0f};
  // Note [keep bits in registers]; the launcher checks p < 1.
  const uint32_t keep_threshold = attention_keep_threshold(p.dropout_p);
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float o[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;

  for (int j0 = 0, buffer = 0; j0 < L; j0 += kTile, buffer ^= 1) {
    wait_all_copies();
    __syncthreads();  // this tile's data visible; the other buffer's readers (the previous tile) done
    const ForwardTileInfo& tile = info[buffer];
    const bool has_next = j0 + kTile < L;
    NextTileLoads next;
    if (has_next) {
      k_copier.copy(kv_tile(buffer ^ 1, 0), j0 + kTile, L);
      v_copier.copy(kv_tile(buffer ^ 1, 1), j0 + kTile, L);
      next = load_next_tile(p, b, i0, j0 + kTile, positional);
    }

    float s[8][4];
    product_with_rows(qa, kv_tile(buffer, 0), s);

    // a(i, j) = ((S + C2P) + P2C) / s, then the masks: finfo.min unless m_i m_j, -inf past L. A full tile
    // of kept keys met by kept rows only (no padding there) skips them.
    const uint32_t key_bits[2] = {tile.key_bits[0] >> (2 * q), tile.key_bits[1] >> (2 * q)};
    const int keys_left = L - j0;
    const bool unmasked = warp_rows_kept && (tile.key_bits[0] & tile.key_bits[1]) == ~0u;
    const bool uniform = positional && tile.diag_bytes[0] == tile.diag_bytes[kDiagonals - 1];
    auto mask = [&](float a, int r, int nt, int e) {
      const int kj = nt * 8 + 2 * q + (e & 1);
      const bool kept = row_kept[r] && ((key_bits[nt / 4] >> ((nt % 4) * 8 + (e & 1))) & 1u) != 0;
      return kept ? a : (kj < keys_left ? masked_score[r] : -INFINITY);
    };
    auto scores = [&](auto masking) {
      auto finish = [&](float a, int r, int nt, int e) {
        if constexpr (decltype(masking)::value) {
          return mask(a, r, nt, e);
        } else {
          return a;
        }
      };
      if (!positional) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[nt][e] = finish(s[nt][e] * p.inverse_scale, e / 2, nt, e);
      } else if (uniform) {
        const float query_term[2] = {tile.query_term[local_row[0]], tile.query_term[local_row[1]]};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float key_term = tile.key_term[nt * 8 + 2 * q + (e & 1)];
            s[nt][e] = finish((s[nt][e] + query_term[e / 2] + key_term) * p.inverse_scale, e / 2, nt, e);
          }
      } else if constexpr (kStaged) {
        // Byte addresses: slice row start minus its 4-aligned first bucket, plus the element's bucket.
        const char* staged = reinterpret_cast<const char*>(slices);
        const char* query_row[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          query_row[r] =
              staged + local_row[r] * kForwardSlicePitch * 4 - (tile.diag_bytes[local_row[r]] & ~15);
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int kj = nt * 8 + 2 * q + c;
            const char* key_row =
                staged + (kTile + kj) * kForwardSlicePitch * 4 - (tile.diag_bytes[kTile - 1 - kj] & ~15);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int bucket_bytes = tile.diag_bytes[local_row[r] - kj + kTile - 1];
              float a = s[nt][2 * r + c];
              if (has_c2p) a += *reinterpret_cast<const float*>(query_row[r] + bucket_bytes);
              if (has_p2c) a += *reinterpret_cast<const float*>(key_row + bucket_bytes);
              s[nt][2 * r + c] = finish(a * p.inverse_scale, r, nt, 2 * r + c);
            }
          }
      } else {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e / 2, kj = nt * 8 + 2 * q + (e & 1);
            const int j = min(j0 + kj, L - 1);  // keys past L are masked to -inf
            const int bucket =
                tile.diag_bytes[local_row[r] - kj + kTile - 1] / static_cast<int>(sizeof(float));
            s[nt][e] =
                mask(disentangled_score(p, s[nt][e], head_rows, min(i0 + local_row[r], L - 1), j, bucket), r,
                     nt, e);
          }
      }
    };
    if (unmasked)
      scores(std::false_type{});
    else
      scores(std::true_type{});
    if (has_next) publish_next_tile(next, info[buffer ^ 1], positional);
    // The next tile's slices replace this one's once every warp has read them (no barrier where this tile or
    // the next is uniform: the terms go to the other info buffer).
    if (has_next && positional) {
      if (kStaged && !uniform && next.first != next.last) __syncthreads();
      copy_positional<kStaged>(p, next, info[buffer ^ 1], slices, head_rows, i0, j0 + kTile);
    }
    commit_async_copies();

    // Online softmax in base 2: exp(a - m) = 2^(a log2 e - m log2 e).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[nt][e]);
    float correction[2], scaled_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);          // finite: every tile has a key < L
      correction[r] = exp2_approx((row_max[r] - new_max) * kLog2e);  // 0 on the first tile (-inf)
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
      // finfo.min log2 e overflows: a row whose keys so far are all masked uses -FLT_MAX, so its (masked)
      // scores give 0 and the first real key's correction clears them.
      scaled_max[r] = fmaxf(new_max * kLog2e, -3.40282346638528859811704183484516925e+38f);
    }
    // Once the row maxima settle the corrections are 1: the warp then skips rescaling O.
    if (!__all_sync(0xffffffffu, correction[0] == 1.0f && correction[1] == 1.0f)) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[nt][e] *= correction[e / 2];
    }
    uint32_t keep = ~0u;
    if constexpr (kDropout) keep = draw_keep_bits(p, keep_threshold, bh, i0 + local_row[0], j0);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float pe = exp2_approx(fmaf(s[nt][e], kLog2e, -scaled_max[e / 2]));
        row_sum[e / 2] += pe;
        s[nt][e] = ((keep >> (4 * nt + e)) & 1u) != 0 ? pe * p.kept_scale : 0.0f;
      }
    accumulate_times_tile(s, kv_tile(buffer, 1), o);
  }

  T* context = static_cast<T*>(p.context);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int i = i0 + local_row[r];
    if (i >= L) continue;
    const float inverse = 1.0f / row_sum[r];
    T* out = context + (b * L + i) * p.features + h * kD;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      *reinterpret_cast<uint32_t*>(out + nt * 8 + 2 * q) =
          pack2<T>(o[nt][2 * r] * inverse, o[nt][2 * r + 1] * inverse);
    }
    if (q == 0) {
      p.stats[(bh * L + i) * 2] = row_kept[r] ? row_max[r] : kMasked;
      p.stats[(bh * L + i) * 2 + 1] = inverse;
    }
  }
}

dim3 tile_grid(const FlashAttentionParams& p) {
  return dim3(static_cast<unsigned>((p.length + kTile - 1) / kTile),
              static_cast<unsigned>(p.batch * p.heads));
}

// One CTA per (query tile, b*N + h).
template <typename Kernel>
void launch_forward(Kernel kernel, bool staged, const FlashAttentionParams& p, cudaStream_t stream) {
  // The slices are copied 16 bytes at a time from 4-aligned columns.
  ZT_CHECK(!staged || p.window_pitch % 4 == 0, "flash_attention_forward: window pitch ", p.window_pitch,
           " is not a multiple of 4");
  ZT_CHECK(!p.dropout || p.dropout_p < 1.0f, "flash_attention_forward: dropout p ", p.dropout_p,
           " is not < 1");
  const size_t bytes = kForwardKvBytes + (staged ? kForwardSliceBytes : 0);
  ZT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  // The whole unified L1 as shared memory: three staged CTAs an SM.
  ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     cudaSharedmemCarveoutMaxShared));
  kernel<<<tile_grid(p), kThreads, bytes, stream>>>(p);
}

}  // namespace

void launch_flash_attention_forward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream) {
  cuda_detail::dispatch_half(dtype, "flash_attention_forward", [&](auto tag) {
    using T = decltype(tag);
    // The staged variant (with the slice buffer) where the host said the slices cover every tile and a
    // positional term is on, the gathering one otherwise; dropout or not.
    const bool staged = params.staged && (params.c2p != nullptr || params.p2c != nullptr);
    const auto kernel = staged ? (params.dropout ? flash_attention_forward_kernel<T, true, true>
                                                 : flash_attention_forward_kernel<T, true, false>)
                               : (params.dropout ? flash_attention_forward_kernel<T, false, true>
                                                 : flash_attention_forward_kernel<T, false, false>);
    launch_forward(kernel, staged, params, stream);
    ZT_CUDA_CHECK_LAUNCH("flash_attention_forward");
  });
}

}  // namespace zt::kernels::gpu
