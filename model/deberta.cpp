#include "model/deberta.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/cross_entropy.h"
#include "kernels/disentangled_attention.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/mse_loss.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/step_profile.h"

namespace zt {

namespace {

// Dropout sites inside one layer (kernels::dropout_site_id packs step, layer and site). The embedding and
// head sites use layer index num_hidden_layers, past every encoder layer.
enum DropoutSiteIndex : uint32_t {
  kSiteEmbeddings = 0,
  kSiteRelEmbeddings = 1,
  kSiteAttentionProbs = 2,
  kSiteAttentionOutput = 3,
  kSiteFfnOutput = 4,
  kSiteConv = 5,
  kSiteClassifier = 6,
};

std::string layer_prefix(int layer) {
  return str("deberta.encoder.layer.", layer, ".");
}
// A layer's activation slot. With gradient checkpointing every layer uses layer 0's slots: they hold the
// layer the forward or the backward is working on (the backward recomputes them first).
std::string layer_slot(const DebertaConfig& c, int layer, const char* what) {
  return str("layer", c.gradient_checkpointing ? 0 : layer, ".", what);
}

// A view of the first numel(shape) elements of an arena slot planned for a larger (batch, seq).
Tensor prefix_view(const Arena& arena, std::string_view name, Shape shape) {
  Tensor full = arena.tensor(name);
  ZT_CHECK(shape.numel() <= full.numel(), "activation '", name, "' planned for ", full.shape().to_string(),
           " cannot hold ", shape.to_string());
  return Tensor(full.data(), shape, full.dtype(), full.device());
}

// share_att_key: the keys K = x Wk' + bk and the positional keys PK = R~ Wk' + bk (likewise Q and PQ with Wq)
// are one projection of the rows [x; R~], x the layer input [B L, D] and R~ the layer's dropped relative
// table [S2, D]. The plan stores R~ right after x in hidden.l, PK right after K in the layer's k slot, PQ
// after Q, and the backward's dPK after dK (dPQ after dQ) and dR~ after the input gradient, so each pair is
// one GEMM forward, one for dX and one for dW (its K dimension B L + S2), and one column sum for the bias: at
// xlarge's bs 40 the table's 512 rows alone ran ~8-10 us GEMMs and their own column sums, 50 us a layer.
struct TokensAndTable {
  Tensor all;     // [B L + S2, D]
  Tensor tokens;  // [B, L, D]: the first B L rows
  Tensor table;   // [S2, D]: the rows after them
};
TokensAndTable split_tokens_and_table(const Tensor& all, int64_t B, int64_t L, int64_t S2, int64_t D) {
  return {all, all.slice_rows(0, B * L).reshape({B, L, D}), all.slice_rows(B * L, B * L + S2)};
}
TokensAndTable tokens_and_table(const Arena& arena, std::string_view name, int64_t B, int64_t L, int64_t S2,
                                int64_t D) {
  return split_tokens_and_table(prefix_view(arena, name, {B * L + S2, D}), B, L, S2, D);
}

// The dropout of one site in one layer for the current step (p = 0 outside training).
kernels::DropoutSite dropout_site(const DropoutSchedule& dropout, uint32_t layer, uint32_t which, double p) {
  return kernels::DropoutSite{dropout.training ? static_cast<float>(p) : 0.0f, dropout.seed,
                              kernels::dropout_site_id(dropout.step, layer, which)};
}

// Layer `layer`'s attention settings: shapes and relative positions from the config, dropout from the step.
kernels::DisentangledAttentionConfig attention_config(const DebertaConfig& c, const DropoutSchedule& dropout,
                                                      int layer) {
  kernels::DisentangledAttentionConfig attention;
  attention.num_heads = c.num_attention_heads;
  attention.positions = c.relative_positions();
  attention.c2p = c.c2p;
  attention.p2c = c.p2c;
  const kernels::DropoutSite site =
      dropout_site(dropout, layer, kSiteAttentionProbs, c.attention_probs_dropout_prob);
  attention.dropout_p = site.p;
  attention.seed = site.seed;
  attention.site_id = site.site_id;
  return attention;
}

// Runs the hooks when there are any.
struct HookCalls {
  DebertaUnitHooks* hooks;
  void acquire(size_t unit, DebertaUnitHooks::Pass pass) const {
    if (hooks != nullptr) hooks->acquire(unit, pass);
  }
  void release(size_t unit, DebertaUnitHooks::Pass pass) const {
    if (hooks != nullptr) hooks->release(unit, pass);
  }
  void gradients_ready(size_t unit) const {
    if (hooks != nullptr) hooks->gradients_ready(unit);
  }
  kernels::GradWrite gradient_write(size_t unit) const {
    return hooks != nullptr ? hooks->gradient_write(unit) : kernels::GradWrite::accumulate;
  }
};

}  // namespace

DebertaTensors DebertaTensors::bind(const DebertaConfig& c,
                                    const std::function<Tensor(const std::string& name)>& lookup) {
  DebertaTensors t;
  t.embeddings = {lookup("deberta.embeddings.word_embeddings.weight"),
                  lookup("deberta.embeddings.LayerNorm.weight"), lookup("deberta.embeddings.LayerNorm.bias")};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    auto W = [&](const char* what) { return lookup(p + what); };
    t.layers.push_back({W("attention.self.query_proj.weight"), W("attention.self.query_proj.bias"),
                        W("attention.self.key_proj.weight"), W("attention.self.key_proj.bias"),
                        W("attention.self.value_proj.weight"), W("attention.self.value_proj.bias"),
                        W("attention.output.dense.weight"), W("attention.output.dense.bias"),
                        W("attention.output.LayerNorm.weight"), W("attention.output.LayerNorm.bias"),
                        W("intermediate.dense.weight"), W("intermediate.dense.bias"),
                        W("output.dense.weight"), W("output.dense.bias"), W("output.LayerNorm.weight"),
                        W("output.LayerNorm.bias")});
  }
  DebertaSharedTensors& s = t.shared;
  s.rel_embeddings = lookup("deberta.encoder.rel_embeddings.weight");
  s.encoder_ln_weight = lookup("deberta.encoder.LayerNorm.weight");
  s.encoder_ln_bias = lookup("deberta.encoder.LayerNorm.bias");
  if (c.has_conv()) {
    s.conv_weight = lookup("deberta.encoder.conv.conv.weight");
    s.conv_bias = lookup("deberta.encoder.conv.conv.bias");
    s.conv_ln_weight = lookup("deberta.encoder.conv.LayerNorm.weight");
    s.conv_ln_bias = lookup("deberta.encoder.conv.LayerNorm.bias");
  }
  s.pooler_weight = lookup("pooler.dense.weight");
  s.pooler_bias = lookup("pooler.dense.bias");
  s.classifier_weight = lookup("classifier.weight");
  s.classifier_bias = lookup("classifier.bias");
  return t;
}

