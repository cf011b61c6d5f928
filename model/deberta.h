// DebertaV2ForSequenceClassification: forward and hand-written backward, layer by layer, over named
// parameter and gradient arenas (HF state-dict names, model/parameters.h) and a planned activation arena.
//
// Forward (reference/deberta-v2.md §13; B batch, L sequence, D hidden, N heads, I intermediate, S2 =
// 2*att_span):
//   E    = Drop( LN_emb( W_word[ids] ) * m )                              h[0] = E            [B, L, D]
//   R    = LN_rel( W_rel )                                                once per forward    [S2, D]
//   layer l (x = h[l]):
//     R~ = Drop(R);  q,k,v = x Wq'+bq, x Wk'+bk, x Wv'+bv;  PK = R~ Wk'+bk;  PQ = R~ Wq'+bq
//     ctx = DisentangledAttention(q, k, v, PK, PQ, m)                     probs [B, N, L, L]
//     s1 = Drop(ctx Wo'+bo) + x;   y = LN_a(s1)
//     f1 = y Wi'+bi;  g1 = gelu(f1);  s2 = Drop(g1 Wo2'+bo2) + y;  z = LN_o(s2)
//     l == 0 (conv): t = Drop(Conv1d(E) * m);  s3 = z + gelu(t);  h[1] = LN_c(s3) * m
//     otherwise h[l+1] = z
//   cls = h[n][:, 0];  pp = cls Wp'+bp;  pg = gelu(pp);  pd = Drop(pg);  logits = pd Wc'+bc
//   loss = CrossEntropy(logits, labels)  (labels < 0 ignored)
//
// Memory: every activation the backward reads lives in one arena whose layout is planned from
// (max_batch, max_seq) at construction, so the peak is known before the first step; smaller batches and
// shorter (dynamically padded) sequences use a prefix of each slot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "runtime/arena.h"
#include "runtime/tensor.h"

namespace zt {

struct DebertaBatch {
  Tensor input_ids;       // [B, L] i64
  Tensor attention_mask;  // [B, L] i64, 1 = real token, 0 = padding
  Tensor labels;          // [B] i64, < 0 ignored; undefined for inference (loss is then 0)
};

// Dropout is on only in training; masks are pure functions of (seed, step, layer, site) (kernels/dropout.h),
// so backward regenerates them and a resumed run draws the same masks.
struct DropoutSchedule {
  bool training = false;
  uint64_t seed = 0;
  uint64_t step = 0;
};

class DebertaForSequenceClassification {
 public:
  // `device`: where the activations live and the kernels run (parameters, gradients and the batch must be
  // there too). Both backends compute in f32 for now; the CUDA kernels already take bf16/f16 storage.
  DebertaForSequenceClassification(DebertaConfig config, int64_t max_batch, int64_t max_seq,
                                   DeviceKind device = DeviceKind::cpu);
  ~DebertaForSequenceClassification();

  // The activation plan for (max_batch, max_seq): every saved tensor and backward scratch buffer.
  static ArenaLayout plan_activations(const DebertaConfig& config, int64_t max_batch, int64_t max_seq);
  const ArenaLayout& activation_layout() const;
  const DebertaConfig& config() const { return config_; }
  DeviceKind device() const;

  // Runs the forward pass, keeping what backward needs. Returns the mean cross-entropy over labels >= 0
  // (0 when labels are undefined or all ignored). `params` holds every tensor of the parameter table.
  float forward(const Arena& params, const DebertaBatch& batch, const DropoutSchedule& dropout);

  // Accumulates d(loss_scale * loss)/d(parameter) into `grads` (same names as params) for the batch of the
  // last forward. Gradients add up over calls (gradient accumulation); the caller zeroes them.
  void backward(const Arena& params, const Arena& grads, float loss_scale = 1.0f);

  // Views into the last forward: logits [B, C]; hidden_state(0) = embedding output, hidden_state(l + 1) =
  // output of layer l, each [B, L, D] (HF's hidden_states tuple).
  Tensor logits() const;
  Tensor hidden_state(int index) const;

 private:
  struct State;
  DebertaConfig config_;
  std::unique_ptr<State> state_;
};

}  // namespace zt
