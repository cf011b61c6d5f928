// DebertaV2ForSequenceClassification: forward and hand-written backward, layer by layer, over named
// parameter and gradient arenas (HF state-dict names, model/parameters.h) and a planned activation arena.
//
// Forward (reference/deberta-v2.md §13; B batch, L sequence, D hidden, N heads, I intermediate, S2 =
// 2*att_span):
//   E    = Drop( LN_emb( W_word[ids] ) * m )                              h[0] = E            [B, L, D]
//   R    = LN_rel( W_rel )                                                once per forward    [S2, D]
//   layer l (x = h[l]):
//     R~ = Drop(R);  q,k,v = x Wq'+bq, x Wk'+bk, x Wv'+bv;  PK = R~ Wk'+bk;  PQ = R~ Wq'+bq
//     ctx = DisentangledAttention(q, k, v, PK, PQ, m)                     probs [B, N, L, L] (stored path)
//                                                                          or stats [B, N, L, 2] (flash)
//     s1 = Drop(ctx Wo'+bo) + x;   y = LN_a(s1)
//     f1 = y Wi'+bi;  g1 = gelu(f1);  s2 = Drop(g1 Wo2'+bo2) + y;  z = LN_o(s2)
//     l == 0 (conv): t = Drop(Conv1d(E) * m);  s3 = z + gelu(t);  h[1] = LN_c(s3) * m
//     otherwise h[l+1] = z
//   cls = h[n][:, 0];  pp = cls Wp'+bp;  pg = gelu(pp);  pd = Drop(pg);  logits = pd Wc'+bc
//   loss = CrossEntropy(logits, labels)  (labels < 0 ignored); regression heads (num_labels 1,
//          DebertaConfig::is_regression): loss = MSE(logits[:, 0], labels)  (NaN labels ignored)
//
// Memory: every activation the backward reads lives in one arena whose layout is planned from
// (max_batch, max_seq) at construction, so the peak is known before the first step; smaller batches and
// shorter (dynamically padded) sequences use a prefix of each slot. g1 = gelu(f1) is not kept: backward
// recomputes it into one shared [B, L, I] buffer (one pointwise pass per layer instead of n_layers * B*L*I
// stored elements, 1.5 GB for the xlarge model at batch 40 in bf16).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/grad_write.h"
#include "model/config.h"
#include "model/deberta_tensors.h"
#include "runtime/arena.h"
#include "runtime/tensor.h"

namespace zt {

struct DebertaBatch {
  Tensor input_ids;       // [B, L] i64
  Tensor attention_mask;  // [B, L] i64, 1 = real token, 0 = padding
  Tensor labels;          // [B] i64, < 0 ignored (regression: f32 targets, NaN ignored); undefined for
                          // inference (loss is then 0)
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
  // there too). `compute`: the storage dtype of parameters and activations — f32 on either backend, bf16 or
  // f16 on CUDA (mixed precision: 16-bit storage, f32 accumulation inside every kernel). Whatever `compute`
  // is, these stay f32: LayerNorm statistics, logits, loss and its gradient, the relative-table gradient
  // summed over layers, and every parameter gradient. The saved attention probabilities are in `compute`
  // (softmax computed in f32, rounded once on store).
  // `gradients`: also place a gradient buffer of that layout in the activation arena (GradientLayout; not
  // with gradient checkpointing); gradient_memory() is then where it starts.
  DebertaForSequenceClassification(DebertaConfig config, int64_t max_batch, int64_t max_seq,
                                   DeviceKind device = DeviceKind::cpu, DType compute = DType::f32,
                                   const GradientLayout* gradients = nullptr);
  ~DebertaForSequenceClassification();

  // The activation plan for (max_batch, max_seq): every saved tensor and backward scratch buffer, and with
  // `gradients` the tail the gradient buffer needs past them (GradientLayout).
  static ArenaLayout plan_activations(const DebertaConfig& config, int64_t max_batch, int64_t max_seq,
                                      DType compute = DType::f32, const GradientLayout* gradients = nullptr);
  // Whether a model planned for max_seq in `compute` runs the flash attention (DebertaConfig::
  // attention_kernel): it then saves the softmax statistics [B, N, L, 2] f32 per layer instead of the
  // probabilities [B, N, L, L].
  static bool uses_flash_attention(const DebertaConfig& config, int64_t max_seq, DType compute);
  // Where a gradient buffer of layout `gradients` starts in an activation arena laid out by
  // plan_activations(..., &gradients): bytes from the arena's start.
  static size_t gradient_offset(const DebertaConfig& config, const ArenaLayout& activations,
                                const GradientLayout& gradients);
  // The gradient buffer placed in the activation arena (GradientLayout), or nullptr without one.
  void* gradient_memory() const;
  const ArenaLayout& activation_layout() const;
  const DebertaConfig& config() const { return config_; }
  DeviceKind device() const;
  DType compute_dtype() const;

  // Runs the forward pass, keeping what backward needs. Returns the mean cross-entropy over labels >= 0
  // (0 when labels are undefined or all ignored). `params` holds every tensor of the parameter table in the
  // compute dtype (ParameterTable::layout(compute)).
  float forward(const Arena& params, const DebertaBatch& batch, const DropoutSchedule& dropout);
  // The same over resolved handles, calling `hooks` (may be null) around each unit (model/deberta_tensors.h).
  float forward(const DebertaTensors& params, const DebertaBatch& batch, const DropoutSchedule& dropout,
                DebertaUnitHooks* hooks);

  // Accumulates d(loss_scale * loss)/d(parameter) into `grads` (same names as params, always f32) for the
  // batch of the last forward. Gradients add up over calls (gradient accumulation); the caller zeroes them.
  void backward(const Arena& params, const Arena& grads, float loss_scale = 1.0f);
  // The same over resolved handles; `grads` may point anywhere per unit (ZeRO gradient buckets), and where
  // hooks->gradient_write(unit) says overwrite, the unit's gradients are written instead of accumulated.
  void backward(const DebertaTensors& params, const DebertaTensors& grads, float loss_scale,
                DebertaUnitHooks* hooks);

  // Views into the last forward: logits [B, C] (f32); hidden_state(0) = embedding output,
  // hidden_state(l + 1) = output of layer l, each [B, L, D] in the compute dtype (HF's hidden_states).
  Tensor logits() const;
  Tensor hidden_state(int index) const;

 private:
  struct State;
  // Encoder layer `layer`'s forward from hidden_state(layer) into its activation slots, its output into
  // `out`; recompute: the backward's re-run under gradient checkpointing (DebertaConfig).
  void layer_forward(int layer, const DebertaLayerTensors& params, const Tensor& out, bool recompute);
  // Its backward: from the gradient of its output `dout` [B, L, D] (then scratch), the parameter gradients
  // into `grads` (written or accumulated: `write`), the input's gradient into `din_rows` [B L + S2, D] (its
  // first B L rows; dR~ in the rest, added into `drel` [S2, D] through R~'s dropout).
  void layer_backward(int layer, const DebertaLayerTensors& params, const DebertaLayerTensors& grads,
                      const Tensor& dout, const Tensor& din_rows, const Tensor& drel,
                      kernels::GradWrite write);
  DebertaConfig config_;
  std::unique_ptr<State> state_;
};

}  // namespace zt