struct DebertaForSequenceClassification::State {
  int64_t max_batch = 0;
  int64_t max_seq = 0;
  Arena activations;
  // Shape and inputs of the last forward.
  int64_t batch = 0;
  int64_t seq = 0;
  DebertaBatch inputs;
  DropoutSchedule dropout;
  bool has_forward = false;
  DType compute = DType::f32;
  std::optional<size_t> gradient_offset;  // GradientLayout: where the gradient buffer starts

  State(int64_t b, int64_t l, ArenaLayout layout, DeviceKind device, DType compute_dtype)
      : max_batch(b),
        max_seq(l),
        activations("activations", std::move(layout),
                    {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
                     .category = MemoryCategory::activations}),
        compute(compute_dtype) {}
};

ArenaLayout DebertaForSequenceClassification::plan_activations(const DebertaConfig& c, int64_t B, int64_t L,
                                                               DType compute,
                                                               const GradientLayout* gradients) {
  ZT_CHECK(B > 0 && L > 0, "activation plan needs a positive batch and sequence length, got ", B, " x ", L);
  ZT_CHECK(compute == DType::f32 || compute == DType::bf16 || compute == DType::f16,
           "the model computes in f32, bf16 or f16, not ", dtype_name(compute));
  const bool mixed = compute != DType::f32;
  const int64_t D = c.hidden_size, N = c.num_attention_heads, I = c.intermediate_size;
  const int64_t S2 = c.rel_embedding_rows(), C = c.num_labels, n = c.num_hidden_layers;
  const int64_t P = c.pooler_hidden_size;
  ArenaLayout layout;
  // Activations in the compute dtype, the attention probabilities included (the CUDA kernel stores P in the
  // storage dtype, rounded once from its f32 softmax, as HF keeps attention_probs in the model dtype; the CPU
  // backend is f32 only); statistics and the loss path in f32.
  auto add = [&](const std::string& name, Shape shape) { layout.add({name, shape, compute}); };
  auto add_f32 = [&](const std::string& name, Shape shape) { layout.add({name, shape, DType::f32}); };
  // Embeddings: raw gather (LayerNorm input), LayerNorm statistics; h0 = E.
  add("emb.raw", {B, L, D});
  add_f32("emb.mean", {B, L});
  add_f32("emb.rstd", {B, L});
  add("rel.ln", {S2, D});
  add_f32("rel.mean", {S2});
  add_f32("rel.rstd", {S2});
  // hidden.l for l < n: the layer input and its dropped relative table, [x; R~] (tokens_and_table).
  for (int64_t k = 0; k <= n; ++k) add(str("hidden.", k), k < n ? Shape{B * L + S2, D} : Shape{B, L, D});
  if (c.has_conv()) {
    add("conv.t", {B, L, D});   // dropped, masked conv output: the gelu input
    add("conv.s3", {B, L, D});  // LN_c input
    add_f32("conv.mean", {B, L});
    add_f32("conv.rstd", {B, L});
  }
  add("head.cls", {B, D});
  add("head.pp", {B, P});
  add("head.pg", {B, P});
  add("head.pd", {B, P});
  add_f32("head.logits", {B, C});
  if (mixed) add("head.logits16", {B, C});  // the classifier's output before the cast to f32
  add_f32("head.loss", {1});
  // Backward scratch.
  // [dX; dR~], [dQ; dPQ], [dK; dPK] (tokens_and_table); after the layers grad.h's table rows take LN_rel's
  // dx.
  add("grad.h", {B * L + S2, D});
  add("grad.h_next", {B * L + S2, D});
  add("grad.t1", {B, L, D});
  add("grad.t2", {B, L, D});
  add("grad.q", {B * L + S2, D});
  add("grad.k", {B * L + S2, D});
  add("grad.v", {B, L, D});
  add("grad.f", {B, L, I});
  add("grad.g1", {B, L, I});     // gelu(f1): forward's FFN input, recomputed by backward
  add_f32("grad.rel", {S2, D});  // summed over every layer: f32 even in a 16-bit model
  if (mixed) add("grad.rel16", {S2, D});
  add("grad.head_a", {B, P});
  add("grad.head_b", {B, P});
  add("grad.cls", {B, D});
  add_f32("grad.logits", {B, C});
  if (mixed) add("grad.logits16", {B, C});
  // Every layer's saved activations, or with gradient checkpointing one layer's (layer_slot): last, layer 0
  // first, so that a gradient buffer can take the slots the backward has finished with (GradientLayout).
  const int64_t planned_layers = c.gradient_checkpointing ? 1 : n;
  const bool flash = uses_flash_attention(c, L, compute);
  for (int l = 0; l < planned_layers; ++l) {
    for (const char* name : {"q", "k"}) add(layer_slot(c, l, name), {B * L + S2, D});  // [Q; PQ], [K; PK]
    for (const char* name : {"v", "ctx", "s1", "y", "s2"}) add(layer_slot(c, l, name), {B, L, D});
    if (flash)
      add_f32(layer_slot(c, l, "softmax_stats"), {B, N, L, 2});
    else
      add(layer_slot(c, l, "probs"), {B, N, L, L});
    add(layer_slot(c, l, "f1"), {B, L, I});
    for (const char* name : {"ln_a.mean", "ln_a.rstd", "ln_o.mean", "ln_o.rstd"})
      add_f32(layer_slot(c, l, name), {B, L});
  }
  if (gradients != nullptr) {  // the part of the gradient buffer past the last layer's slots
    const size_t end = gradient_offset(c, layout, *gradients) + gradients->bytes;
    const size_t aligned =
        (layout.used_bytes() + layout.alignment() - 1) / layout.alignment() * layout.alignment();
    if (end > aligned) add_f32("gradients.tail", {static_cast<int64_t>((end - aligned + 3) / 4)});
  }
  return layout;
}

