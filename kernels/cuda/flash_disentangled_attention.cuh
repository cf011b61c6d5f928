// The flash disentangled attention's kernels (flash_disentangled_attention.cu: forward; _backward.cu:
// backward): kernels/disentangled_attention.h's formulas without any [L, L] buffer, for bf16/f16 storage and
// head size 64, any L. Raw-pointer launchers; the checked tensor-level entry points are
// gpu::flash_disentangled_attention_forward/backward (flash_disentangled_attention_host.cu), which also run
// the positional GEMMs around them.
//
// Forward, one CTA of 4 warps per (b, h, tile of 64 query rows), looping over tiles of 64 keys:
//   S = Q_tile K_tile^T (mma.sync m16n8k16, f32 accumulators in registers),
//   a(i, j) = ((S + C2P[i, c(i,j)]) + P2C[j, c(i,j)]) / s, finfo(f32).min unless m_i m_j,
//   online softmax (running row max m_i and sum l_i), P~ = exp(a - m_i) keep(e) / (1 - p) rounded to T,
//   O += P~ V_tile; at the end context_i = O_i / l_i and stats_i = (m_i, 1 / l_i).
// C2P = Q PK_w^T and P2C = K PQ_w^T are the [N, B*L, window_pitch] f32 positional scores of the unfused path
// (GEMMs on the host side), gathered per element; c(i,j) - window_begin comes from the diagonal table.
// keep(e), e = ((b*N + h)*L + i)*L + j, is the unfused path's Philox draw: the same keep bits.
//
// Backward (flash-2, P recomputed from the stats, D_i = dC_i . context_i computed first):
//   P = exp(a - m_i) / l_i,  dP~ = dC V^T,  G = [m_i m_j] P (keep(e) dP~ / (1 - p) - D_i) / s,
// one kernel, one CTA per (b, h, 64 keys) looping over the query tiles:
//   dK = G^T Q, dV = P~^T dC in registers and Gp[j, c(i,j)] += G (the CTA's own rows, tiles ordered by
//   barriers); dQ = G K and Gc[i, c(i,j)] += G per query tile into f32 dq_sum / Gc in a fixed order of the
//   key tiles (ascending, or rotated: see rotated_order): the k-th adder of a query tile waits until
//   tile_order[b, h, query tile] == k (acquire), adds, sets k + 1 (release); the last writes dQ in T. A
//   bucket run of a Gc row strictly inside one key tile has that tile as its only contributor and is added
//   without waiting. Deterministic (every sum in a fixed order); S and dP~ are computed once per element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/disentangled_attention.h"
#include "runtime/dtype.h"

namespace zt::kernels::gpu {

inline constexpr int kFlashTile = 64;      // query rows and keys per tile
inline constexpr int kFlashHeadSize = 64;  // the one head size the kernels take

struct FlashAttentionParams {
  const void* q = nullptr;            // [B, L, D] T
  const void* k = nullptr;            // [B, L, D] T
  const void* v = nullptr;            // [B, L, D] T
  const float* c2p = nullptr;         // [N, B*L, window_pitch] f32, or nullptr without c2p
  const float* p2c = nullptr;         // [N, B*L, window_pitch] f32, or nullptr without p2c
  const int32_t* diagonal = nullptr;  // [2L - 1]: c(i,j) - window_begin at i - j + L - 1
  const uint8_t* keep = nullptr;      // [B, L] m_j != 0
  // The short forward (L <= 128, launch_short_attention_forward) computes C2P / P2C itself from the tables:
  const void* pos_key = nullptr;    // [table_rows, D] T (PK), or nullptr without c2p
  const void* pos_query = nullptr;  // [table_rows, D] T (PQ), or nullptr without p2c
  void* probs = nullptr;            // [B, N, L, L] T: P, out (short forward), in (short backward)
  // The short backward (launch_short_attention_backward) writes G, the scores' gradient, in T [B, N, L, L]
  // (score_grad_lowp), P~ in T (dropped_probs, with dropout) and either the bucket gathers Gc / Gp in T
  // [N, B*L, window_pitch] (where rel_first is given: one distance a bucket; nullptr for an absent term) or G
  // in f32 (score_grad_f32, for the gather kernels).
  void* score_grad_lowp = nullptr;
  void* dropped_probs = nullptr;
  void* gc_lowp = nullptr;
  void* gp_lowp = nullptr;
  const int32_t* rel_first = nullptr;  // [window]: the one i - j of window row r
  float* score_grad_f32 = nullptr;
  int window_begin = 0, table_rows = 0, window = 0;
  void* context = nullptr;  // [B, L, D] T: out (forward), in (backward)
  float* stats = nullptr;   // [B, N, L, 2] f32 (row max, 1 / row sum): out (forward), in (backward)
  // backward only
  const void* dcontext = nullptr;  // [B, L, D] T
  float* row_dot = nullptr;        // [B, N, L] f32 scratch: D_i
  void* dq = nullptr;              // [B, L, D] T, overwritten
  void* dk = nullptr;
  void* dv = nullptr;
  float* gc = nullptr;      // [N, B*L, window_pitch] f32, zeroed by the caller (c2p only)
  float* gp = nullptr;      // [N, B*L, window_pitch] f32, zeroed by the caller (p2c only)
  float* dq_sum = nullptr;  // [B*N, L, 64] f32 scratch: dQ summed over the key tiles so far
  // [B*N * query tiles + 1] int32 scratch, zeroed by the caller: per (b, h, query tile) the number of key
  // tiles added into dq_sum and Gc so far, then the CTAs' ticket counter.
  int* tile_order = nullptr;

