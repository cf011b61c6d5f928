// The flash disentangled-attention forward kernel (see flash_disentangled_attention.cuh for the algorithm,
// flash_attention_tiles.cuh for the fragments, tiles and staging they are built from).
#include "kernels/cuda/flash_disentangled_attention.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/flash_attention_tiles.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

using namespace flash_tiles;  // NOLINT(google-build-using-namespace): this file's building blocks

// ---- forward -------------------------------------------------------------------------------------------

struct ForwardShared {
  int diag[kDiagonals + 1];
  float query_term[kTile], key_term[kTile];  // uniform tiles: C2P[i, c0], P2C[j, c0]
  uint8_t key_keep[kTile];
  alignas(4) uint8_t keep[kTile * kKeepPitch];  // 32-bit stores of 4 keys
};

template <typename T, bool kStaged>
__global__ void __launch_bounds__(kThreads) flash_attention_forward_kernel(FlashAttentionParams p) {
  extern __shared__ __align__(16) unsigned char dynamic_shared[];  // kStagedBytes when kStaged
  float* staged = reinterpret_cast<float*>(dynamic_shared);
  // Two buffers of (K tile, V tile): tile t + 1 is copied in (cp.async) while tile t is computed. Q goes
  // through kv[2] for its fragments before any copy into the second buffer.
  __shared__ __align__(16) T kv[4][kTile * kPitch];
  __shared__ ForwardShared sh;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4;
  const int L = p.length;
  const int i0 = static_cast<int>(blockIdx.x) * kTile;
  const int64_t bh = blockIdx.y, b = bh / p.heads, h = bh % p.heads;
  const int64_t head_rows = (h * p.batch + b) * L;  // row (b, 0) of head h in the positional scores
  const T* qx = static_cast<const T*>(p.q);
  const T* kx = static_cast<const T*>(p.k);
  const T* vx = static_cast<const T*>(p.v);
  const bool positional = p.c2p != nullptr || p.p2c != nullptr;

  load_tile(kv[2], qx, p, b, h, i0);
  __syncthreads();
  uint32_t qa[4][4];
  load_a_fragments(kv[2], warp * 16, qa);
  prefetch_tile(kv[0], kx, p, b, h, 0);
  prefetch_tile(kv[1], vx, p, b, h, 0);
  commit_async_copies();

  const int local_row[2] = {warp * 16 + g, warp * 16 + g + 8};
  bool row_kept[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + local_row[r];
    row_kept[r] = i < L && p.keep[b * L + i] != 0;
  }
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
  float o[8][4];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;

  for (int j0 = 0, buffer = 0; j0 < L; j0 += kTile, buffer ^= 1) {
    __syncthreads();  // the previous tile's readers are done (of the other buffer, of sh and Q's kv[2])
    if (j0 + kTile < L) {
      prefetch_tile(kv[2 * (buffer ^ 1)], kx, p, b, h, j0 + kTile);
      prefetch_tile(kv[2 * (buffer ^ 1) + 1], vx, p, b, h, j0 + kTile);
    }
    commit_async_copies();  // an empty group on the last tile keeps the count: this tile's is the older one
    const T* k_tile = kv[2 * buffer];
    const T* v_tile = kv[2 * buffer + 1];
    for (int t = static_cast<int>(threadIdx.x); t < kTile; t += kThreads)
      sh.key_keep[t] = j0 + t < L && p.keep[b * L + j0 + t] != 0;
    if (positional) load_diagonals(sh.diag, p, i0, j0);
    if (p.dropout) fill_keep_tile(sh.keep, p, bh, i0, j0);
    wait_all_but_newest_copies();
    __syncthreads();
    const bool uniform = positional && sh.diag[0] == sh.diag[kDiagonals - 1];
    if (positional) {
      if (uniform)
        stage_uniform_terms(sh.query_term, sh.key_term, p, head_rows, i0, j0, sh.diag[0]);
      else if (kStaged)
        stage_positional(staged, p, sh.diag, head_rows, i0, j0);
      __syncthreads();
    }

    float s[8][4];
    product_with_rows(qa, k_tile, s);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, jl = nt * 8 + 2 * q + (e & 1), j = j0 + jl, i = i0 + local_row[r];
        float x = -INFINITY;  // keys past L take no part
        if (j < L) {
          const int c = positional ? sh.diag[local_row[r] - jl + kTile - 1] : 0;
          const float a = uniform   ? uniform_score(p, sh.query_term, sh.key_term, s[nt][e], local_row[r], jl)
                          : kStaged ? staged_score(p, staged, sh.diag, s[nt][e], local_row[r], jl)
                                    : disentangled_score(p, s[nt][e], head_rows, i, j, c);
          x = (row_kept[r] && sh.key_keep[jl]) ? a : kMasked;
        }
        s[nt][e] = x;
        tile_max[r] = fmaxf(tile_max[r], x);
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r]);  // finite: every tile has a key < L
      correction[r] = __expf(row_max[r] - new_max);          // 0 on the first tile (-inf)
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2, jl = nt * 8 + 2 * q + (e & 1);
        const float pe = __expf(s[nt][e] - row_max[r]);
        row_sum[r] += pe;
        s[nt][e] = (!p.dropout || sh.keep[local_row[r] * kKeepPitch + jl]) ? pe * p.kept_scale : 0.0f;
        o[nt][e] *= correction[r];
      }
    }
    accumulate_times_tile(s, v_tile, o);
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
      p.stats[(bh * L + i) * 2] = row_max[r];
      p.stats[(bh * L + i) * 2 + 1] = inverse;
    }
  }
}

template <typename F>
void dispatch_half(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::bf16:
      return f(__nv_bfloat16{});
    case DType::f16:
      return f(__half{});
    default:
      ZT_FAIL(op, ": bf16 or f16 only, got ", dtype_name(dtype));
  }
}

dim3 tile_grid(const FlashAttentionParams& p) {
  return dim3(static_cast<unsigned>((p.length + kTile - 1) / kTile),
              static_cast<unsigned>(p.batch * p.heads));
}

// One CTA per (tile, b*N + h): the staged variant (with its dynamic shared memory) where the host said the
// slices cover every tile and a positional term is on, the gathering one otherwise.
// fixed_bytes: the dynamic shared memory both variants take ahead of the slices.
template <typename Kernel>
void launch_tiles(Kernel gathering, Kernel staged, size_t fixed_bytes, const FlashAttentionParams& p,
                  cudaStream_t stream) {
  const bool use_staged = p.staged && (p.c2p != nullptr || p.p2c != nullptr);
  Kernel kernel = use_staged ? staged : gathering;
  const size_t bytes = fixed_bytes + (use_staged ? kStagedBytes : 0);
  if (bytes > 0) {
    ZT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  kernel<<<tile_grid(p), kThreads, bytes, stream>>>(p);
}

}  // namespace

void launch_flash_attention_forward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream) {
  dispatch_half(dtype, "flash_attention_forward", [&](auto tag) {
    using T = decltype(tag);
    launch_tiles(flash_attention_forward_kernel<T, false>, flash_attention_forward_kernel<T, true>, 0, params,
                 stream);
    ZT_CUDA_CHECK_LAUNCH("flash_attention_forward");
  });
}

}  // namespace zt::kernels::gpu