namespace {
// The flash path's forward + backward against the stored one's, a layer of xlarge in bf16 on one H100
// (docs/bench/2026-12-06-h100-rerun, call 3): 8 x 1024 6604 against 7040 us, 16 x 512 5123 against 3949.
// Between them (untimed) the stored path stays.
constexpr int64_t kFlashAttentionFromLength = 1024;
static_assert(kFlashAttentionFromLength <= kernels::kStoredAttentionMaxLength + 1);
}  // namespace

bool DebertaForSequenceClassification::uses_flash_attention(const DebertaConfig& c, int64_t max_seq,
                                                            DType compute) {
  switch (c.attention_kernel) {
    case DebertaConfig::AttentionKernel::stored:
      return false;
    case DebertaConfig::AttentionKernel::flash:
      return true;
    case DebertaConfig::AttentionKernel::automatic:
      break;
  }
  // Where the stored path cannot run; below that, in 16 bits with the GPU kernels' head size, from
  // kFlashAttentionFromLength on (the shortest length where the flash path measured at least as fast).
  if (max_seq > kernels::kStoredAttentionMaxLength) return true;
  return compute != DType::f32 && c.head_size() == 64 && max_seq >= kFlashAttentionFromLength;
}

size_t DebertaForSequenceClassification::gradient_offset(const DebertaConfig& c,
                                                         const ArenaLayout& activations,
                                                         const GradientLayout& gradients) {
  const int n = c.num_hidden_layers;
  ZT_CHECK(!c.gradient_checkpointing,
           "gradients on dead activations: not with gradient checkpointing (every layer's backward re-runs "
           "its forward into the same slots)");
  ZT_CHECK(gradients.unit_begin.size() == static_cast<size_t>(n) + 2, "a gradient layout needs ", n + 2,
           " units (embeddings, ", n, " layers, shared), got ", gradients.unit_begin.size());
  // Layer l's slots span [begin[l], end[l]) of the arena, in layer order (plan_activations adds them last);
  // they are the names layer_slot gives, "<prefix><what>".
  std::vector<int64_t> begin(static_cast<size_t>(n), INT64_MAX), end(static_cast<size_t>(n), 0);
  std::vector<std::string> prefixes;
  for (int l = 0; l < n; ++l) prefixes.push_back(layer_slot(c, l, ""));
  for (const ArenaSlot& slot : activations.slots()) {
    for (int l = 0; l < n; ++l) {
      if (slot.name.starts_with(prefixes[static_cast<size_t>(l)])) {
        begin[static_cast<size_t>(l)] =
            std::min(begin[static_cast<size_t>(l)], static_cast<int64_t>(slot.offset));
        end[static_cast<size_t>(l)] = std::max(end[static_cast<size_t>(l)], static_cast<int64_t>(slot.end()));
      }
    }
  }
  // The embeddings' gradients (written after layer 0's backward) above everything but the layer slots; layer
  // l's at or above the end of its own slots; the shared unit's (written from the head's backward on, before
  // any layer's) above every layer's slots.
  auto at = [&](size_t unit) { return static_cast<int64_t>(gradients.unit_begin[unit]); };
  int64_t offset = std::max<int64_t>(0, begin[0] - at(0));
  for (int l = 0; l < n; ++l)
    offset = std::max(offset, end[static_cast<size_t>(l)] - at(static_cast<size_t>(l) + 1));
  offset = std::max(offset, end[static_cast<size_t>(n) - 1] - at(static_cast<size_t>(n) + 1));
  const auto alignment = static_cast<int64_t>(activations.alignment());
  return static_cast<size_t>((offset + alignment - 1) / alignment * alignment);
}

DebertaForSequenceClassification::DebertaForSequenceClassification(DebertaConfig config, int64_t max_batch,
                                                                   int64_t max_seq, DeviceKind device,
                                                                   DType compute,
                                                                   const GradientLayout* gradients)
    : config_(std::move(config)) {
  ZT_CHECK(compute == DType::f32 || device == DeviceKind::cuda, "the CPU backend computes in f32 only, not ",
           dtype_name(compute));
  state_ = std::make_unique<State>(
      max_batch, max_seq, plan_activations(config_, max_batch, max_seq, compute, gradients), device, compute);
  if (gradients != nullptr)
    state_->gradient_offset = gradient_offset(config_, state_->activations.layout(), *gradients);
  ZT_CHECK(config_.relative_attention && config_.share_att_key && !config_.position_biased_input,
           "the model implements DeBERTa-v2 relative attention with shared keys only");
  ZT_CHECK(config_.rel_embeddings_layer_norm, "the model implements norm_rel_ebd = layer_norm only");
  ZT_CHECK(config_.problem_type.value_or("") != "multi_label_classification",
           "problem_type multi_label_classification (BCE over several labels) is not implemented");
  ZT_CHECK(!config_.is_regression() || config_.num_labels == 1,
           "a regression head here has num_labels 1 (one "
           "score per example); the config has problem_type regression with ",
           config_.num_labels, " labels");
}

