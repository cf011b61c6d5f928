// The positional gradients of one term of the stored backward (attention_host.cu, positional_grads) in one
// kernel over one read of Gx. With Gx = Gc (c2p) or Gp (p2c) [N, B*L, Wp] in T, the rows X = Q or K
// [B*L, D] (head h at column h*d) and the table window PK_w [Wp, d] (table rows window_begin + r, zero from
// r = W on), per head h and slice c of the B*L rows:
//   dX[rows of c, h] = T(dX + Gx_h PK_w,h)             (f32 sum rounded once, as the GEMM with beta = 1)
//   partial[h, c]    = Gx_h[rows of c]^T X_h[rows of c]  (f32 [N, slices, Wp, d], added in slice order
//                                                       by add_slice_partials afterwards)
// The GEMMs read Gx twice (dX += Gx PK_w, then the k-split dPK_w) and their table product's slice sum took a
// third kernel: 31.6 + 34.0 + 13.8 us a term at 40 x 128 on the H100 (ncu), each a pass over the 63 MB Gx.
//
// One CTA of 8 warps per (slice, head), as many slices as the GEMM path's (attention_table_grad_slices), so
// the partials keep its layout. The CTA stages PK_w,h [256, 64] once and streams its slice in tiles of 64
// rows (Gx [64, 256], X and the old dX [64, 64]) through a 3-stage cp.async ring (one barrier a tile), and
// per tile, by mma.sync m16n8k16 (f32 accumulation) from ldmatrix fragments:
//   table: warp w owns table rows r = 32 w .. 32 w + 31 and all 64 features of dPK: A = Gx^T (ldmatrix
//          .trans of the Gx tile), B = X; its [32, 64] f32 sum stays in registers over the slice (64 a
//          thread)
//   rows:  warp w owns rows 16 (w % 4) .. + 15 and features 32 (w / 4) .. + 31 of the dX tile, over all 256
//          window rows: A = Gx, B = PK_w; the sum plus the old dX (staged with the tile) is rounded to T.
// A tile's ldmatrix reads: table 8 warps x (Gx^T 4 KiB + X 8 KiB), rows 8 x (Gx 8 KiB + PK_w 16 KiB), 288 KiB
// (~2300 cycles at 128 bytes a cycle), against 56 KB of DRAM traffic (Gx 32 KiB, X 8, dX 8 + 8; ~2.5 us at
// an SM's 1/132 of 3 TB/s): bound by DRAM, ~39 us a term for its 116 MB at 40 x 128 (63 MB Gx, 16 MB X,
// 2 x 16 MB dX, 6.3 MB partials) with two tiles (~100 KB) in flight an SM. One CTA an SM (189 KiB of shared
// memory, ~210 registers a thread): the 24 x 16 CTAs of 40 x 128 are 2.9 waves. Measured (H100, step
// profile): both terms with their partials' sums 4.89 -> 3.93 ms a step, ~82 us a term a layer with the
// partials' sum (25 MB of f32 partials written and read back beside the 116 MB): ~2 TB/s.
//
// Numerics: every product and sum in f32, the order of the sums differs from cuBLAS's (tensor-core k-chunks
// of 16, rows in tile order): within the tests' tolerances, not bitwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_host.cuh"
#include "kernels/cuda/flash_attention_tiles.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu::attention_host {
namespace {

using cuda_detail::to_float;
using flash_tiles::commit_async_copies;
using flash_tiles::copy_async16;
using flash_tiles::key_chunk_address;
using flash_tiles::load_matrices;
using flash_tiles::load_matrices_transposed;
using flash_tiles::mma;
using flash_tiles::pack2;
using flash_tiles::shared_address;
using flash_tiles::unrolled;
using flash_tiles::wait_all_but_newest_copies;

constexpr int kD = flash_tiles::kD;          // head size (64)
constexpr int kPitch = flash_tiles::kPitch;  // T elements a shared row of X, dX and PK_w (72)
constexpr int kWindowRows = 256;             // the largest window pitch the kernel takes
constexpr int kGradPitch = kWindowRows + 8;  // T elements a shared Gx row: 528 bytes, conflict-free ldmatrix
constexpr int kRowTile = 64;                 // B*L rows a tile
constexpr int kWarps = 8;
constexpr int kPositionalThreads = 32 * kWarps;
constexpr int kStages = 3;

constexpr size_t kWindowBytes = size_t{kWindowRows} * kPitch * 2;
constexpr size_t kGradTileBytes = size_t{kRowTile} * kGradPitch * 2;
constexpr size_t kRowsTileBytes = size_t{kRowTile} * kPitch * 2;
constexpr size_t kStageBytes = kGradTileBytes + 2 * kRowsTileBytes;    // Gx, X, old dX
constexpr size_t kSharedBytes = kWindowBytes + kStages * kStageBytes;  // 189 KiB: one CTA an SM

static_assert(kWarps * 32 == kWindowRows, "warp w owns table rows 32 w ..");
static_assert((kWarps / 2) * 16 == kRowTile && 2 * 32 == kD, "the warps tile dX as 4 x 2 of 16 x 32");

struct PositionalGradArgs {
  const void* bucket_grad;  // Gx [N, B*L, Wp] in T
  const void* rows;         // X [B*L, D] in T
  const void* table;        // the relative table [table_rows, D] in T
  void* drows;              // dX [B*L, D] in T
  float* partial;           // [N, slices, Wp, d] f32
  int64_t total_rows, features, window_begin, window, window_pitch, slice_rows;
  // Bands (ZT_GATHER_BANDS; band_width > 0: the kBands kernel): row (b, p) of Gx holds window rows
  // gathers_band_first(L, p, band_by_key) on, band_width of them (attention_host::BucketGrad).
  int64_t band_width, length;
  bool band_by_key;
};

// PK_w of head h into [256, kPitch]: table rows window_begin + r for r < W, zero rows after.
template <typename T>
__device__ __forceinline__ void copy_window(T* window, const PositionalGradArgs& a, int64_t h) {
  const T* table = static_cast<const T*>(a.table);
  for (int chunk = static_cast<int>(threadIdx.x); chunk < kWindowRows * 8; chunk += kPositionalThreads) {
    const int r = chunk / 8, c = chunk % 8;
    const bool valid = r < a.window;
    copy_async16(window + r * kPitch + c * 8,
                 valid ? table + (a.window_begin + r) * a.features + h * kD + c * 8 : table, valid);
  }
}

// Tile `tile` of the slice into a stage: Gx [64, 256] (zero columns from Wp on; with kBands also outside a
// row's band), X and dX [64, 64]. `first_position`: the sequence position of the slice's first row (kBands).
template <typename T, bool kBands>
__device__ __forceinline__ void copy_tile(unsigned char* stage, const T* grad, const T* x, const T* dx,
                                          const PositionalGradArgs& a, int tile, int first_position) {
  T* grad_tile = reinterpret_cast<T*>(stage);
  T* rows_tile = reinterpret_cast<T*>(stage + kGradTileBytes);
  T* drows_tile = reinterpret_cast<T*>(stage + kGradTileBytes + kRowsTileBytes);
  const int64_t row0 = static_cast<int64_t>(tile) * kRowTile;
  constexpr int kGradChunks = kWindowRows / 8;
  if constexpr (!kBands) {
    for (int chunk = static_cast<int>(threadIdx.x); chunk < kRowTile * kGradChunks;
         chunk += kPositionalThreads) {
      const int r = chunk / kGradChunks, c = chunk % kGradChunks;
      const bool valid = c * 8 < a.window_pitch;
      copy_async16(grad_tile + r * kGradPitch + c * 8,
                   valid ? grad + (row0 + r) * a.window_pitch + c * 8 : grad, valid);
    }
  } else {
    // A thread keeps its chunk column c and steps rows by 8; a row's position is the tile's first plus r,
    // wrapped at L.
    static_assert(kPositionalThreads % kGradChunks == 0, "a thread's chunk column is fixed");
    constexpr int kRowStep = kPositionalThreads / kGradChunks;
    const int L = static_cast<int>(a.length), band_chunks = static_cast<int>(a.band_width / 8);
    const int c = static_cast<int>(threadIdx.x) % kGradChunks;
    int r = static_cast<int>(threadIdx.x) / kGradChunks;
    int position = static_cast<int>((first_position + row0) % L) + r;
    for (; r < kRowTile; r += kRowStep, position += kRowStep) {
      while (position >= L) position -= L;
      const int k = c - static_cast<int>(gathers_band_first(L, position, a.band_by_key) / 8);
      const bool valid = k >= 0 && k < band_chunks;
      copy_async16(grad_tile + r * kGradPitch + c * 8,
                   valid ? grad + (row0 + r) * a.band_width + k * 8 : grad, valid);
    }
  }
  for (int chunk = static_cast<int>(threadIdx.x); chunk < kRowTile * 8; chunk += kPositionalThreads) {
    const int r = chunk / 8, c = chunk % 8;
    const int64_t offset = (row0 + r) * a.features + c * 8;
    copy_async16(rows_tile + r * kPitch + c * 8, x + offset, true);
    copy_async16(drows_tile + r * kPitch + c * 8, dx + offset, true);
  }
}

// table[mt][nt] (table rows 32 w + 16 mt .., features 8 nt ..) += Gx_tile^T X_tile over the tile's 64 rows.
// A = Gx^T by ldmatrix.trans of the Gx tile: matrix m is tile rows 16 kc + 8 (m / 2) .., window columns
// 32 w + 16 mt + 8 (m % 2) .. (a0 .. a3 = (r, k), (r + 8, k), (r, k + 8), (r + 8, k + 8)); B = X by
// ldmatrix.trans (flash_tiles::key_chunk_address), two 8-feature tiles a load.
template <typename T>
__device__ __forceinline__ void accumulate_table_grad(uint32_t grad_transposed_address, uint32_t rows_address,
                                                      float table[2][8][4]) {
  unrolled<kRowTile / 16>([&](auto kc) {
    uint32_t a[2][4];
    load_matrices_transposed<static_cast<int>(sizeof(T)) * kc * 16 * kGradPitch>(a[0],
                                                                                 grad_transposed_address);
    load_matrices_transposed<static_cast<int>(sizeof(T)) * (kc * 16 * kGradPitch + 16)>(
        a[1], grad_transposed_address);
    unrolled<4>([&](auto np) {
      uint32_t b[4];
      load_matrices_transposed<static_cast<int>(sizeof(T)) * (kc * 16 * kPitch + np * 16)>(b, rows_address);
      mma<T>(table[0][2 * np], a[0], b[0], b[1]);
      mma<T>(table[0][2 * np + 1], a[0], b[2], b[3]);
      mma<T>(table[1][2 * np], a[1], b[0], b[1]);
      mma<T>(table[1][2 * np + 1], a[1], b[2], b[3]);
    });
  });
}

// out[nt] (this warp's 16 tile rows, features 32 (w / 4) + 8 nt ..) = Gx_tile PK_w over the 256 window rows:
// A = Gx by ldmatrix (matrix m: rows 8 (m % 2) .., columns 16 kc + 8 (m / 2) ..), B = PK_w by ldmatrix.trans.
template <typename T>
__device__ __forceinline__ void rows_grad(uint32_t grad_address, uint32_t window_address, float out[4][4]) {
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) out[nt][0] = out[nt][1] = out[nt][2] = out[nt][3] = 0.0f;
  unrolled<kWindowRows / 16>([&](auto kc) {
    uint32_t a[4];
    load_matrices<static_cast<int>(sizeof(T)) * kc * 16>(a, grad_address);
    unrolled<2>([&](auto np) {
      uint32_t b[4];
      load_matrices_transposed<static_cast<int>(sizeof(T)) * (kc * 16 * kPitch + np * 16)>(b, window_address);
      mma<T>(out[2 * np], a, b[0], b[1]);
      mma<T>(out[2 * np + 1], a, b[2], b[3]);
    });
  });
}

