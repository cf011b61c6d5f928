// The stored path's bucket gathers Gc / Gp from the score gradient G (attention_host.cuh: bucket_gathers).
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_host.cuh"
#include "kernels/cuda/bucket_gather.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu::attention_host {
namespace {

using cuda_detail::from_float;

// Block gather: one CTA per (b, h) with G[b, h] staged in shared memory. A gather over G in global memory
// walks G down columns for Gp (L floats apart: one 32-byte sector per lane) and the two gathers read G twice;
// for L up to ~200 the [L, L] block fits in shared memory, so this kernel loads it once with coalesced reads
// and writes both outputs from there (longer rows: the tile gathers below). The sums are the same f32
// additions in the same order as the tile gathers' and the CPU reference's (increasing index). (A forward
// softmax staging the whole [L, W] P2C block of a (b, h) measured 2.3x slower than a row per warp on the
// H200 at B 40, L 128 — one 128 KiB CTA per SM — hence the forward's 32-row tiles with a 16 KiB slab.)

constexpr int kBlockWarps = 8;
constexpr int kBlockThreads = kBlockWarps * 32;
constexpr size_t kMaxBlockSharedBytes = 200 << 10;  // under the 227 KiB opt-in limit of sm_90

// Staged G[b, h] [L, L + 1] of `element` bytes each (f32, or T on the one-distance path), then rel_first and
// rel_last [window_pitch] int32 each, 4-byte aligned.
__host__ __device__ size_t gather_block_staged_bytes(const AttentionShape& s, size_t element) {
  return (static_cast<size_t>(s.length * (s.length + 1)) * element + 3) / 4 * 4;
}
size_t gather_block_shared_bytes(const AttentionShape& s, size_t element) {
  return gather_block_staged_bytes(s, element) + static_cast<size_t>(2 * s.window_pitch) * sizeof(int32_t);
}

// Both bucket gathers from one staged G[b, h] ([L, L + 1] pitch: column walks
// stride L + 1, conflict-free): a warp per position (query i for Gc, key j for Gp), lanes along r, so each
// output row is written coalesced; padding columns r >= W get zeros. gc / gp may be null when that term is
// off. 32-bit loop indices and no divisions: at L = 128 every bucket holds one relative distance, so the
// sums are single loads and a 64-bit e / W, e % W per output made the first version of this kernel
// instruction-bound (293 us per layer at B 40, ncu on the H200).
//
// kOneDistance (RelativeIndexTables::one_distance_per_bucket: every bucket of the window holds exactly one
// i - j, as at L = 128 with DeBERTa's log buckets, whose linear range is 128 wide): each sum has at most one
// term, so an output is one bounds test and one load — 0.0f + G[i, j], the single-term loop's value (the add
// turns -0 into +0 as the loop does), or 0 outside the block. ncu on the H200 (bs 40, L 128): the general
// loops made the kernel instruction-bound (94 M instructions, 152 us per layer, DRAM at 23 %).
//
// G is what the kernel reads and stages: f32, or on the one-distance path with 16-bit storage G in T (the
// softmax backward's 16-bit copy, which the dQ / dK GEMMs read too): a one-term sum rounded to T is T(G)
// either way (T -> f32 -> T is exact; 0.0f + still turns -0 into +0), so the outputs keep their bits while
// the kernel reads half the bytes, stages half the shared memory and the softmax backward skips G in f32.
template <typename T, typename G, bool kOneDistance>
__global__ void __launch_bounds__(kBlockThreads)
    bucket_gather_block_kernel(const G* __restrict__ grad, T* __restrict__ gc, T* __restrict__ gp,
                               const int32_t* __restrict__ rel_first, const int32_t* __restrict__ rel_last,
                               AttentionShape s) {
  static_assert(kOneDistance || std::is_same_v<G, float>, "sums of several terms are taken in f32");
  extern __shared__ __align__(16) unsigned char gather_shared[];
  G* staged_grad = reinterpret_cast<G*>(gather_shared);  // [L, L + 1], then first_of, last_of [window_pitch]
  const int L = static_cast<int>(s.length), W = static_cast<int>(s.window);
  const int pitch = L + 1, out_pitch = static_cast<int>(s.window_pitch);
  int* first_of = reinterpret_cast<int*>(gather_shared + gather_block_staged_bytes(s, sizeof(G)));
  int* last_of = first_of + out_pitch;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t bh = blockIdx.x, h = bh % s.heads, b = bh / s.heads;
  const G* g = grad + bh * L * L;
  for (int i = warp; i < L; i += kBlockWarps) {
    for (int j = lane; j < L; j += 32) staged_grad[i * pitch + j] = g[i * L + j];
  }
  for (int r = static_cast<int>(threadIdx.x); r < W; r += kBlockThreads) {
    first_of[r] = rel_first[r];
    last_of[r] = rel_last[r];
  }
  __syncthreads();
  const int64_t out_rows = (h * s.batch + b) * L;  // row (b, 0) of head h in [N, B*L, window_pitch]
  for (int position = warp; position < L; position += kBlockWarps) {
    T* gc_row = gc != nullptr ? gc + (out_rows + position) * out_pitch : nullptr;
    T* gp_row = gp != nullptr ? gp + (out_rows + position) * out_pitch : nullptr;
    for (int r = lane; r < out_pitch; r += 32) {
      float sum_c = 0.0f, sum_p = 0.0f;
      if constexpr (kOneDistance) {
        if (r < W) {
          const float2 sums = cuda_detail::one_distance_gathers(staged_grad, pitch, L, position, first_of[r],
                                                                gc_row != nullptr, gp_row != nullptr);
          sum_c = sums.x;
          sum_p = sums.y;
        }
      } else if (r < W) {
        const int first = first_of[r], last = last_of[r];
        if (gc_row != nullptr) {  // Gc[(b, i), r] = sum over j with c(i, j) = r of G[i, j]
          const int i = position;
          const int j_begin = max(i - last, 0), j_end = min(i - first, L - 1);
          for (int j = j_begin; j <= j_end; ++j) sum_c += staged_grad[i * pitch + j];
        }
        if (gp_row != nullptr) {  // Gp[(b, j), r] = sum over i with c(i, j) = r of G[i, j]
          const int j = position;
          const int i_begin = max(j + first, 0), i_end = min(j + last, L - 1);
          for (int i = i_begin; i <= i_end; ++i) sum_p += staged_grad[i * pitch + j];
        }
      }
      if (gc_row != nullptr) gc_row[r] = from_float<T>(sum_c);
      if (gp_row != nullptr) gp_row[r] = from_float<T>(sum_p);
    }
  }
}

// Tile gathers, for lengths whose [L, L] block does not fit in shared memory (L > ~200):
//   Gc[h, (b,i), r] = sum_{j : c(i,j) = r} G[b,h,i,j]  (kByQuery) — j runs over i - rel_last .. i -
//   rel_first; Gp[h, (b,j), r] = sum_{i : c(i,j) = r} G[b,h,i,j]  (!kByQuery) — i runs over j + rel_first ..
//   j + rel_last.
// One CTA per (b, h, `lines` lines of G[b, h]), a line being a row i (Gc) or a column j (Gp): the CTA stages
// its lines [lines, L] in f32 (a column as a contiguous line; G read along rows either way, 128 bytes a warp
// for a tile of 32 columns), then a warp per line with lanes along r sums each bucket's range in increasing
// index order from shared memory and writes the output row coalesced. Its predecessor, one thread per output
// over G in global memory, walked G's columns for Gp (a 32-byte sector per term) and re-read every term of a
// multi-distance bucket from HBM: 336-359 us per gather and layer at B 8, L 512 on the H200 (ncu), the step's
// second largest segment. The sums are the same f32 additions in the same order. The line pitch is odd, so
// lane t's column store at t * pitch + i and a warp's row reads fall in distinct banks.
int gather_tile_lines(int64_t length) {
  return length <= 512 ? 32 : 16;
}
int gather_tile_pitch(int64_t length) {
  return static_cast<int>(length % 2 == 0 ? length + 1 : length + 2);
}
size_t gather_tile_shared_bytes(const AttentionShape& s) {
  return (static_cast<size_t>(gather_tile_lines(s.length)) *
              static_cast<size_t>(gather_tile_pitch(s.length)) +
          static_cast<size_t>(2 * s.window_pitch)) *
         sizeof(float);
}

constexpr int kGatherLoadBatch = 8;
// vector: L % 4 == 0 and G 16-byte aligned (then every tile's first line, a multiple of 16, is a quad too).
template <typename T, bool kByQuery>
__global__ void __launch_bounds__(kBlockThreads)
    bucket_gather_tile_kernel(const float* __restrict__ grad, T* __restrict__ out,
                              const int32_t* __restrict__ rel_first, const int32_t* __restrict__ rel_last,
                              AttentionShape s, int lines, int pitch, bool vector) {
  extern __shared__ __align__(16) unsigned char gather_shared[];
  float* staged = reinterpret_cast<float*>(gather_shared);  // [lines, pitch], then first_of, last_of
  const int L = static_cast<int>(s.length), W = static_cast<int>(s.window);
  const int out_pitch = static_cast<int>(s.window_pitch);
  int* first_of = reinterpret_cast<int*>(staged + lines * pitch);
  int* last_of = first_of + out_pitch;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t bh = blockIdx.x, h = bh % s.heads, b = bh / s.heads;
  const int line0 = static_cast<int>(blockIdx.y) * lines;
  const int count = min(lines, L - line0);
  const float* g = grad + bh * L * L;
  if (vector) {
    // The tile as float4s of G, kGatherLoadBatch loaded by each thread before it stores any (the staging is
    // bound by loads in flight: one 4-byte load a lane at a time ran the kernel at a quarter of HBM speed):
    // Gc [count rows, L / 4 quads], Gp [L rows, count / 4 quads] (quad c of row a = G[a, line0 + 4 c ..]).
    const int quads_per_row = kByQuery ? L / 4 : count / 4;
    const int quads = quads_per_row * (kByQuery ? count : L);
    for (int first = static_cast<int>(threadIdx.x); first < quads;
         first += kBlockThreads * kGatherLoadBatch) {
      float4 loaded[kGatherLoadBatch];
#pragma unroll
      for (int u = 0; u < kGatherLoadBatch; ++u) {
        const int f = first + u * kBlockThreads;
        if (f >= quads) break;
        const int a = f / quads_per_row, c = f % quads_per_row;
        const int64_t offset = kByQuery ? static_cast<int64_t>(line0 + a) * L + 4 * c
                                        : static_cast<int64_t>(a) * L + line0 + 4 * c;
        loaded[u] = *reinterpret_cast<const float4*>(g + offset);
      }
#pragma unroll
      for (int u = 0; u < kGatherLoadBatch; ++u) {
        const int f = first + u * kBlockThreads;
        if (f >= quads) break;
        const int a = f / quads_per_row, c = f % quads_per_row;
        const float values[4] = {loaded[u].x, loaded[u].y, loaded[u].z, loaded[u].w};
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          if constexpr (kByQuery) {
            staged[a * pitch + 4 * c + q] = values[q];
          } else {
            staged[(4 * c + q) * pitch + a] = values[q];
          }
        }
      }
    }
  } else if constexpr (kByQuery) {  // rows line0 .. line0 + count - 1, read along j
    for (int t = warp; t < count; t += kBlockWarps) {
      const float* row = g + static_cast<int64_t>(line0 + t) * L;
      for (int j = lane; j < L; j += 32) staged[t * pitch + j] = row[j];
    }
  } else {  // columns line0 .. line0 + count - 1: row i's piece of them, lanes along the columns
#pragma unroll 4
    for (int i = warp; i < L; i += kBlockWarps) {
      const float* row = g + static_cast<int64_t>(i) * L + line0;
      for (int t = lane; t < count; t += 32) staged[t * pitch + i] = row[t];
    }
  }
  for (int r = static_cast<int>(threadIdx.x); r < W; r += kBlockThreads) {
    first_of[r] = rel_first[r];
    last_of[r] = rel_last[r];
  }
  __syncthreads();
  for (int t = warp; t < count; t += kBlockWarps) {
    const int position = line0 + t;  // query i (Gc) or key j (Gp)
    const float* line = staged + t * pitch;
    T* out_row = out + ((h * s.batch + b) * L + position) * out_pitch;
    for (int r = lane; r < out_pitch; r += 32) {
      float sum = 0.0f;
      if (r < W) {  // padding columns r >= W get zeros: the positional GEMMs read them
        const int first = first_of[r], last = last_of[r];
        const int begin = kByQuery ? max(position - last, 0) : max(position + first, 0);
        const int end = kByQuery ? min(position - first, L - 1) : min(position + last, L - 1);
        for (int x = begin; x <= end; ++x) sum += line[x];
      }
      out_row[r] = from_float<T>(sum);
    }
  }
}

}  // namespace