DebertaForSequenceClassification::~DebertaForSequenceClassification() = default;

void* DebertaForSequenceClassification::gradient_memory() const {
  if (!state_->gradient_offset) return nullptr;
  return static_cast<char*>(state_->activations.data()) + *state_->gradient_offset;
}

DeviceKind DebertaForSequenceClassification::device() const {
  return state_->activations.device();
}

DType DebertaForSequenceClassification::compute_dtype() const {
  return state_->compute;
}

const ArenaLayout& DebertaForSequenceClassification::activation_layout() const {
  return state_->activations.layout();
}

Tensor DebertaForSequenceClassification::logits() const {
  ZT_CHECK(state_->has_forward, "logits() before any forward");
  return prefix_view(state_->activations, "head.logits", {state_->batch, config_.num_labels});
}

Tensor DebertaForSequenceClassification::hidden_state(int index) const {
  ZT_CHECK(state_->has_forward, "hidden_state() before any forward");
  ZT_CHECK(index >= 0 && index <= config_.num_hidden_layers, "hidden_state index ", index, " out of range");
  return prefix_view(state_->activations, str("hidden.", index),
                     {state_->batch, state_->seq, config_.hidden_size});
}

float DebertaForSequenceClassification::forward(const Arena& params, const DebertaBatch& batch,
                                                const DropoutSchedule& dropout) {
  return forward(DebertaTensors::bind(config_, [&](const std::string& name) { return params.tensor(name); }),
                 batch, dropout, nullptr);
}

void DebertaForSequenceClassification::backward(const Arena& params, const Arena& grads, float loss_scale) {
  auto bind = [&](const Arena& arena) {
    return DebertaTensors::bind(config_, [&](const std::string& name) { return arena.tensor(name); });
  };
  backward(bind(params), bind(grads), loss_scale, nullptr);
}

// Encoder layer l's forward from hidden.l: its saved activations into its slots (layer_slot), its output
// into `out` (hidden.{l+1} in the forward; at layer 0 the conv then rewrites it). `recompute`: the backward's
// re-run under gradient checkpointing, which reads the batch, mask and dropout schedule of the last forward
// and so rebuilds the same activations bit for bit; its time is one profile segment, bwd.recompute.
void DebertaForSequenceClassification::layer_forward(int l, const DebertaLayerTensors& P, const Tensor& out,
                                                     bool recompute) {
  State& s = *state_;
  const DebertaConfig& c = config_;
  const int64_t B = s.batch, L = s.seq;
  const int64_t D = c.hidden_size, N = c.num_attention_heads, I = c.intermediate_size;
  const int64_t S2 = c.rel_embedding_rows();
  const float eps = static_cast<float>(c.layer_norm_eps);
  const DropoutSchedule& dropout = s.dropout;
  const DebertaBatch& batch = s.inputs;
  auto A = [&](std::string_view name, Shape shape) { return prefix_view(s.activations, name, shape); };
  auto site = [&](uint32_t layer, uint32_t which, double p) {
    return dropout_site(dropout, layer, which, p);
  };
  const double hidden_p = c.hidden_dropout_prob;
  const Shape bld{B, L, D};
  StepProfile& prof = StepProfile::global();
  auto mark = [&](const char* segment) {
    if (!recompute) prof.mark(segment);
  };
  auto with_table = [&](const std::string& name) {
    return tokens_and_table(s.activations, name, B, L, S2, D);
  };
  const Tensor rel = A("rel.ln", {S2, D});
  const TokensAndTable input = with_table(str("hidden.", l));  // [x; R~]
  const Tensor& x = input.tokens;
  kernels::dropout_forward(rel, input.table, site(l, kSiteRelEmbeddings, hidden_p));
  // [Q; PQ] = [x; R~] Wq' + bq and [K; PK] = [x; R~] Wk' + bk (share_att_key), V = x Wv' + bv.
  const TokensAndTable q = with_table(layer_slot(c, l, "q")), k = with_table(layer_slot(c, l, "k"));
  Tensor v = A(layer_slot(c, l, "v"), bld);
  kernels::linear_forward(input.all, P.query_weight, P.query_bias, q.all);
  kernels::linear_forward(input.all, P.key_weight, P.key_bias, k.all);
  kernels::linear_forward(x, P.value_weight, P.value_bias, v);
  mark("fwd.qkv_projections");

  const kernels::DisentangledAttentionConfig attention = attention_config(c, dropout, l);
  Tensor ctx = A(layer_slot(c, l, "ctx"), bld);
  if (uses_flash_attention(c, s.max_seq, s.compute)) {
    kernels::flash_disentangled_attention_forward(q.tokens, k.tokens, v, c.c2p ? k.table : Tensor(),
                                                  c.p2c ? q.table : Tensor(), batch.attention_mask, attention,
                                                  ctx, A(layer_slot(c, l, "softmax_stats"), {B, N, L, 2}));
  } else {
    kernels::disentangled_attention_forward(q.tokens, k.tokens, v, c.c2p ? k.table : Tensor(),
                                            c.p2c ? q.table : Tensor(), batch.attention_mask, attention, ctx,
                                            A(layer_slot(c, l, "probs"), {B, N, L, L}));
  }
  mark("fwd.attention_core");

  Tensor s1 = A(layer_slot(c, l, "s1"), bld);
  kernels::linear_forward(ctx, P.attention_output_weight, P.attention_output_bias, s1);
  Tensor y = A(layer_slot(c, l, "y"), bld);
  // s1 <- Drop(s1) + x, y = LN_a(s1): one pass (bitwise the dropout, add and LayerNorm kernels in turn).
  kernels::dropout_add_layernorm_forward(
      s1, x, site(l, kSiteAttentionOutput, hidden_p), P.attention_ln_weight, P.attention_ln_bias, eps, y,
      A(layer_slot(c, l, "ln_a.mean"), {B, L}), A(layer_slot(c, l, "ln_a.rstd"), {B, L}));
  mark("fwd.attention_output");

  Tensor f1 = A(layer_slot(c, l, "f1"), {B, L, I}), g1 = A("grad.g1", {B, L, I});
  kernels::linear_forward(y, P.intermediate_weight, P.intermediate_bias, f1);
  kernels::gelu_forward(f1, g1);
  Tensor s2 = A(layer_slot(c, l, "s2"), bld);
  kernels::linear_forward(g1, P.output_weight, P.output_bias, s2);
  // s2 <- Drop(s2) + y, out = LN_o(s2).
  kernels::dropout_add_layernorm_forward(s2, y, site(l, kSiteFfnOutput, hidden_p), P.output_ln_weight,
                                         P.output_ln_bias, eps, out, A(layer_slot(c, l, "ln_o.mean"), {B, L}),
                                         A(layer_slot(c, l, "ln_o.rstd"), {B, L}));
  mark("fwd.ffn");
  if (recompute) prof.mark("bwd.recompute");
}

