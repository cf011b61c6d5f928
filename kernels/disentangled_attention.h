// DeBERTa-v2 disentangled self-attention core: scores, masked softmax, attention dropout, context.
//
// Per batch b and head h (features f = h*d + k, d = D / N), with c(i,j) from relative_position.h:
//   A[i,j] = ( Q_i . K_j  +  [c2p] Q_i . PK_{c(i,j)}  +  [p2c] K_j . PQ_{c(i,j)} ) / s,
//   s = sqrt(d * (1 + [c2p] + [p2c]))                      (one shared scale, computed in fp32 like HF)
//   P = masked_softmax(A, M),  M[i,j] = m_i m_j             (masked_softmax.h: padded query rows -> 1/L)
//   P~[i,j] = keep(b,h,i,j) ? P[i,j] / (1 - p) : 0,  keep = philox.h's attention_keep(seed, site_id, e) (16
//             bits an element) with e = ((b*N + h)*L + i)*L + j  (the flat index into P); p == 0 skips
//             dropout exactly
//   context_i = sum_j P~[i,j] V_j
// Q, K, V are the biased projections of the layer input; PK = R~ Wk^T + bk and PQ = R~ Wq^T + bq are the
// projections of the layer's dropped-out, layer-normed relative table (rows [0, 2S), S = att_span).
//
// Backward with G = dA / s (dA from the masked softmax backward, 0 at masked entries) and the bucket
// scatter-adds Gc[i,r] = sum_{j: c(i,j)=r} G[i,j], Gp[j,r] = sum_{i: c(i,j)=r} G[i,j]:
//   dV = P~^T dC,  dP = keep * (dC V^T) / (1 - p)
//   dQ = G K + [c2p] Gc PK,      dK = G^T Q + [p2c] Gp PQ
//   dPK += [c2p] Gc^T Q,         dPQ += [p2c] Gp^T K          (summed over the batch)
//
// CPU: every tensor f32. CUDA (kernels/cuda/disentangled_attention.cu; on the calling thread's current
// stream, runtime/stream.h): q, k, v, pos_key, pos_query, context, dcontext, dq, dk, dv and probs in one
// storage dtype T (f32, bf16, f16); scores and softmax run in f32 and P is rounded to T once on store (as HF
// keeps attention_probs in the model dtype; halves the saved probs for 16-bit T); dpos_key / dpos_query T
// or f32; mask on the GPU. Scratch per call from the device allocator, with P = B*N*L*L and W = the table
// rows reached (<= min(2S, 2L - 1)):
//   forward  none where short_attention_forward_shape holds; else 4*P for the f32 content scores (16-bit T
//   only; f32 finishes them in probs) + P*sizeof(T) for P~ (dropout only) + 2 * 4*N*B*L*W for the C2P/P2C
//   scores; backward 4*P for dP/G + P*sizeof(T) for P~ then G (none for f32 without dropout) + 2 *
//   N*B*L*W*sizeof(T) for Gc/Gp (+ a term's table window and f32 partials while its table gradient runs);
//   the one-kernel backward at L <= 128 keeps G and P~ in shared memory and writes Gc/Gp itself (bands of
//   L + 8 entries a row where positional_kernel_shape holds: gathers_band_width).
//   E.g. B = 32, N = 24, L = 128 (W = 255), bf16: probs 24 MiB (kept by the caller); no forward scratch (one
//   kernel; the GEMM path's would be 48 (+ 24 with dropout) + 2 * 96 MiB); backward 48 + 24 + 2 * 48 MiB.
//   The positional scratch dominates (W ~ 2L).
// Shapes (contiguous; mask i64, i32 or f32 with 1 = real token, 0 = padding):
//   q, k, v             [B, L, D]     in
//   pos_key, pos_query  [2S, D]       in  (pos_key needed only with c2p, pos_query only with p2c;
//                                          pass an empty Tensor() for an unused one)
//   attention_mask      [B, L]        in
//   context             [B, L, D]     out (forward)
//   probs               [B, N, L, L]  out (forward), the pre-dropout P (f32 on the CPU, T on CUDA); saved
//                                     for backward
// Backward reads q, k, v, pos_key, pos_query, attention_mask, probs (all saved by the caller) and
//   dcontext            [B, L, D]     in
//   dq, dk, dv          [B, L, D]     out, overwritten
//   dpos_key, dpos_query [2S, D]      out, accumulated (+=); empty when the matching term is off
#pragma once

#include <cstdint>

#include "kernels/relative_position.h"
#include "runtime/tensor.h"

