// Device building blocks of the flash disentangled-attention kernels (flash_disentangled_attention.cu):
// tensor-core fragments, tile loads, the positional-score staging and the bucket scatter (each kernel draws
// its dropout keep bits in its own fragment layout). Internal to kernels/cuda.
//
// Tensor cores through mma.sync.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16"): with g = lane / 4
// and q = lane % 4 a thread holds
//   A (16 x 16, row-major)  a0 = (g, 2q..2q+1)  a1 = (g+8, 2q..)  a2 = (g, 2q+8..)  a3 = (g+8, 2q+8..)
//   B (16 x 8, "col")        b0 = (k 2q..2q+1, n g)                b1 = (k 2q+8..2q+9, n g)
//   C (16 x 8, f32)          c0, c1 = (g, 2q..2q+1)               c2, c3 = (g+8, 2q..2q+1)
// so the C fragments of two neighbouring 8-column tiles are, rounded to T, the A fragment of a 16-deep
// product (flash attention's register reuse of P). Each warp owns 16 rows of a 64-row tile.
//
// Exponentials by __expf (ex2.approx of x log2 e; a few ulp where it matters, exp(a - max) in [0, 1]), the
// same in forward and backward, so P recomputed from the statistics is the forward's P.
//
// Shared memory: 64 x 64 T tiles with rows padded to 72 elements (144 bytes: 16-byte aligned rows; the
// 32-bit fragment loads of a warp, lanes (g, q) at word 36 g + q, hit 32 distinct banks, and the 8 row
// addresses of an ldmatrix phase 8 distinct 4-bank groups).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/philox.h"