// Encoder layer l's backward (the reverse of layer_forward) from the gradient of its output `dout` [B, L, D]
// (read, then used as scratch): its parameter gradients into `grads` (first writes as `write` says), its
// input's gradient into the first B L rows of `din_rows` [B L + S2, D] and dR~'s into the rows after them,
// which it also adds, dropped, into `drel`. Reads the activations of the last forward (or recompute).
void DebertaForSequenceClassification::layer_backward(int l, const DebertaLayerTensors& P,
                                                      const DebertaLayerTensors& GP, const Tensor& dout,
                                                      const Tensor& din_rows, const Tensor& drel,
                                                      kernels::GradWrite write) {
  State& s = *state_;
  const DebertaConfig& c = config_;
  const int64_t B = s.batch, L = s.seq;
  const int64_t D = c.hidden_size, N = c.num_attention_heads, I = c.intermediate_size;
  const int64_t S2 = c.rel_embedding_rows();
  const Arena& act = s.activations;
  const DropoutSchedule& dropout = s.dropout;
  auto A = [&](std::string_view name, Shape shape) { return prefix_view(act, name, shape); };
  auto site = [&](uint32_t layer, uint32_t which, double p) {
    return dropout_site(dropout, layer, which, p);
  };
  const double hidden_p = c.hidden_dropout_prob;
  const Shape bld{B, L, D};
  StepProfile& prof = StepProfile::global();
  auto with_table = [&](const std::string& name) { return tokens_and_table(act, name, B, L, S2, D); };
  const TokensAndTable dx_rows = split_tokens_and_table(din_rows, B, L, S2, D);
  const TokensAndTable input = with_table(str("hidden.", l));  // [x; R~]
  const Tensor& x = input.tokens;
  const Tensor& dz = dout;  // gradient w.r.t. the FFN LayerNorm output
  Tensor t1 = A("grad.t1", bld);
  // z = LN_o(s2), s2 = Drop(g1 Wo2' + bo2) + y: dy = dLN (the residual's share, accumulated into below) and
  // ds2 = Drop'(dy) from one kernel.
  Tensor ds2 = t1;
  Tensor dy = dx_rows.tokens;
  kernels::layernorm_dropout_backward(
      dz, A(layer_slot(c, l, "s2"), bld), P.output_ln_weight, A(layer_slot(c, l, "ln_o.mean"), {B, L}),
      A(layer_slot(c, l, "ln_o.rstd"), {B, L}), site(l, kSiteFfnOutput, hidden_p), dy, ds2,
      GP.output_ln_weight, GP.output_ln_bias, write);
  // g1 = gelu(f1) is recomputed, not stored. The output projection's dx GEMM (dg1 = ds2 Wo2, which reads
  // only g1's shape) goes first, so that one pass over f1 gives both g1 for the weight gradient and
  // df = dg1 * gelu'(f1).
  Tensor df = A("grad.f", {B, L, I}), g1 = A("grad.g1", {B, L, I}), f1 = A(layer_slot(c, l, "f1"), {B, L, I});
  kernels::linear_backward(ds2, g1, P.output_weight, df, Tensor(), Tensor());
  // The same pass sums df over the rows: the intermediate projection's bias gradient (no pass of its own).
  kernels::gelu_recompute_and_backward(df, f1, g1, df, GP.intermediate_bias, write);
  kernels::linear_backward(ds2, g1, P.output_weight, Tensor(), GP.output_weight, GP.output_bias,
                           /*accumulate_dx=*/false, write);
  kernels::linear_backward(df, A(layer_slot(c, l, "y"), bld), P.intermediate_weight, dy,
                           GP.intermediate_weight, Tensor(), /*accumulate_dx=*/true, write);
  prof.mark("bwd.ffn");
  // y = LN_a(s1), s1 = Drop(ctx Wo' + bo) + x.
  // dx = dLN (the layer-input gradient's residual part, written over dy) and ds1 = Drop'(dx), one kernel.
  Tensor ds1 = dout;  // free again: dz was consumed above
  Tensor dx = dy;
  kernels::layernorm_dropout_backward(
      dy, A(layer_slot(c, l, "s1"), bld), P.attention_ln_weight, A(layer_slot(c, l, "ln_a.mean"), {B, L}),
      A(layer_slot(c, l, "ln_a.rstd"), {B, L}), site(l, kSiteAttentionOutput, hidden_p), dx, ds1,
      GP.attention_ln_weight, GP.attention_ln_bias, write);
  Tensor dctx = t1;
  kernels::linear_backward(ds1, A(layer_slot(c, l, "ctx"), bld), P.attention_output_weight, dctx,
                           GP.attention_output_weight, GP.attention_output_bias, /*accumulate_dx=*/false,
                           write);
  prof.mark("bwd.attention_output");

  // [dQ; dPQ] and [dK; dPK]: the attention accumulates the table rows, so they start at zero.
  const TokensAndTable dq = with_table("grad.q"), dk = with_table("grad.k");
  Tensor dv = A("grad.v", bld);
  kernels::fill(dq.table, 0.0f);
  kernels::fill(dk.table, 0.0f);
  const kernels::DisentangledAttentionConfig attention = attention_config(c, dropout, l);
  const TokensAndTable q = with_table(layer_slot(c, l, "q")), k = with_table(layer_slot(c, l, "k"));
  if (uses_flash_attention(c, s.max_seq, s.compute)) {
    kernels::flash_disentangled_attention_backward(
        q.tokens, k.tokens, A(layer_slot(c, l, "v"), bld), c.c2p ? k.table : Tensor(),
        c.p2c ? q.table : Tensor(), s.inputs.attention_mask, A(layer_slot(c, l, "ctx"), bld),
        A(layer_slot(c, l, "softmax_stats"), {B, N, L, 2}), dctx, attention, dq.tokens, dk.tokens, dv,
        c.c2p ? dk.table : Tensor(), c.p2c ? dq.table : Tensor());
  } else {
    kernels::disentangled_attention_backward(
        q.tokens, k.tokens, A(layer_slot(c, l, "v"), bld), c.c2p ? k.table : Tensor(),
        c.p2c ? q.table : Tensor(), s.inputs.attention_mask, A(layer_slot(c, l, "probs"), {B, N, L, L}), dctx,
        attention, dq.tokens, dk.tokens, dv, c.c2p ? dk.table : Tensor(), c.p2c ? dq.table : Tensor());
  }
  prof.mark("bwd.attention_core");

  // [dx; dR~] += [dQ; dPQ] Wq + [dK; dPK] Wk (rows of a table term c2p/p2c leaves out: x's alone), then
  // dx += dV Wv; dR~ starts at zero. Wq/bq and Wk/bk get both terms from one GEMM and one column sum each.
  kernels::fill(dx_rows.table, 0.0f);
  auto project_back = [&](const TokensAndTable& dy, bool with_table_rows, const Tensor& weight,
                          const Tensor& dweight, const Tensor& dbias) {
    if (with_table_rows)
      kernels::linear_backward(dy.all, input.all, weight, din_rows, dweight, dbias, true, write);
    else
      kernels::linear_backward(dy.tokens, x, weight, dx, dweight, dbias, true, write);
  };
  project_back(dq, c.p2c, P.query_weight, GP.query_weight, GP.query_bias);
  project_back(dk, c.c2p, P.key_weight, GP.key_weight, GP.key_bias);
  kernels::linear_backward(dv, x, P.value_weight, dx, GP.value_weight, GP.value_bias, true, write);
  Tensor drel_dropped = dx_rows.table;
  kernels::dropout_backward(drel_dropped, drel_dropped, site(l, kSiteRelEmbeddings, hidden_p));
  kernels::add_inplace(drel, drel_dropped);
}