template <typename T, bool kBands>
__global__ void __launch_bounds__(kPositionalThreads, 1) positional_grads_kernel(PositionalGradArgs a) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  T* window = reinterpret_cast<T*>(dynamic_shared);
  auto stage = [&](int tile) { return dynamic_shared + kWindowBytes + (tile % kStages) * kStageBytes; };
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4, m = lane / 8;
  const int64_t slice = blockIdx.x, h = blockIdx.y, first_row = slice * a.slice_rows;
  const int tiles = static_cast<int>(a.slice_rows / kRowTile);
  const T* grad = static_cast<const T*>(a.bucket_grad) +
                  (h * a.total_rows + first_row) * (kBands ? a.band_width : a.window_pitch);
  const int first_position = kBands ? static_cast<int>(first_row % a.length) : 0;
  const T* x = static_cast<const T*>(a.rows) + first_row * a.features + h * kD;
  T* dx = static_cast<T*>(a.drows) + first_row * a.features + h * kD;

  // Groups: {PK_w, tile 0}, {tile 1}, then one a tile (empty past the last), so that before tile t's
  // barrier, "all but the newest group done" means tile t has landed.
  copy_window(window, a, h);
  copy_tile<T, kBands>(stage(0), grad, x, dx, a, 0, first_position);
  commit_async_copies();
  if (tiles > 1) copy_tile<T, kBands>(stage(1), grad, x, dx, a, 1, first_position);
  commit_async_copies();

  // This lane's ldmatrix row addresses: Gx's relative to a stage, PK_w's.
  const int row16 = 16 * (warp % 4), feature32 = 32 * (warp / 4);
  const auto grad_transposed_offset =
      static_cast<uint32_t>(sizeof(T) * (((m / 2) * 8 + lane % 8) * kGradPitch + 32 * warp + (m % 2) * 8));
  const auto grad_offset =
      static_cast<uint32_t>(sizeof(T) * ((row16 + (m % 2) * 8 + lane % 8) * kGradPitch + (m / 2) * 8));
  const uint32_t window_address = key_chunk_address(window + feature32);

  float table[2][8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      table[mt][nt][0] = table[mt][nt][1] = table[mt][nt][2] = table[mt][nt][3] = 0.0f;
  }
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    wait_all_but_newest_copies();
    __syncthreads();  // tile t is in for every thread; stage (t + 2) % 3 (tile t - 1's) is free
    if (t + 2 < tiles) copy_tile<T, kBands>(stage(t + 2), grad, x, dx, a, t + 2, first_position);
    commit_async_copies();
    unsigned char* current = stage(t);
    const uint32_t grad_base = shared_address(current);
    accumulate_table_grad<T>(grad_base + grad_transposed_offset,
                             key_chunk_address(reinterpret_cast<const T*>(current + kGradTileBytes)), table);
    float out[4][4];
    rows_grad<T>(grad_base + grad_offset, window_address, out);
    const T* old = reinterpret_cast<const T*>(current + kGradTileBytes + kRowsTileBytes);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row16 + g + 8 * half;
      T* dx_row = dx + (static_cast<int64_t>(t) * kRowTile + r) * a.features;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = feature32 + 8 * nt + 2 * q;
        const T* old_pair = old + r * kPitch + col;
        *reinterpret_cast<uint32_t*>(dx_row + col) = pack2<T>(out[nt][2 * half] + to_float(old_pair[0]),
                                                              out[nt][2 * half + 1] + to_float(old_pair[1]));
      }
    }
  }

  // The slice's [Wp, 64] table product, rows past Wp (a window pitch below 256) dropped.
  float* partial = a.partial + (h * gridDim.x + slice) * a.window_pitch * kD;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = 32 * warp + 16 * mt + g + 8 * half;
      if (r >= a.window_pitch) continue;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        *reinterpret_cast<float2*>(partial + r * kD + 8 * nt + 2 * q) =
            make_float2(table[mt][nt][2 * half], table[mt][nt][2 * half + 1]);
      }
    }
  }
}

}  // namespace