namespace zt::kernels {

// The longest L the stored-probabilities CUDA path takes (its softmax holds a score row in registers).
inline constexpr int64_t kStoredAttentionMaxLength = 1024;

// Where the CUDA forward of the stored path is one kernel (kernels/cuda/short_disentangled_attention.cu:
// context and P without the f32 score and positional scratch): 16-bit storage, heads of 64, L <= 128 (and
// 16-byte aligned tensors with a bucketing that moves at most one table row a diagonal, as HF's and the
// model's always are; gpu::short_attention_forward_applies checks every condition).
inline constexpr int64_t kShortAttentionMaxLength = 128;
inline bool short_attention_forward_shape(DType storage, int64_t head_size, int64_t length) {
  return storage != DType::f32 && head_size == 64 && length <= kShortAttentionMaxLength;
}

// The k slices of the CUDA backward's table-gradient GEMMs over B*L rows (d(table_w) += Gx^T rows, summed
// into f32 partials [N, slices, Wp, d] and then in order): the most slices (<= 16) that divide B*L into
// pieces of >= 256 rows; 1 (one GEMM straight into the table's gradient) when none does.
inline int64_t attention_table_grad_slices(int64_t rows) {
  for (int64_t slices = 16; slices > 1; --slices) {
    if (rows % slices == 0 && rows / slices >= 256) return slices;
  }
  return 1;
}

// Where the CUDA backward's positional terms run as one kernel a term (kernels/cuda/attention_positional.cu)
// rather than GEMMs: 16-bit storage, heads of 64, a window pitch of at most 256 table rows and B*L rows in
// more than one slice of a multiple of 64 rows (and 16-byte aligned tensors, which
// gpu::positional_grads_kernel_applies checks with the rest).
inline bool positional_kernel_shape(DType storage, int64_t head_size, int64_t window_pitch, int64_t rows) {
  const int64_t slices = attention_table_grad_slices(rows);
  return storage != DType::f32 && head_size == 64 && window_pitch <= 256 && slices > 1 &&
         (rows / slices) % 64 == 0;
}

// The row width of the bucket gathers Gc / Gp where the short backward writes them as bands for that kernel:
// with one distance a window row (W = 2L - 1, row r holding i - j = r - (L - 1)), the nonzero entries of
// row p are the L rows r from p (Gc, query p) or from L - 1 - p (Gp, key p) on; a band is those rows from
// the multiple of 8 at or below the first, L + 8 of them (L a multiple of 8), instead of the window pitch
// 2L: 136 against 256 entries a row at L = 128, so about half the bytes written and read back.
inline int64_t gathers_band_width(int64_t length) {
  return length + 8;
}
// The first window row of position p's band (the kernels' device code calls it too): Gc's row for query p
// is nonzero from window row p on, Gp's row for key p from L - 1 - p on.
constexpr int64_t gathers_band_first(int64_t length, int64_t position, bool by_key) {
  return (by_key ? length - 1 - position : position) / 8 * 8;
}

struct DisentangledAttentionConfig {
  int64_t num_heads = 1;
  RelativePositionConfig positions;  // bucketing and S = positions.att_span()
  bool c2p = true;                   // "c2p" in pos_att_type
  bool p2c = true;                   // "p2c" in pos_att_type
  float dropout_p = 0.0f;            // attention_probs_dropout_prob while training, 0 in eval
  uint64_t seed = 0;                 // dropout stream: the keep mask is a pure function of
  uint64_t site_id = 0;              //   (seed, site_id, element index), regenerated by backward
};

// fp32 sqrt(d * (1 + [c2p] + [p2c])), the divisor shared by all three score terms.
float disentangled_attention_scale(int64_t head_size, const DisentangledAttentionConfig& config);

void disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                    const Tensor& pos_query, const Tensor& attention_mask,
                                    const DisentangledAttentionConfig& config, const Tensor& context,
                                    const Tensor& probs);

void disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const Tensor& probs, const Tensor& dcontext,
                                     const DisentangledAttentionConfig& config, const Tensor& dq,
                                     const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                     const Tensor& dpos_query);

// The flash path: the same op with nothing [L, L] kept. The forward saves, instead of probs, the softmax
// statistics of every row, softmax_stats [B, N, L, 2] f32 = (row max of the masked scores a, 1 / sum_j
// exp(a_j - max)), so that P[i,j] = exp(a_ij - max_i) * stats_i[1] can be recomputed; the backward reads
// them and the forward's context (D_i = dC_i . context_i = sum_j P[i,j] dP[i,j], the softmax backward's row
// sum, flash-2 style) and recomputes the scores:
//   forward  in q, k, v, pos_key, pos_query, attention_mask; out context, softmax_stats
//   backward in the same plus context, softmax_stats, dcontext; out dq, dk, dv (overwritten), dpos_key,
//            dpos_query (accumulated +=), as disentangled_attention_backward
// Same keep bits as the stored path (the element numbering e is P's). CPU: f32, any head size, a row at a
// time (O(L) scratch). CUDA (kernels/cuda/flash_disentangled_attention.cuh): bf16/f16, head size 64, any L;
// its scratch is the positional scores (2 x 4*N*B*L*Wp bytes, as the stored forward's) and in the backward
// Gc/Gp in f32 and in T (2 x 6*N*B*L*Wp) plus the mask bytes and flash_backward_scratch_bytes — linear in L.
void flash_disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_key, const Tensor& pos_query,
                                          const Tensor& attention_mask,
                                          const DisentangledAttentionConfig& config, const Tensor& context,
                                          const Tensor& softmax_stats);

void flash_disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& pos_key, const Tensor& pos_query,
                                           const Tensor& attention_mask, const Tensor& context,
                                           const Tensor& softmax_stats, const Tensor& dcontext,
                                           const DisentangledAttentionConfig& config, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                           const Tensor& dpos_query);

// The CUDA flash backward's scratch beside Gc/Gp, one buffer: dQ's running sum [B, N, L, 64] f32, D [B, N, L]
// f32, and per (b, h, 64-query tile) the count of key tiles added so far plus a ticket (int32).
inline size_t flash_backward_scratch_bytes(int64_t batch, int64_t heads, int64_t length) {
  const auto rows = static_cast<size_t>(batch * heads * length);
  const auto counts = static_cast<size_t>(batch * heads * ((length + 63) / 64) + 1);
  return rows * 65 * sizeof(float) + counts * sizeof(int32_t);
}

// Why the flash path cannot take q (a phrase), or nullptr: on the CPU f32 is required; on the GPU bf16/f16
// and head size 64.
const char* flash_attention_unsupported(const Tensor& q, const DisentangledAttentionConfig& config);

}  // namespace zt::kernels