float DebertaForSequenceClassification::forward(const DebertaTensors& params, const DebertaBatch& batch,
                                                const DropoutSchedule& dropout, DebertaUnitHooks* hooks) {
  State& s = *state_;
  const DebertaConfig& c = config_;
  ZT_CHECK(batch.input_ids.rank() == 2 && batch.input_ids.dtype() == DType::i64,
           "input_ids must be i64 [B, L], got ", batch.input_ids.describe());
  const int64_t B = batch.input_ids.dim(0), L = batch.input_ids.dim(1);
  ZT_CHECK(B <= s.max_batch && L <= s.max_seq, "batch ", B, " x ", L, " exceeds the planned ", s.max_batch,
           " x ", s.max_seq);
  check_shape(batch.attention_mask, {B, L}, "attention_mask");
  ZT_CHECK(batch.input_ids.device() == device() && batch.attention_mask.device() == device() &&
               (!batch.labels.defined() || batch.labels.numel() == 0 || batch.labels.device() == device()),
           "the batch must live where the model runs (", device() == DeviceKind::cuda ? "cuda" : "cpu", ")");
  if (batch.labels.defined() && batch.labels.numel() > 0) {
    check_shape(batch.labels, {B}, "labels");
    const DType want = config_.is_regression() ? DType::f32 : DType::i64;
    ZT_CHECK(batch.labels.dtype() == want, "labels must be ", dtype_name(want), " for a ",
             config_.is_regression() ? "regression" : "classification", " head, got ",
             batch.labels.describe());
  }
  s.batch = B;
  s.seq = L;
  s.inputs = batch;
  s.dropout = dropout;
  s.has_forward = true;

  const int64_t D = c.hidden_size;
  const int64_t S2 = c.rel_embedding_rows(), n = c.num_hidden_layers, P = c.pooler_hidden_size;
  const float eps = static_cast<float>(c.layer_norm_eps);
  const Arena& act = s.activations;
  auto A = [&](std::string_view name, Shape shape) { return prefix_view(act, name, shape); };
  auto site = [&](uint32_t layer, uint32_t which, double p) {
    return dropout_site(dropout, layer, which, p);
  };
  const double hidden_p = c.hidden_dropout_prob;
  const Shape bld{B, L, D};
  StepProfile& prof = StepProfile::global();  // segment marks: no-ops unless profiling is on
  const HookCalls hook{hooks};
  constexpr auto kPass = DebertaUnitHooks::Pass::forward;
  const size_t shared = shared_unit(c);

  // Embeddings.
  const Tensor& mask = batch.attention_mask;
  Tensor emb_raw = A("emb.raw", bld);
  hook.acquire(kEmbeddingsUnit, kPass);
  kernels::embedding_forward(batch.input_ids, params.embeddings.word_embeddings, emb_raw);
  Tensor h0 = A("hidden.0", bld);
  kernels::layernorm_forward(emb_raw, params.embeddings.ln_weight, params.embeddings.ln_bias, eps, h0,
                             A("emb.mean", {B, L}), A("emb.rstd", {B, L}));
  hook.release(kEmbeddingsUnit, kPass);
  kernels::mask_rows_forward(h0, mask, h0);
  kernels::dropout_forward(h0, h0, site(n, kSiteEmbeddings, hidden_p));

  // Relative embedding table, layer-normed once per forward.
  Tensor rel = A("rel.ln", {S2, D});
  hook.acquire(shared, kPass);
  kernels::layernorm_forward(params.shared.rel_embeddings, params.shared.encoder_ln_weight,
                             params.shared.encoder_ln_bias, eps, rel, A("rel.mean", {S2}),
                             A("rel.rstd", {S2}));
  prof.mark("fwd.embeddings");

  for (int l = 0; l < n; ++l) {
    hook.acquire(layer_unit(l), kPass);
    Tensor out = A(str("hidden.", l + 1), bld);
    layer_forward(l, params.layers[static_cast<size_t>(l)], out, /*recompute=*/false);
    hook.release(layer_unit(l), kPass);

    if (l == 0 && c.has_conv()) {
      // ConvLayer: its input is the embedding output E, its residual the layer-0 output (§5).
      Tensor t = A("conv.t", bld), s3 = A("conv.s3", bld);
      kernels::conv1d_forward(h0, params.shared.conv_weight, params.shared.conv_bias, t);
      kernels::mask_rows_forward(t, mask, t);
      kernels::dropout_forward(t, t, site(l, kSiteConv, hidden_p));
      kernels::gelu_forward(t, s3);
      kernels::add_inplace(s3, out);
      kernels::layernorm_forward(s3, params.shared.conv_ln_weight, params.shared.conv_ln_bias, eps, out,
                                 A("conv.mean", {B, L}), A("conv.rstd", {B, L}));
      kernels::mask_rows_forward(out, mask, out);
      prof.mark("fwd.conv");
    }
  }

  // Head: ContextPooler on the [CLS] row, then the classifier.
  Tensor last = A(str("hidden.", n), bld);
  Tensor cls = A("head.cls", {B, D});
  kernels::select_token_forward(last, 0, cls);
  Tensor pp = A("head.pp", {B, P}), pg = A("head.pg", {B, P}), pd = A("head.pd", {B, P});
  kernels::linear_forward(cls, params.shared.pooler_weight, params.shared.pooler_bias, pp);
  kernels::gelu_forward(pp, pg);
  kernels::dropout_forward(pg, pd, site(n, kSiteClassifier, c.classifier_dropout()));
  Tensor logits = A("head.logits", {B, c.num_labels});
  if (s.compute == DType::f32) {
    kernels::linear_forward(pd, params.shared.classifier_weight, params.shared.classifier_bias, logits);
  } else {
    Tensor logits16 = A("head.logits16", {B, c.num_labels});
    kernels::linear_forward(pd, params.shared.classifier_weight, params.shared.classifier_bias, logits16);
    kernels::copy(logits16, logits);  // cross-entropy and the caller read f32 logits
  }
  hook.release(shared, kPass);
  if (!batch.labels.defined() || batch.labels.numel() == 0) return 0.0f;
  Tensor loss = A("head.loss", {1});
  if (c.is_regression()) {
    kernels::mse_loss_forward(logits, batch.labels, loss);
  } else {
    kernels::cross_entropy_forward(logits, batch.labels, loss);
  }
  prof.mark("fwd.head");
  float value = 0.0f;
  copy_tensor(loss, Tensor(&value, {1}, DType::f32));
  return value;
}