namespace zt::kernels::gpu::flash_tiles {

using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kTile = kFlashTile;
constexpr int kD = kFlashHeadSize;
constexpr int kThreads = 128;   // 4 warps x 16 rows
constexpr int kPitch = kD + 8;  // T elements per shared row
constexpr int kGradPitch = kTile + 1;
constexpr int kDiagonals = 2 * kTile - 1;  // i - j values one (query tile, key tile) pair reaches
constexpr float kMasked = -3.40282346638528859811704183484516925e+38f;  // finfo(f32).min, as unfused

// ---- fragments -----------------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two 16-bit values (lo at the lower address) as one 32-bit register.
template <typename T>
__device__ __forceinline__ uint32_t pair(T lo, T hi) {
  const uint16_t l = *reinterpret_cast<const uint16_t*>(&lo), h = *reinterpret_cast<const uint16_t*>(&hi);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

// c += A B for one m16n8k16 tile, f32 accumulate. Volatile, as the ldmatrix loads are: the two keep their
// order, so a product's loads are not all hoisted ahead of its multiplies (64 registers at once).
template <typename T>
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ uint32_t word_at(const void* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The A fragments of rows row0 .. row0 + 15 of a [64, kPitch] tile, all four 16-deep chunks of d = 64.
template <typename T>
__device__ __forceinline__ void load_a_fragments(const T* tile, int row0, uint32_t a[4][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const T* top = tile + (row0 + g) * kPitch + kc * 16 + 2 * q;
    const T* bottom = top + 8 * kPitch;
    a[kc][0] = word_at(top);
    a[kc][1] = word_at(bottom);
    a[kc][2] = word_at(top + 8);
    a[kc][3] = word_at(bottom + 8);
  }
}

// ldmatrix (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lanes 8m .. 8m + 7 give the row
// addresses of 8 x 8 matrix m (16-byte rows); lane (g, q) receives, of matrix m, row g columns 2q, 2q + 1
// (plain) or rows 2q, 2q + 1 of column g (.trans), as one 32-bit register. Rows 144 bytes apart hit 8
// distinct 4-bank groups: no conflicts. The lane's address is one register plus a constant byte offset in
// the instruction (a register per unrolled address would stay live across the key loop).
template <int kOffset>
__device__ __forceinline__ void load_matrices(uint32_t r[4], uint32_t lane_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4 + %5];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(lane_address), "n"(kOffset));
}
template <int kOffset>
__device__ __forceinline__ void load_matrices_transposed(uint32_t r[4], uint32_t lane_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4 + %5];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(lane_address), "n"(kOffset));
}
template <int kCount, typename F>
__device__ __forceinline__ void unrolled(F&& f) {
  [&]<int... kI>(std::integer_sequence<int, kI...>) {
    (f(std::integral_constant<int, kI>{}), ...);
  }
  (std::make_integer_sequence<int, kCount>{});
}
template <typename T>
__device__ __forceinline__ uint32_t shared_address(const T* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// S[16 rows, 64 cols] = A (this warp's rows, d = 64 deep) times rows^T of a [64, kPitch] tile (column n of
// the product is row n of the tile). One ldmatrix.x4 gives the B fragments (b0 = k 2q.., b1 = k 2q + 8..,
// n = g) of two 16-deep chunks: matrix m is rows 8 nt .. 8 nt + 7, columns 32 kp + 8m ...
template <typename T>
__device__ __forceinline__ void product_with_rows(const uint32_t a[4][4], const T* tile, float s[8][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const uint32_t lane_address = shared_address(tile + (lane % 8) * kPitch + (lane / 8) * 8);
  unrolled<8>([&](auto nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    unrolled<2>([&](auto kp) {
      uint32_t b[4];
      load_matrices<static_cast<int>(sizeof(T)) * (nt * 8 * kPitch + kp * 32)>(b, lane_address);
      mma<T>(s[nt], a[2 * kp], b[0], b[1]);
      mma<T>(s[nt], a[2 * kp + 1], b[2], b[3]);
    });
  });
}

// The same product with A read from shared memory too (rows row0 .. row0 + 15 of a [64, kPitch] tile, by
// ldmatrix.x4: matrix m is rows 8 (m % 2) .., columns 8 (m / 2) .. of a 16-deep chunk), for kernels whose
// fixed operand stays in shared memory rather than in 16 registers for the whole loop. kCount 8-column
// tiles from column 8 kFirst: s[n] is columns 8 (kFirst + n) .. (a part of the product: fewer registers).
template <typename T, int kFirst = 0, int kCount = 8>
__device__ __forceinline__ void product_with_rows(const T* a_tile, int row0, const T* tile,
                                                  float s[kCount][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8;
  const uint32_t a_address = shared_address(a_tile + (row0 + (m % 2) * 8 + lane % 8) * kPitch + (m / 2) * 8);
  const uint32_t lane_address = shared_address(tile + (lane % 8) * kPitch + (lane / 8) * 8);
#pragma unroll
  for (int n = 0; n < kCount; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
  unrolled<2>([&](auto kp) {
    uint32_t a[2][4];
    load_matrices<static_cast<int>(sizeof(T)) * 32 * kp>(a[0], a_address);
    load_matrices<static_cast<int>(sizeof(T)) * (32 * kp + 16)>(a[1], a_address);
    unrolled<kCount>([&](auto n) {
      uint32_t b[4];
      load_matrices<static_cast<int>(sizeof(T)) * ((kFirst + n) * 8 * kPitch + kp * 32)>(b, lane_address);
      mma<T>(s[n], a[0], b[0], b[1]);
      mma<T>(s[n], a[1], b[2], b[3]);
    });
  });
}

// acc[16 rows, 64 features] += A times a [64 keys, kPitch] tile (row = key, column = feature), with A
// (16 x 64 keys) given as 4 fragments of 16 keys each, already rounded to T. One ldmatrix.x4.trans gives the
// B fragments of two 8-feature tiles: matrix m holds keys 16 kc + 8 (m % 2) .. and features 8 (np + m / 2)
// .., lane (g, q) receiving keys 2q, 2q + 1 of feature g.
template <typename T, int kKeyChunk>
__device__ __forceinline__ void accumulate_key_chunk(const uint32_t a[4], uint32_t lane_address,
                                                     float acc[8][4]) {
  unrolled<4>([&](auto pair_index) {
    constexpr int np = 2 * pair_index;
    uint32_t b[4];
    load_matrices_transposed<static_cast<int>(sizeof(T)) * (kKeyChunk * 16 * kPitch + np * 8)>(b,
                                                                                               lane_address);
    mma<T>(acc[np], a, b[0], b[1]);
    mma<T>(acc[np + 1], a, b[2], b[3]);
  });
}
template <typename T>
__device__ __forceinline__ uint32_t key_chunk_address(const T* tile) {
  const int lane = static_cast<int>(threadIdx.x) % 32, m = lane / 8;
  return shared_address(tile + ((m % 2) * 8 + lane % 8) * kPitch + (m / 2) * 8);
}

// acc[16 rows, 64 features] += P (16 x 64 keys, as 8 C tiles in f32, rounded to T here) times a [64 keys,
// kPitch] tile.
template <typename T>
__device__ __forceinline__ void accumulate_times_tile(const float p[8][4], const T* tile, float acc[8][4]) {
  const uint32_t lane_address = key_chunk_address(tile);
  unrolled<4>([&](auto kc) {
    uint32_t a[4];
    a[0] = pack2<T>(p[2 * kc][0], p[2 * kc][1]);
    a[1] = pack2<T>(p[2 * kc][2], p[2 * kc][3]);
    a[2] = pack2<T>(p[2 * kc + 1][0], p[2 * kc + 1][1]);
    a[3] = pack2<T>(p[2 * kc + 1][2], p[2 * kc + 1][3]);
    accumulate_key_chunk<T, kc>(a, lane_address, acc);
  });
}

// The same product with A the transpose of an f32 block of 64 keys in shared memory, rounded to T here:
// A[r][k] = block[(k / 16) chunk_stride + (k % 16) pitch + row0 + r] (the backward's G, stored by key, times
// K for dQ; chunk_stride = 16 pitch for a plain [64 keys, pitch] block).
template <typename T>
__device__ __forceinline__ void accumulate_transposed_times_tile(const float* block, int pitch,
                                                                 int chunk_stride, int row0, const T* tile,
                                                                 float acc[8][4]) {
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, q = lane % 4;
  const uint32_t lane_address = key_chunk_address(tile);
  unrolled<4>([&](auto kc) {
    const float* column = block + kc * chunk_stride + 2 * q * pitch + row0 + g;  // A[g][16 kc + 2q]
    uint32_t a[4];
    a[0] = pack2<T>(column[0], column[pitch]);
    a[1] = pack2<T>(column[8], column[pitch + 8]);
    a[2] = pack2<T>(column[8 * pitch], column[9 * pitch]);
    a[3] = pack2<T>(column[8 * pitch + 8], column[9 * pitch + 8]);
    accumulate_key_chunk<T, kc>(a, lane_address, acc);
  });
}

// ---- exponentials --------------------------------------------------------------------------------------

constexpr float kLog2e = 1.4426950408889634f;
// exp(a - m) as 2^(a log2 e - m log2 e), one FFMA and one MUFU.EX2 (__expf is ex2.approx of (a - m) log2 e):
// the backward's __expf(a - m) recomputes P from the saved (m, 1 / l) to within a few ulp of the exponent,
// far inside the bf16/f16 tolerances the tests hold both directions to.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- dropout --------------------------------------------------------------------------------------------

// Note [keep bits in registers]: bit 4 nt + e of the result keeps this thread's element s[nt][e], i.e.
// P[i0 + 16 w + g + 8 (e / 2), j0 + 8 nt + 2 q + e % 2] (lane = 4 g + q), by the unfused path's draw
// (philox.h's attention draw: rows padded to 8 keys, key j of row r is half e % 8 of Philox block e / 8, e =
// r pitch + j). A block is the 8 keys 8 nt .. + 7 of one row, shared by the 4 lanes of a quad (lane q needs
// halves 2 q, 2 q + 1): the quad's 16 blocks (2 rows x 8 nt) are drawn 4 a lane (lane q: nt = q and q + 4 of
// both rows, round by round by philox_blocks), each lane's 4 x 8 keep bits are gathered by the quad (4
// shuffles) and every lane picks its 2 bits of each block: one block per 8 elements. Keys past L get bits
// nobody reads.
__device__ __forceinline__ uint32_t draw_keep_bits(const FlashAttentionParams& p, uint32_t threshold,
                                                   int64_t bh, int row0, int j0) {
  const int lane = static_cast<int>(threadIdx.x) % 32, q = lane % 4;
  const uint64_t L = static_cast<uint64_t>(p.length), pitch = attention_row_pitch(L);
  // Block n of this lane: row row0 + 8 (n % 2), key tile nt = q + 4 (n / 2).
  const uint64_t row_block = ((static_cast<uint64_t>(bh) * L + static_cast<uint64_t>(row0)) * pitch + j0) / 8;
  const uint64_t block[4] = {row_block + q, row_block + pitch + q, row_block + 4 + q,
                             row_block + pitch + 4 + q};
  PhiloxCounter blocks[4];
  philox_blocks(p.seed, p.site_id, block, blocks);
  // Byte n of drawn: block n's keep bits, bit k = key 8 nt + k.
  uint32_t drawn = 0;
#pragma unroll
  for (int n = 0; n < 4; ++n) drawn |= attention_keep_bits(blocks[n], threshold) << (8 * n);
  const int quad = lane & ~3;
  uint32_t bits = 0;
#pragma unroll
  for (int source = 0; source < 4; ++source) {
    // Lane `source` drew nt = source and source + 4; this lane's keys are bits 2 q, 2 q + 1 of each byte.
    const uint32_t theirs = __shfl_sync(0xffffffffu, drawn, quad + source) >> (2 * q);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      const int nt = source + 4 * (n / 2), r = n % 2;
      bits |= ((theirs >> (8 * n)) & 3u) << (4 * nt + 2 * r);
    }
  }
  return bits;
}

// Whether this thread's two query rows i0 + local_row[r] (warp w: 16 w + g, + 8) are < L with m_i != 0.
__device__ __forceinline__ void query_rows_kept(const uint8_t* keep, int64_t b, int L, int i0,
                                                const int local_row[2], bool row_kept[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + local_row[r];
    row_kept[r] = i < L && keep[b * L + i] != 0;
  }
}

// ---- tiles ---------------------------------------------------------------------------------------------

// Rows first .. first + 63 of head h of a [B, L, D] tensor (batch b) into a [64, kPitch] tile; rows >= L are
// zero. 16-byte loads (the host checks the alignment).
template <typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* x, const FlashAttentionParams& p, int64_t b,
                                          int64_t h, int first) {
  // Every load of the thread issued before its stores (a global load after a store through a generic
  // pointer waits for it: one round trip each otherwise).
  constexpr int kPerThread = kTile * 8 / kThreads;
  uint4 value[kPerThread];
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int chunk = static_cast<int>(threadIdx.x) + k * kThreads, r = chunk / 8, c = chunk % 8;
    value[k] = make_uint4(0, 0, 0, 0);
    if (first + r < p.length)
      value[k] =
          *reinterpret_cast<const uint4*>(x + (b * p.length + first + r) * p.features + h * kD + c * 8);
  }
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int chunk = static_cast<int>(threadIdx.x) + k * kThreads, r = chunk / 8, c = chunk % 8;
    *reinterpret_cast<uint4*>(tile + r * kPitch + c * 8) = value[k];
  }
}