bool positional_grads_kernel_applies(const Tensor& rows, const Tensor& table, const Tensor& drows,
                                     const AttentionShape& s, DType T) {
  return positional_kernel_shape(T, s.head_size, s.window_pitch, s.batch * s.length) &&
         aligned_to(rows.data(), 16) && aligned_to(table.data(), 16) && aligned_to(drows.data(), 16) &&
         static_cast<size_t>(cuda_detail::current_device_limits().shared_per_block_optin) >= kSharedBytes;
}

void positional_grads_kernel(const BucketGrad& grad, const Tensor& rows, const Tensor& table,
                             const Tensor& drows, float* partial, int64_t slices, int64_t window_begin,
                             const AttentionShape& s, DType T, cudaStream_t stream) {
  ZT_CHECK(aligned_to(grad.data, 16) && grad.band_width % 8 == 0 &&
               (grad.band_width == 0 || s.window == 2 * s.length - 1),
           "attention_positional_grads: Gx must be 16-byte aligned, its bands (", grad.band_width,
           " wide) a multiple of 8 over a window of one distance a row (", s.window, " rows at L ", s.length,
           ")");
  const PositionalGradArgs args{grad.data,
                                rows.data(),
                                table.data(),
                                drows.data(),
                                partial,
                                s.batch * s.length,
                                s.features,
                                window_begin,
                                s.window,
                                s.window_pitch,
                                s.batch * s.length / slices,
                                grad.band_width,
                                s.length,
                                grad.by_key};
  cuda_detail::dispatch_half(T, "attention_positional_grads", [&](auto tag) {
    using S = decltype(tag);
    const auto kernel =
        grad.band_width > 0 ? positional_grads_kernel<S, true> : positional_grads_kernel<S, false>;
    ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSharedBytes)));
    const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(s.heads));
    kernel<<<grid, kPositionalThreads, kSharedBytes, stream>>>(args);
    ZT_CUDA_CHECK_LAUNCH("attention_positional_grads");
  });
}

}  // namespace zt::kernels::gpu::attention_host
