// The fused disentangled-attention forward (formulas in kernels/disentangled_attention.h): one CTA per
// (b, h, tile of 32 query rows) computes the scores Q K^T + C2P + P2C with tensor cores, gathers the
// positional terms from shared memory, runs the masked softmax and the attention dropout in f32, stores P
// (in T, for the backward) and accumulates P~ V into the context tile. Nothing but P and the context goes to
// HBM: no f32 [B, N, L, L] content scores and no [N, B*L, W] positional scores, which the unfused path
// (kernels/cuda/disentangled_attention.cu) writes and reads back.
//
// Raw-pointer launcher; the checked tensor-level entry point (gpu::fused_disentangled_attention_forward) is
// in disentangled_attention.cu, beside the planning, mask and index-table helpers it shares with the
// unfused path. Plain C++ declarations (the kernels are in the .cu), included by the CUDA path and its tests.
//
// Supported (fused_attention_head_size_supported and the entry point's checks): T bf16 or f16 (wmma
// 16x16x16 fragments, f32 accumulation; f32 storage keeps the unfused path), head size d in {16, 32, 64,
// 128}, 1 <= L <= 512 (the tile's score rows [32, L] live in shared memory, see
// fused_attention_shared_bytes), and a bucketing under which 63 consecutive relative positions reach at most
// 64 table rows (a bucket step of at most one row per position: the log buckets' slope is below 1 when
// max_position - 1 > e * buckets / 2, as for DeBERTa-v2's 256 over 512; checked on the host per
// (bucketing, L), not assumed).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "runtime/dtype.h"

namespace zt::kernels::gpu {

// Geometry of one CTA, shared by the kernel, its shared-memory layout and the host checks.
inline constexpr int kFusedTileRows = 32;  // query rows per CTA
inline constexpr int kFusedKeyChunk = 32;  // keys per step of the score and P~ V loops
// Table rows one (tile, key chunk) reaches: 32 + 32 - 1 = 63 relative positions, at most one row each
// under the host-checked bucketing, padded to a multiple of 16 for the fragments.
inline constexpr int kFusedSliceRows = 64;
inline constexpr int kFusedWarps = 4;
inline constexpr int kFusedThreads = kFusedWarps * 32;
inline constexpr int kFusedMaxLength = 512;
// Under the 227 KiB opt-in shared memory of sm_90, with room for the runtime's reserved 1 KiB.
inline constexpr size_t kFusedMaxSharedBytes = size_t{200} << 10;

// Everything the kernel reads, by value. Pointers to T unless said otherwise; q, k, v, context are [B, L, D]
// contiguous (head h = columns h*d .. h*d + d - 1, row stride D), 16-byte aligned.
struct FusedAttentionParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  // Row window_begin of pos_key / pos_query [2S, D]: row r of the window is table row window_begin + r,
  // r < window. Null when that term is off.
  const void* pos_key_window = nullptr;
  const void* pos_query_window = nullptr;
  const uint8_t* keep = nullptr;  // [B, L], 1 = real token
  const int32_t* diagonal =
      nullptr;              // [2L - 1]: window row of c(i, j) at i - j + L - 1; null without c2p/p2c
  void* context = nullptr;  // [B, L, D] out
  void* probs = nullptr;    // [B, N, L, L] out, P in T
  int batch = 0, length = 0, features = 0, heads = 0, head_size = 0;
  int window = 0;  // W, rows of the window
  bool c2p = false, p2c = false, dropout = false;
  float inverse_scale = 1.0f;  // 1 / s
  float dropout_p = 0.0f, kept_scale = 1.0f;
  uint64_t seed = 0, site_id = 0;
};

bool fused_attention_head_size_supported(int64_t head_size);

// Dynamic shared memory of one CTA for length L, head size d and storage dtype (bf16/f16). At L = 128,
// d = 64: 62,208 bytes (60.75 KiB), three CTAs per H200 SM. Layout in fused_disentangled_attention.cu.
size_t fused_attention_shared_bytes(int64_t length, int64_t head_size, DType dtype);

// Queues the kernel on `stream`: grid (ceil(L / 32), B * N), kFusedThreads threads. The caller has checked
// the shapes, the alignment, L <= kFusedMaxLength, the bucketing span and B * N <= 65535.
void launch_fused_attention_forward(const FusedAttentionParams& params, DType dtype, cudaStream_t stream);

// ---- the fused backward (optional: ZT_FUSED_ATTENTION_BACKWARD, disentangled_attention.cu) ----
//
// Two kernels replace the unfused backward's P~ pass, the four L x L GEMMs, the softmax backward and the
// bucket gathers (the f32 [B, N, L, L] dP/G scratch and P~/G in T disappear); the positional GEMMs
// dQ += Gc PK, dK += Gp PQ, dPK += Gc^T Q, dPQ += Gp^T K stay outside, unchanged. With P read from probs
// (no score recompute), f = keep(e) / (1 - p) and D_i = sum over kept j of P dP:
//   rows kernel, per (b, h, 32 query rows): dP~ = dC_tile V^T (wmma), dP = f dP~, D_i (to row_dot),
//     G = m_i m_j P (dP - D_i) / s, Gc[i, r] = sum_{j: c(i,j) = r} G (from the f32 G rows in shared memory,
//     the unfused gather's order), dQ_tile = G K (wmma, G rounded to T as the unfused GEMM reads it);
//   keys kernel, per (b, h, 32 keys), after the rows kernel (it reads row_dot): per chunk of 32 queries
//     dP~ = dC_chunk V_tile^T, P~ = T(P f), G as above, dV_tile += P~^T dC_chunk and dK_tile += G^T Q_chunk
//     (wmma fragments across chunks), G columns kept in shared memory for Gp[j, r] = sum_{i: c(i,j) = r} G.
// dq, dk, dv are overwritten; gc / gp ([N, B*L, window_pitch] in T, zero columns past W) may be null when
// that term is off. Same support as the forward (bf16/f16, d in {16, 32, 64, 128}, L <= 512).
struct FusedAttentionBackwardParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* dcontext = nullptr;
  const void* probs = nullptr;         // [B, N, L, L], P in T
  const uint8_t* keep = nullptr;       // [B, L]
  const int32_t* rel_first = nullptr;  // [W]: the i - j range of window row r (first > last: none)
  const int32_t* rel_last = nullptr;   // [W]
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* gc = nullptr;        // [N, B*L, window_pitch] T, or null
  void* gp = nullptr;        // [N, B*L, window_pitch] T, or null
  float* row_dot = nullptr;  // [B*N*L] f32 scratch: D_i, written by the rows kernel
  int batch = 0, length = 0, features = 0, heads = 0, head_size = 0;
  int window = 0, window_pitch = 0;
  bool dropout = false;
  float inverse_scale = 1.0f, dropout_p = 0.0f, kept_scale = 1.0f;
  uint64_t seed = 0, site_id = 0;
};

// The larger of the two kernels' dynamic shared memory (both <= kFusedMaxSharedBytes for L <= 512,
// d <= 128); at L = 128, d = 64, bf16 the rows kernel takes 34,816 bytes and the keys kernel 40,448.
size_t fused_attention_backward_shared_bytes(int64_t length, int64_t head_size, DType dtype);

// Queues the rows kernel, then the keys kernel, on `stream` (grid (ceil(L / 32), B * N) each).
void launch_fused_attention_backward(const FusedAttentionBackwardParams& params, DType dtype,
                                     cudaStream_t stream);

}  // namespace zt::kernels::gpu