// The same rows by cp.async (16 bytes a copy, zero-filled past L), so a tile's loads run while the previous
// tile is computed; the caller commits the group and waits for it (cp.async.wait_group) before a barrier.
__device__ __forceinline__ void copy_async16(void* shared, const void* global, bool valid) {
  const auto destination = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(global),
               "r"(source_bytes));
}
__device__ __forceinline__ void commit_async_copies() {
  asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most one committed group (the newest) is still in flight.
__device__ __forceinline__ void wait_all_but_newest_copies() {
  asm volatile("cp.async.wait_group 1;\n" ::);
}
// Rows first .. first + kRows - 1 of head h of a [B, L, D] tensor into a [kRows, kPitch] tile by cp.async, 16
// bytes a thread a step over kCopyThreads threads; rows at or past L are zero-filled.
template <typename T, int kRows = kTile, int kCopyThreads = kThreads>
__device__ __forceinline__ void prefetch_tile(T* tile, const T* x, const FlashAttentionParams& p, int64_t b,
                                              int64_t h, int first) {
  for (int chunk = static_cast<int>(threadIdx.x); chunk < kRows * 8; chunk += kCopyThreads) {
    const int r = chunk / 8, c = chunk % 8;
    const bool valid = first + r < p.length;
    const T* source = valid ? x + (b * p.length + first + r) * p.features + h * kD + c * 8 : x;
    copy_async16(tile + r * kPitch + c * 8, source, valid);
  }
}

// c(i,j) - window_begin for i - j = i0 - j0 - 63 + t. Where |i - j| >= L (no pair of the tile with i, j < L)
// the nearest reachable diagonal's bucket: the table stays monotone, so diagonal_at(.., 0) == (.., 126) means
// one bucket for every pair of the tile.
__device__ __forceinline__ int diagonal_at(const FlashAttentionParams& p, int i0, int j0, int t) {
  const int r = min(max(i0 - j0 - (kTile - 1) + t, 1 - p.length), p.length - 1);
  return p.diagonal[r + p.length - 1];
}
// diag[t] = diagonal_at(p, i0, j0, t) for the tile's 127 diagonals.
__device__ __forceinline__ void load_diagonals(int* diag, const FlashAttentionParams& p, int i0, int j0) {
  for (int t = static_cast<int>(threadIdx.x); t < kDiagonals; t += kThreads)
    diag[t] = diagonal_at(p, i0, j0, t);
}

// The raw score a(i, j) (before the mask) from the content product s.
__device__ __forceinline__ float disentangled_score(const FlashAttentionParams& p, float s, int64_t head_rows,
                                                    int i, int j, int c) {
  float a = s;
  if (p.c2p != nullptr) a += p.c2p[(head_rows + i) * p.window_pitch + c];
  if (p.p2c != nullptr) a += p.p2c[(head_rows + j) * p.window_pitch + c];
  return a * p.inverse_scale;
}

// The positional scores one tile reads, staged in shared memory (FlashAttentionParams::staged): row t of
// c2p_slice holds C2P[i0 + t, diag[t] .. diag[t] + 63], the table rows query i0 + t meets over the tile's
// keys (c(i, j) runs over diag[t .. t + 63], at most 64 consecutive rows); row u of p2c_slice holds
// P2C[j0 + u, diag[63 - u] ..]. Coalesced loads of 64 floats per row instead of a gather per score.
constexpr int kSlicePitch = kTile + 1;
constexpr size_t kStagedBytes = 2 * kTile * kSlicePitch * sizeof(float);
// The backward kernels' two fixed tiles (16-bit T) ahead of the staged slices in dynamic shared memory.
constexpr size_t kFixedTileBytes = 2 * kTile * kPitch * 2;

// kBatch loads in flight a thread before their stores (a load-store loop waits out each L2 round trip).
template <int kBatch = 8>
__device__ __forceinline__ void stage_positional(float* staged, const FlashAttentionParams& p,
                                                 const int* diag, int64_t head_rows, int i0, int j0) {
  constexpr int kPerThread = kTile * kTile / kThreads;  // 32 elements of each slice
  static_assert(kPerThread % kBatch == 0);
  for (int slice = 0; slice < 2; ++slice) {
    const float* scores = slice == 0 ? p.c2p : p.p2c;
    if (scores == nullptr) continue;
    float* out = staged + slice * kTile * kSlicePitch;
    const int first = slice == 0 ? i0 : j0;
    for (int batch = 0; batch < kPerThread; batch += kBatch) {
      float value[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int idx = static_cast<int>(threadIdx.x) + (batch + k) * kThreads;
        const int t = idx / kTile, u = idx % kTile;
        const int row = first + t, c = diag[slice == 0 ? t : kTile - 1 - t] + u;
        value[k] =
            (row < p.length && c < p.window_pitch) ? scores[(head_rows + row) * p.window_pitch + c] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kBatch; ++k) {
        const int idx = static_cast<int>(threadIdx.x) + (batch + k) * kThreads;
        out[(idx / kTile) * kSlicePitch + idx % kTile] = value[k];
      }
    }
  }
}

// a(i, j) from the staged slices, for query i0 + qi and key j0 + kj.
__device__ __forceinline__ float staged_score(const FlashAttentionParams& p, const float* staged,
                                              const int* diag, float s, int qi, int kj) {
  const int c = diag[qi - kj + kTile - 1];
  float a = s;
  if (p.c2p != nullptr) a += staged[qi * kSlicePitch + c - diag[qi]];
  if (p.p2c != nullptr) a += staged[kTile * kSlicePitch + kj * kSlicePitch + c - diag[kTile - 1 - kj]];
  return a * p.inverse_scale;
}

// A tile whose 127 diagonals share one bucket c0 (every tile farther off the diagonal than the buckets
// reach): the positional terms are one number per query, C2P[i, c0], and one per key, P2C[j, c0].
__device__ __forceinline__ void stage_uniform_terms(float* query_term, float* key_term,
                                                    const FlashAttentionParams& p, int64_t head_rows, int i0,
                                                    int j0, int c0) {
  const int t = static_cast<int>(threadIdx.x) % kTile;
  if (static_cast<int>(threadIdx.x) < kTile) {
    const int i = i0 + t;
    query_term[t] = (p.c2p != nullptr && i < p.length) ? p.c2p[(head_rows + i) * p.window_pitch + c0] : 0.0f;
  } else if (static_cast<int>(threadIdx.x) < 2 * kTile) {
    const int j = j0 + t;
    key_term[t] = (p.p2c != nullptr && j < p.length) ? p.p2c[(head_rows + j) * p.window_pitch + c0] : 0.0f;
  }
}

// a(i, j) on such a tile, summed in the same order ((S + C2P) + P2C) / s (an absent term adds +0).
__device__ __forceinline__ float uniform_score(const FlashAttentionParams& p, const float* query_term,
                                               const float* key_term, float s, int qi, int kj) {
  return (s + query_term[qi] + key_term[kj]) * p.inverse_scale;
}

// Adds a tile's score gradients into rows of Gc (by query) or Gp (by key): out row `row` (global index
// into the [N, B*L, Wp] buffer, or < 0 to skip) gets sum over the tile's 64 columns `col` of grad[local][col]
// bucketed by diag[t(local, col)]. Runs of equal buckets are summed in column order, then added by a
// reduction (red.global.add: the thread issues it and goes on, no round trip for the old value). One CTA
// owns each out row and, within a tile, one thread each (row, bucket); the tiles are ordered by barriers
// (and one thread's additions to one address by program order), so the order of the additions is fixed.
// stride: the distance between the row's consecutive columns in grad_row.
// out[bucket] += value (red.global.add.f32, atomicAdd's reduction) where condition holds. ptxas makes a
// predicated reduction a branch around it (BSSY / BRA / BSYNC) either way; the branch written in the PTX
// keeps the address inside it, formed only where a lane adds, by one wide multiply-add (IMAD.WIDE: out's
// 64-bit address + bucket * 4; mul.wide + add, as mad.wide by 4 becomes two LEAs) instead of 64-bit adds
// and shifts each column. The label is local to the asm's { } scope (one per inlined copy). Volatile: these
// keep their order with each other and with the barriers, which the fixed order of the additions relies on.
// bucket >= 0 (zero-extended, as out + uint32_t(bucket) was).
__device__ __forceinline__ void add_where(bool condition, float* out, int bucket, float value) {
  asm volatile(
      "{\n .reg .pred p;\n .reg .u64 a;\n setp.eq.u32 p, %0, 0;\n @p bra DONE;\n"
      " mul.wide.u32 a, %1, 4;\n add.s64 a, a, %2;\n red.global.add.f32 [a], %3;\nDONE:\n}\n" ::"r"(
          static_cast<uint32_t>(condition)),
      "r"(bucket), "l"(static_cast<uint64_t>(__cvta_generic_to_global(out))), "f"(value));
}

// step(col) for the tile's first `columns` columns (1 to 64) in order: chunks of 16 unrolled (their
// shared-memory reads overlap and take constant offsets from the chunk's first column's addresses; the
// loop's count and branch once a chunk), the last columns < 16 of a partial tile (the sequence's end)
// rolled. One copy of the steps for full and partial tiles.
template <typename Step>
__device__ __forceinline__ void for_each_column(int columns, Step&& step) {
  constexpr int kChunk = 16;
  int first = 0;
#pragma unroll 1
  for (; first + kChunk <= columns; first += kChunk) {
#pragma unroll
    for (int u = 0; u < kChunk; ++u) step(first + u);
  }
#pragma unroll 1
  for (int col = first; col < columns; ++col) step(col);
}

// Each column a step without a branch in the C++ (the addition add_where's, the run selected): the lanes of
// a warp, whose rows change bucket at different columns, rejoin at once. The run begins in column 0's bucket
// at 0 (column 0's step then adds 0 + its value, as the first run's first addition always was), so no step
// tests for "no run yet" (columns >= 1; buckets >= 0).
__device__ __forceinline__ void scatter_bucket_row(float* out, const float* grad_row, int stride,
                                                   const int* diag, int local, bool by_query, int columns) {
  // by query: i = local, j = col, t = i - j + 63; by key: j = local, i = col.
  auto diagonal = [&](int col) { return by_query ? local - col + kTile - 1 : col - local + kTile - 1; };
  float run = 0.0f;
  int bucket = diag[diagonal(0)];
  auto step = [&](int col) {
    const int c = diag[diagonal(col)];
    const float value = grad_row[col * stride];
    const bool changes = c != bucket;
    add_where(changes, out, bucket, run);
    run = (changes ? 0.0f : run) + value;
    bucket = c;
  };
  for_each_column(columns, step);
  atomicAdd(out + bucket, run);
}

}  // namespace zt::kernels::gpu::flash_tiles