bool use_gather_block_kernel(const AttentionShape& s) {
  return gather_block_shared_bytes(s, sizeof(float)) <= kMaxBlockSharedBytes;
}

void bucket_gathers(const AttentionShape& s, DType T, const float* grad, const void* lowp, bool read_lowp,
                    void* gc, void* gp, const RelativeIndexTables& tables, const char* op,
                    cudaStream_t stream) {
  const int64_t L = s.length;
  dispatch_storage(T, op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    if (use_gather_block_kernel(s)) {
      if (read_lowp) {
        const size_t shared = gather_block_shared_bytes(s, sizeof(S));
        allow_shared_bytes(bucket_gather_block_kernel<S, S, true>, shared);
        bucket_gather_block_kernel<S, S, true>
            <<<static_cast<unsigned>(s.batch * s.heads), kBlockThreads, shared, stream>>>(
                static_cast<const S*>(lowp), static_cast<S*>(gc), static_cast<S*>(gp), tables.rel_first,
                tables.rel_last, s);
      } else {
        const size_t shared = gather_block_shared_bytes(s, sizeof(float));
        const auto kernel = tables.one_distance_per_bucket ? bucket_gather_block_kernel<S, float, true>
                                                           : bucket_gather_block_kernel<S, float, false>;
        allow_shared_bytes(kernel, shared);
        kernel<<<static_cast<unsigned>(s.batch * s.heads), kBlockThreads, shared, stream>>>(
            grad, static_cast<S*>(gc), static_cast<S*>(gp), tables.rel_first, tables.rel_last, s);
      }
      ZT_CUDA_CHECK_LAUNCH("attention_bucket_gather_block");
      return;
    }
    const int lines = gather_tile_lines(L), pitch = gather_tile_pitch(L);
    const size_t shared = gather_tile_shared_bytes(s);
    const bool vector = L % 4 == 0 && aligned_to(grad, 16);
    const dim3 grid(static_cast<unsigned>(s.batch * s.heads), static_cast<unsigned>((L + lines - 1) / lines));
    auto launch_tiles = [&](auto by_query, S* out) {  // Gc (by query) or Gp
      const auto kernel = bucket_gather_tile_kernel<S, decltype(by_query)::value>;
      allow_shared_bytes(kernel, shared);
      kernel<<<grid, kBlockThreads, shared, stream>>>(grad, out, tables.rel_first, tables.rel_last, s, lines,
                                                      pitch, vector);
      ZT_CUDA_CHECK_LAUNCH("attention_bucket_gather_tile");
    };
    if (s.c2p) launch_tiles(std::true_type{}, static_cast<S*>(gc));
    if (s.p2c) launch_tiles(std::false_type{}, static_cast<S*>(gp));
  });
}

}  // namespace zt::kernels::gpu::attention_host