void DebertaForSequenceClassification::backward(const DebertaTensors& params, const DebertaTensors& grads,
                                                float loss_scale, DebertaUnitHooks* hooks) {
  State& s = *state_;
  ZT_CHECK(s.has_forward, "backward() before any forward");
  ZT_CHECK(s.inputs.labels.defined() && s.inputs.labels.numel() > 0,
           "backward() needs a forward with labels");
  const DebertaConfig& c = config_;
  const int64_t B = s.batch, L = s.seq;
  const int64_t D = c.hidden_size;
  const int64_t S2 = c.rel_embedding_rows(), n = c.num_hidden_layers, P = c.pooler_hidden_size;
  const Arena& act = s.activations;
  const DropoutSchedule& dropout = s.dropout;
  auto A = [&](std::string_view name, Shape shape) { return prefix_view(act, name, shape); };
  const HookCalls hook{hooks};
  constexpr auto kPass = DebertaUnitHooks::Pass::backward;
  const size_t shared = shared_unit(c);
  auto site = [&](uint32_t layer, uint32_t which, double p) {
    return dropout_site(dropout, layer, which, p);
  };
  const double hidden_p = c.hidden_dropout_prob;
  const Shape bld{B, L, D};
  const Tensor& mask = s.inputs.attention_mask;
  StepProfile& prof = StepProfile::global();

  // Head.
  hook.acquire(shared, kPass);
  Tensor dlogits = A("grad.logits", {B, c.num_labels});
  if (c.is_regression()) {
    kernels::mse_loss_backward(A("head.logits", {B, c.num_labels}), s.inputs.labels, loss_scale, dlogits);
  } else {
    kernels::cross_entropy_backward(A("head.logits", {B, c.num_labels}), s.inputs.labels, loss_scale,
                                    dlogits);
  }
  if (s.compute != DType::f32) {
    Tensor dlogits16 = A("grad.logits16", {B, c.num_labels});
    kernels::copy(dlogits, dlogits16);
    dlogits = dlogits16;
  }
  Tensor dpd = A("grad.head_a", {B, P}), dpp = A("grad.head_b", {B, P});
  kernels::linear_backward(dlogits, A("head.pd", {B, P}), params.shared.classifier_weight, dpd,
                           grads.shared.classifier_weight, grads.shared.classifier_bias);
  kernels::dropout_backward(dpd, dpd, site(n, kSiteClassifier, c.classifier_dropout()));
  kernels::gelu_backward(dpd, A("head.pp", {B, P}), dpp);
  Tensor dcls = A("grad.cls", {B, D});
  kernels::linear_backward(dpp, A("head.cls", {B, D}), params.shared.pooler_weight, dcls,
                           grads.shared.pooler_weight, grads.shared.pooler_bias);
  // dh: the gradient of the current layer's output; dh_next: where the layer writes its input's gradient
  // (and, in the table rows after it, R~'s: tokens_and_table). The two buffers swap roles after each layer
  // instead of copying one into the other.
  auto with_table = [&](const std::string& name) { return tokens_and_table(act, name, B, L, S2, D); };
  TokensAndTable dh_rows = with_table("grad.h"), dh_next_rows = with_table("grad.h_next");
  Tensor dh = dh_rows.tokens, dh_next = dh_next_rows.tokens;
  kernels::select_token_backward(dcls, 0, dh);  // zero everywhere but the [CLS] rows
  prof.mark("bwd.head");

  Tensor drel = A("grad.rel", {S2, D});
  kernels::fill(drel, 0.0f);
  Tensor dconv_input = A("grad.t2", bld);  // dE from the conv, added to the layer-0 input gradient

  for (int l = static_cast<int>(n) - 1; l >= 0; --l) {
    const DebertaLayerTensors& P = params.layers[static_cast<size_t>(l)];
    const DebertaLayerTensors& GP = grads.layers[static_cast<size_t>(l)];
    hook.acquire(layer_unit(l), kPass);
    // Every gradient of the layer is written once below before anything adds to it (Wq, bq, Wk, bk take
    // their positional terms last), so `write` applies to those first writes.
    const kernels::GradWrite write = hook.gradient_write(layer_unit(l));
    // Gradient checkpointing: the layer's activations again, from hidden.l. Its output is not read by its
    // backward (hidden.{l+1} fed layer l + 1, whose backward is done), so it goes into dh_next, which the
    // LayerNorm backward below overwrites first.
    if (c.gradient_checkpointing) layer_forward(l, P, dh_next, /*recompute=*/true);
    if (l == 0 && c.has_conv()) {
      // h1 = LN_c(z + gelu(t)) * m.
      Tensor ds3 = A("grad.t1", bld);
      kernels::mask_rows_backward(dh, mask, ds3);
      kernels::layernorm_backward(ds3, A("conv.s3", bld), params.shared.conv_ln_weight,
                                  A("conv.mean", {B, L}), A("conv.rstd", {B, L}), ds3,
                                  grads.shared.conv_ln_weight, grads.shared.conv_ln_bias);
      kernels::copy(ds3, dh);  // dz = ds3 (residual branch)
      Tensor dt = ds3;
      kernels::gelu_backward(ds3, A("conv.t", bld), dt);
      kernels::dropout_backward(dt, dt, site(l, kSiteConv, hidden_p));
      kernels::mask_rows_backward(dt, mask, dt);
      kernels::conv1d_backward(dt, A("hidden.0", bld), params.shared.conv_weight, dconv_input,
                               grads.shared.conv_weight, grads.shared.conv_bias);
      prof.mark("bwd.conv");
    }
    layer_backward(l, P, GP, dh, dh_next_rows.all, drel, write);
    hook.release(layer_unit(l), kPass);
    hook.gradients_ready(layer_unit(l));

    if (l == 0 && c.has_conv()) kernels::add_inplace(dh_next, dconv_input);
    std::swap(dh, dh_next);  // dx (written into dh_next) is the next layer's output gradient
    std::swap(dh_rows, dh_next_rows);
    prof.mark("bwd.qkv_projections");
  }

  // Embeddings: E = Drop(LN_emb(gather) * m).
  kernels::dropout_backward(dh, dh, site(n, kSiteEmbeddings, hidden_p));
  kernels::mask_rows_backward(dh, mask, dh);
  Tensor demb = A("grad.t1", bld);
  hook.acquire(kEmbeddingsUnit, kPass);
  const kernels::GradWrite embeddings_write = hook.gradient_write(kEmbeddingsUnit);
  kernels::layernorm_backward(dh, A("emb.raw", bld), params.embeddings.ln_weight, A("emb.mean", {B, L}),
                              A("emb.rstd", {B, L}), demb, grads.embeddings.ln_weight,
                              grads.embeddings.ln_bias, embeddings_write);
  // The table's gradient is a scatter into the rows the batch names: written, the rest must read zero.
  if (embeddings_write == kernels::GradWrite::overwrite)
    kernels::fill(grads.embeddings.word_embeddings, 0.0f);
  const int64_t padding_idx = c.pad_token_id.value_or(-1);
  kernels::embedding_backward(s.inputs.input_ids, demb, grads.embeddings.word_embeddings, padding_idx);
  hook.release(kEmbeddingsUnit, kPass);
  hook.gradients_ready(kEmbeddingsUnit);

  // Relative table: LN_rel backward writes its input gradient, which then accumulates into the parameter's.
  // In a 16-bit model LN_rel's input (the parameter copy) is 16-bit, so its dy is too: the f32 sum over the
  // layers is rounded once here.
  if (s.compute != DType::f32) {
    Tensor drel16 = A("grad.rel16", {S2, D});
    kernels::copy(drel, drel16);
    drel = drel16;
  }
  Tensor drel_raw = dh_rows.table;  // free: every layer's dR~ is in drel
  kernels::layernorm_backward(drel, params.shared.rel_embeddings, params.shared.encoder_ln_weight,
                              A("rel.mean", {S2}), A("rel.rstd", {S2}), drel_raw,
                              grads.shared.encoder_ln_weight, grads.shared.encoder_ln_bias);
  Tensor grel = grads.shared.rel_embeddings;
  kernels::add_inplace(grel, drel_raw);
  hook.release(shared, kPass);
  hook.gradients_ready(shared);
  prof.mark("bwd.embeddings");
}

}  // namespace zt