  int batch = 0, length = 0, heads = 0, features = 0;
  int window_pitch = 0;
  // Every 64 consecutive diagonals reach at most 64 consecutive table rows (true when the bucketing moves by
  // at most one row per unit of i - j, as HF's log buckets and the unbucketed clamp do): the forward then
  // stages each tile's C2P / P2C slices in shared memory instead of gathering per score (the backward
  // gathers each tile's per-score terms into shared memory whatever the bucketing).
  bool staged = false;
  float inverse_scale = 1.0f;
  bool dropout = false;
  float dropout_p = 0.0f, kept_scale = 1.0f;
  uint64_t seed = 0, site_id = 0;
  // backward: CTA t (key tile t of n) visits query tiles t, t + 1, ... (mod n) instead of 0, 1, ..., so the
  // adders of a query tile follow one another a step apart instead of a hop apart from a common start; CTA t
  // then waits on t + 1, a later ticket: only when a head's n CTAs can all be resident (the launcher's
  // choice, flash_backward_rotated_order).
  bool rotated_order = false;
  // The short backward's candidates, unrun (docs/DESIGN.md's rule for unrun GPU code;
  // disentangled_attention.cu reads their switches): ZT_SHORT_BACKWARD_PRODUCTS: dV, dQ and dK taken in the
  // kernel from G and P~ in shared memory instead of G and P~ written for the host's GEMMs (score_grad_lowp
  // and dropped_probs unused); ZT_GATHER_BANDS: Gc / Gp as bands [N, B*L, gathers_band_width]
  // (attention_host::BucketGrad) instead of [N, B*L, window_pitch].
  bool content_products = false;
  int gathers_band_width = 0;
};

// Whether the backward may visit the query tiles in rotated order: the rotation's waits reach later tickets,
// so a head's `tiles` CTAs must all fit on the device at once, beside the same kernel of every other rank
// sharing the GPU (runtime rank_devices_on): tiles x max(1, ranks) <= the kernel's resident CTAs (the
// occupancy at `dynamic_shared_bytes` x SMs). Enough: CTAs of other kernels finish, so some rank's kernel
// always has a whole head resident, completes it and frees its slots.
bool flash_backward_rotated_order(int tiles, int resident_ctas, int ranks_on_device);

// The orders the backward's launcher may take, process-wide: automatic (rotated where
// flash_backward_rotated_order allows, else ascending; the default) or ascending always (what the tests
// compare the rotated order with; both deterministic, their sums in different orders).
enum class FlashBackwardOrder : uint8_t { automatic, ascending };
void set_flash_backward_order(FlashBackwardOrder order);
FlashBackwardOrder flash_backward_order();

// The stored path's forward in one kernel where L <= kShortAttentionMaxLength (disentangled_attention.cu
// decides; short_disentangled_attention.cu): context and P as the unfused kernels compute them.
static_assert(kShortAttentionMaxLength == 2 * kFlashTile, "the short forward holds two key tiles");
void launch_short_attention_forward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream);

// The stored path's backward at L <= kShortAttentionMaxLength up to the GEMMs that read G and P~
// (short_disentangled_attention.cu): dP~ = dC V^T, the softmax backward (G from the stored P), G and P~ in
// T, and the bucket gathers (or G in f32 for them), one CTA per (b, h); with content_products dV, dQ and dK
// too, in place of G and P~.
void launch_short_attention_backward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream);

// dtype: bf16 or f16 (T of q, k, v, context and the gradients).
void launch_flash_attention_forward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream);
void launch_flash_attention_backward(const FlashAttentionParams& params, DType dtype, cudaStream_t stream);

}  // namespace zt::kernels::gpu
