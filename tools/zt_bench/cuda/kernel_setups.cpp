#include "tools/zt_bench/cuda/kernel_setups.h"

#include <span>
#include <string>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/disentangled_attention.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#include "optim/grad_clip.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"

namespace zt_bench {

namespace kernels = zt::kernels;
namespace optim = zt::optim;

Dims xlarge_dims(int64_t batch, int64_t seq) {
  const zt::DebertaConfig c = zt::deberta_v2_xlarge_config();
  const auto positions = kernels::RelativePositionConfig::from_model_config(
      c.position_buckets, c.max_relative_positions, c.max_position_embeddings);
  const auto f = [](double x) { return static_cast<float>(x); };
  return {batch,
          seq,
          c.hidden_size,
          c.num_attention_heads,
          c.intermediate_size,
          c.vocab_size,
          c.conv_kernel_size,
          f(c.layer_norm_eps),
          f(c.hidden_dropout_prob),
          f(c.attention_probs_dropout_prob),
          positions,
          c};
}

Dims validation_dims() {
  const auto positions = kernels::RelativePositionConfig::from_model_config(16, -1, 64);
  return {3, 19, 48, 3, 56, 97, 3, 1e-7f, 0.1f, 0.1f, positions, zt::deberta_small_cpu_config()};
}

namespace {

// Random ids in [0, vocab) with a duplicate and padding_idx 0 among them.
std::vector<int64_t> token_ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>(splitmix64(i) % static_cast<uint64_t>(vocab));
  ids[1] = ids[0], ids[2] = 0;
  return ids;
}

// 1 for real tokens, 0 for padding: every odd batch item is padded after two thirds of L.
std::vector<int64_t> padding_mask(int64_t batch, int64_t length) {
  std::vector<int64_t> mask(static_cast<size_t>(batch * length));
  for (int64_t i = 0; i < batch * length; ++i)
    mask[i] = i % length < length - (i / length % 2) * (length / 3);
  return mask;
}

// y = x W^T + b.  bytes = 2 (R D + I D + I + R I): x, W, b read, y written;  flops = 2 R I D.
Setup linear_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.I, d.D}, -0.1f, 0.1f), b = e.in(bf16, {d.I});
  const int y = e.out("y", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x) + " " + e.desc("W", w), 2.0 * (d.R() * d.D + d.I * d.D + d.I + d.R() * d.I),
               2.0 * d.R() * d.I * d.D,
               [=](const Args& t, bool) { kernels::linear_forward(t[x], t[w], t[b], t[y]); });
}

// dx = dy W, dW += dy^T x, db += sum dy.  bytes = 2 (R I + 2 R D + I D): dy, x, W read, dx written
// + 4 * 2 (I D + I): dW, db read and written;  flops = 4 R I D (one GEMM each for dx and dW).
Setup linear_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.I, d.D}, -0.1f, 0.1f);
  const int dy = e.in(bf16, {d.B, d.L, d.I}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dw = e.acc("dw", f32, {d.I, d.D}), db = e.acc("db", f32, {d.I});
  return Setup(
      e.desc("dy", dy) + " " + e.desc("W", w),
      2.0 * (d.R() * d.I + 2 * d.R() * d.D + d.I * d.D) + 8.0 * (d.I * d.D + d.I), 4.0 * d.R() * d.I * d.D,
      [=](const Args& t, bool) { kernels::linear_backward(t[dy], t[x], t[w], t[dx], t[dw], t[db]); });
}

// bytes = 2 (2 R D + 2 D): x read, y written, gamma, beta read + 4 * 2 R: mean, rstd written. gamma and
// beta are bf16 like the 16-bit parameter copy.
Setup layernorm_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), gamma = e.in(bf16, {d.D}, 0.5f, 1.5f), beta = e.in(bf16, {d.D});
  const int y = e.out("y", bf16, {d.B, d.L, d.D}), mean = e.out("mean", f32, {d.B, d.L}),
            rstd = e.out("rstd", f32, {d.B, d.L});
  const float eps = d.eps;
  return Setup(e.desc("x", x), 2.0 * (2 * d.R() * d.D + 2 * d.D) + 8.0 * d.R(), 0, [=](const Args& t, bool) {
    kernels::layernorm_forward(t[x], t[gamma], t[beta], eps, t[y], t[mean], t[rstd]);
  });
}

// bytes = 2 (3 R D + D): dy, x read, dx written, gamma read + 4 * 2 R: mean, rstd read
// + 4 * 4 D: dgamma, dbeta read and written.
Setup layernorm_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), gamma = e.in(bf16, {d.D}, 0.5f, 1.5f), beta = e.in(bf16, {d.D});
  const int y = e.work(bf16, {d.B, d.L, d.D}), mean = e.work(f32, {d.B, d.L}), rstd = e.work(f32, {d.B, d.L});
  const int dy = e.in(bf16, {d.B, d.L, d.D}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dgamma = e.acc("dgamma", f32, {d.D}), dbeta = e.acc("dbeta", f32, {d.D});
  const float eps = d.eps;
  return Setup(
      e.desc("x", x), 2.0 * (3 * d.R() * d.D + d.D) + 8.0 * d.R() + 16.0 * d.D, 0,
      [=](const Args& t, bool) {
        kernels::layernorm_backward(t[dy], t[x], t[gamma], t[mean], t[rstd], t[dx], t[dgamma], t[dbeta]);
      },
      [=](const Args& t, bool) {
        kernels::layernorm_forward(t[x], t[gamma], t[beta], eps, t[y], t[mean], t[rstd]);
      });
}

// On the intermediate activation. bytes = 2 * 2 n: x read, y written.
Setup gelu_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.I}, -4.0f, 4.0f), y = e.out("y", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x), 4.0 * d.R() * d.I, 0,
               [=](const Args& t, bool) { kernels::gelu_forward(t[x], t[y]); });
}

// bytes = 3 * 2 n: dy, x read, dx written.
Setup gelu_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.I}, -4.0f, 4.0f), dy = e.in(bf16, {d.B, d.L, d.I});
  const int dx = e.out("dx", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x), 6.0 * d.R() * d.I, 0,
               [=](const Args& t, bool) { kernels::gelu_backward(t[dy], t[x], t[dx]); });
}

// Hidden dropout. bytes = 2 * 2 n: x read, y written (the keep mask is Philox arithmetic, not memory).
Setup dropout_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), y = e.out("y", bf16, {d.B, d.L, d.D});
  const kernels::DropoutSite site{d.hidden_dropout, 42, kernels::dropout_site_id(1, 0, 0)};
  return Setup(str(e.desc("x", x), " p=", site.p), 4.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::dropout_forward(t[x], t[y], site); });
}

// The residual sum. bytes = 3 * 2 n: a, b read, out written.
Setup residual_add(Env& e, const Dims& d) {
  const int a = e.in(bf16, {d.B, d.L, d.D}), b = e.in(bf16, {d.B, d.L, d.D}),
            out = e.out("out", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("a", a), 6.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::add(t[a], t[b], t[out]); });
}

// bytes = 8 R ids + 2 R D gathered rows read + 2 R D written (the rest of the table is never touched).
Setup embedding_forward(Env& e, const Dims& d) {
  const int ids = e.ids({d.B, d.L}, token_ids(d.R(), d.V)), table = e.in(bf16, {d.V, d.D});
  const int out = e.out("out", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("ids", ids) + " " + e.desc("table", table), 8.0 * d.R() + 4.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::embedding_forward(t[ids], t[table], t[out]); });
}

// Scatter-add into the f32 table gradient, padding_idx 0 skipped. bytes = 8 R ids + 2 R D dout read
// + 4 * 2 R D touched rows read and written (atomic adds).
Setup embedding_backward(Env& e, const Dims& d) {
  const int ids = e.ids({d.B, d.L}, token_ids(d.R(), d.V)), dout = e.in(bf16, {d.B, d.L, d.D});
  const int dtable = e.acc("dtable", f32, {d.V, d.D});
  return Setup(e.desc("dout", dout) + " " + e.desc("dtable", dtable), 8.0 * d.R() + 10.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::embedding_backward(t[ids], t[dout], t[dtable], 0); });
}

// Labels of B rows over 2 classes (MRPC), every fifth row ignored (-100).
std::vector<int64_t> class_labels(int64_t n) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 5 == 2 ? -100 : i % 2;
  return labels;
}

// f32 by contract; tiny, so launch-bound. bytes = 4 B C logits + 8 B labels read + 4 loss written.
Setup cross_entropy_forward(Env& e, const Dims& d) {
  const int logits = e.in(f32, {d.B, 2}, -3.0f, 3.0f), labels = e.ids({d.B}, class_labels(d.B));
  const int loss = e.out("loss", f32, {1});
  return Setup(e.desc("logits", logits), 8.0 * d.B + 8.0 * d.B + 4.0, 0,
               [=](const Args& t, bool) { kernels::cross_entropy_forward(t[logits], t[labels], t[loss]); });
}

// bytes = 2 * 4 B C: logits read, dlogits written + 8 B labels.
Setup cross_entropy_backward(Env& e, const Dims& d) {
  const int logits = e.in(f32, {d.B, 2}, -3.0f, 3.0f), labels = e.ids({d.B}, class_labels(d.B));
  const int dlogits = e.out("dlogits", f32, {d.B, 2});
  return Setup(e.desc("logits", logits), 16.0 * d.B + 8.0 * d.B, 0, [=](const Args& t, bool) {
    kernels::cross_entropy_backward(t[logits], t[labels], 0.5f, t[dlogits]);
  });
}

// Disentangled attention with c2p and p2c and attention dropout. q, k, v [B, L, D], tables [2S, D], probs
// [B, N, L, L], all bf16 (the GPU saves probs in the storage dtype). W = c(L-1, 0) - c(0, L-1) + 1 table rows
// are reached (255 at L 128), so the c2p and p2c score GEMMs are [L, d] x [d, W] per head; dpos_* are bf16,
// the dy of the position projections' linear.
// What both attention paths take and count: the inputs, the context, the op's configuration and the
// figures of the byte and FLOP counts.
struct AttentionInputs {
  int q, k, v, pos_key, pos_query, mask, context;
  kernels::DisentangledAttentionConfig config;
  double bn, L, d, W, tables;  // B N, L, head size, W, elements of both tables
  AttentionInputs(Env& e, const Dims& dims, bool saved_only) {
    const int64_t rows = 2 * dims.positions.att_span();
    q = e.in(bf16, {dims.B, dims.L, dims.D}), k = e.in(bf16, {dims.B, dims.L, dims.D});
    v = e.in(bf16, {dims.B, dims.L, dims.D});
    pos_key = e.in(bf16, {rows, dims.D}), pos_query = e.in(bf16, {rows, dims.D});
    mask = e.ids({dims.B, dims.L}, padding_mask(dims.B, dims.L));
    context = saved_only ? e.work(bf16, {dims.B, dims.L, dims.D})
                         : e.out("context", bf16, {dims.B, dims.L, dims.D});
    config.num_heads = dims.N;
    config.positions = dims.positions;
    config.dropout_p = dims.attention_dropout;
    config.seed = 42;
    config.site_id = kernels::dropout_site_id(1, 0, 1);
    bn = static_cast<double>(dims.B * dims.N), L = static_cast<double>(dims.L);
    d = static_cast<double>(dims.D / dims.N), tables = 2.0 * static_cast<double>(rows * dims.D);
    W = static_cast<double>(kernels::c2p_index(dims.L - 1, 0, dims.positions) -
                            kernels::c2p_index(0, dims.L - 1, dims.positions) + 1);
  }
};
struct Attention : AttentionInputs {
  int probs;
  Attention(Env& e, const Dims& dims, bool saved_only)
      : AttentionInputs(e, dims, saved_only),
        probs(saved_only ? e.work(bf16, {dims.B, dims.N, dims.L, dims.L})
                         : e.out("probs", bf16, {dims.B, dims.N, dims.L, dims.L})) {}
  void forward(const Args& t) const {
    kernels::disentangled_attention_forward(t[q], t[k], t[v], t[pos_key], t[pos_query], t[mask], config,
                                            t[context], t[probs]);
  }
};

// flops = B N (4 L^2 d + 2 * 2 L W d): Q K^T and P~ V, and the c2p and p2c score GEMMs (the padded window's
// extra products are not counted).
// bytes = 2 (3 B L D + tables) q, k, v, tables read + 8 B L mask + 2 B L D context + 2 B N L^2 probs.
Setup attention_forward(Env& e, const Dims& d) {
  const Attention a(e, d, false);
  return Setup(str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
               2.0 * (4.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 2.0 * a.bn * a.L * a.L,
               a.bn * (4.0 * a.L * a.L * a.d + 4.0 * a.L * a.W * a.d),
               [=](const Args& t, bool) { a.forward(t); });
}

// flops = B N (8 L^2 d + 4 * 2 L W d): dV, dP, dQ, dK (one L^2 d GEMM each way), and per positional term
// one GEMM into dQ or dK and one into dpos.
// bytes = 2 (4 B L D + tables) q, k, v, dcontext, tables read + 8 B L mask + 2 B N L^2 probs read
//       + 2 * 3 B L D dq, dk, dv written + 2 * 2 tables dpos read and written.
Setup attention_backward(Env& e, const Dims& d) {
  const Attention a(e, d, true);
  const int dc = e.in(bf16, {d.B, d.L, d.D}), dq = e.out("dq", bf16, {d.B, d.L, d.D});
  const int dk = e.out("dk", bf16, {d.B, d.L, d.D}), dv = e.out("dv", bf16, {d.B, d.L, d.D});
  const int dpk = e.acc("dpk", bf16, e.gpu()[a.pos_key].shape()),
            dpq = e.acc("dpq", bf16, e.gpu()[a.pos_query].shape());
  return Setup(
      str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
      2.0 * (4.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 2.0 * a.bn * a.L * a.L + 6.0 * d.R() * d.D +
          4.0 * a.tables,
      a.bn * (8.0 * a.L * a.L * a.d + 8.0 * a.L * a.W * a.d),
      [=](const Args& t, bool) {
        kernels::disentangled_attention_backward(t[a.q], t[a.k], t[a.v], t[a.pos_key], t[a.pos_query],
                                                 t[a.mask], t[a.probs], t[dc], a.config, t[dq], t[dk], t[dv],
                                                 t[dpk], t[dpq]);
      },
      [=](const Args& t, bool) { a.forward(t); });
}

// The flash attention (kernels/cuda/flash_disentangled_attention.cuh): the same op with the softmax
// statistics [B, N, L, 2] f32 saved instead of probs. Its kernels take head size 64 only, so a shape with
// other heads (the validation shape's 16) runs at 64 per head. Bytes: as the stored path's without probs
// (plus 8 B N L of statistics); flops: the op's products as counted for the stored path (the backward's
// recomputed Q K^T and dC V^T in both of its kernels are not counted).
Dims flash_dims(Dims d) {
  if (d.D / d.N != 64) d.D = 64 * d.N;
  return d;
}
struct FlashAttention : AttentionInputs {
  int stats;
  FlashAttention(Env& e, const Dims& dims, bool saved_only)
      : AttentionInputs(e, dims, saved_only),
        stats(saved_only ? e.work(f32, {dims.B, dims.N, dims.L, 2})
                         : e.out("softmax_stats", f32, {dims.B, dims.N, dims.L, 2})) {}
  void forward(const Args& t) const {
    kernels::flash_disentangled_attention_forward(t[q], t[k], t[v], t[pos_key], t[pos_query], t[mask], config,
                                                  t[context], t[stats]);
  }
};

Setup attention_forward_flash(Env& e, const Dims& dims) {
  const Dims d = flash_dims(dims);
  const FlashAttention a(e, d, false);
  return Setup(str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
               2.0 * (4.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 8.0 * a.bn * a.L,
               a.bn * (4.0 * a.L * a.L * a.d + 4.0 * a.L * a.W * a.d),
               [=](const Args& t, bool) { a.forward(t); });
}

Setup attention_backward_flash(Env& e, const Dims& dims) {
  const Dims d = flash_dims(dims);
  const FlashAttention a(e, d, true);
  const int dc = e.in(bf16, {d.B, d.L, d.D}), dq = e.out("dq", bf16, {d.B, d.L, d.D});
  const int dk = e.out("dk", bf16, {d.B, d.L, d.D}), dv = e.out("dv", bf16, {d.B, d.L, d.D});
  const int dpk = e.acc("dpk", bf16, e.gpu()[a.pos_key].shape()),
            dpq = e.acc("dpq", bf16, e.gpu()[a.pos_query].shape());
  return Setup(
      str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
      2.0 * (5.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 8.0 * a.bn * a.L + 6.0 * d.R() * d.D +
          4.0 * a.tables,
      a.bn * (8.0 * a.L * a.L * a.d + 8.0 * a.L * a.W * a.d),
      [=](const Args& t, bool) {
        kernels::flash_disentangled_attention_backward(t[a.q], t[a.k], t[a.v], t[a.pos_key], t[a.pos_query],
                                                       t[a.mask], t[a.context], t[a.stats], t[dc], a.config,
                                                       t[dq], t[dk], t[dv], t[dpk], t[dpq]);
      },
      [=](const Args& t, bool) { a.forward(t); });
}

// The encoder's ConvLayer (D -> D, same padding). flops = 2 R D D k;
// bytes = 2 (2 R D + D D k + D): x, W, bias read, y written (the im2col scratch is not minimal traffic).
Setup conv1d_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.D, d.D, d.K}, -0.1f, 0.1f),
            b = e.in(bf16, {d.D});
  const int y = e.out("y", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("x", x) + " " + e.desc("W", w), 2.0 * (2 * d.R() * d.D + d.D * d.D * d.K + d.D),
               2.0 * d.R() * d.D * d.D * d.K,
               [=](const Args& t, bool) { kernels::conv1d_forward(t[x], t[w], t[b], t[y]); });
}

// flops = 4 R D D k; bytes = 2 (3 R D + D D k): dy, x, W read, dx written + 4 * 2 (D D k + D): dW, db.
Setup conv1d_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.D, d.D, d.K}, -0.1f, 0.1f);
  const int dy = e.in(bf16, {d.B, d.L, d.D}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dw = e.acc("dw", f32, {d.D, d.D, d.K}), db = e.acc("db", f32, {d.D});
  return Setup(e.desc("x", x) + " " + e.desc("W", w),
               2.0 * (3 * d.R() * d.D + d.D * d.D * d.K) + 8.0 * (d.D * d.D * d.K + d.D),
               4.0 * d.R() * d.D * d.D * d.K, [=](const Args& t, bool) {
                 kernels::conv1d_backward(t[dy], t[x], t[w], t[dx], t[dw], t[db]);
               });
}

// The model's f32 parameter arena (master, grads, m and v share its layout): one range per tensor, the
// alignment gaps between them untouched.
std::vector<optim::TensorRange> parameter_ranges(const zt::DebertaConfig& model, int64_t& elements) {
  const zt::ParameterTable table(model);
  const zt::ArenaLayout layout = table.layout(f32);
  elements = static_cast<int64_t>(layout.total_bytes() / 4);
  std::vector<optim::TensorRange> ranges;
  for (const zt::ParameterInfo& p : table.entries())
    ranges.push_back({static_cast<int64_t>(layout.slot(p.name).offset / 4), p.numel(), p.weight_decay});
  return ranges;
}

// Fused AdamW as the trainer calls it: gradients multiplied by the clip/unscale factor on load, zeroed once
// read, the bf16 parameter copy written. The CPU side is optim's per-element update after the same float
// product, which the GPU matches bit for bit. bytes = 34 per updated element: params, grads, m, v read (16),
// params, grads (zeroed), m, v written (16), the bf16 copy written (2).
Setup adamw_update(Env& e, const Dims& d) {
  int64_t n = 0, updated = 0;
  const std::vector<optim::TensorRange> ranges = parameter_ranges(d.model, n);
  for (const optim::TensorRange& r : ranges) updated += r.numel;
  const int p = e.acc("params", f32, {n}, -0.05f, 0.05f), g = e.acc("grads", f32, {n}, -1e-3f, 1e-3f);
  const int m = e.acc("exp_avg", f32, {n}, -1e-4f, 1e-4f), v = e.acc("exp_avg_sq", f32, {n}, 0.0f, 1e-6f);
  const int p16 = e.acc("params16", bf16, {n});
  const optim::AdamWStepScalars s = optim::adamw_step_scalars(optim::AdamWHyper{}, 3.5e-6, 3);
  constexpr float kGradScale = 0.37f;
  return Setup(
      str(updated, " params in ", ranges.size(), " tensors"), 34.0 * updated, 0,
      [=](const Args& t, bool on_gpu) {
        if (on_gpu) {
          optim::gpu::adamw_update(s, t[p], t[g], t[m], t[v], ranges, t[p16], kStream, kGradScale, true);
          return;
        }
        for (const optim::TensorRange& r : ranges) {
          float* param = t[p].data_as<float>() + r.offset;
          float* grad = t[g].data_as<float>() + r.offset;
          float* copy = t[p16].data_as<float>() + r.offset;  // a bf16 tensor's host mirror is f32
          for (int64_t i = 0; i < r.numel; ++i) grad[i] *= kGradScale;
          optim::adamw_update_elements(s, r.weight_decay, r.numel, param, grad,
                                       t[m].data_as<float>() + r.offset, t[v].data_as<float>() + r.offset);
          for (int64_t i = 0; i < r.numel; ++i) copy[i] = round_through(bf16, param[i]), grad[i] = 0;
        }
      });
}

// Sum of squares and non-finite count over the f32 gradient arena (clipping, overflow check); checked
// against optim::sum_of_squares. bytes = 4 n, read once.
Setup grad_stats(Env& e, const Dims& d) {
  static_assert(sizeof(optim::gpu::GradStats) == 16, "the result is one double and one int64");
  int64_t n = 0;
  parameter_ranges(d.model, n);
  const int x = e.in(f32, {n}, -1e-3f, 1e-3f), result = e.work(DType::i64, {2});
  Setup setup(e.desc("grads", x), 4.0 * n, 0, [=](const Args& t, bool on_gpu) {
    if (on_gpu)
      optim::gpu::grad_stats_async(t[x], static_cast<optim::gpu::GradStats*>(t[result].data()), kStream);
  });
  setup.check = [=](ValidationEnv& v) {
    optim::gpu::GradStats got;
    ZT_CUDA_CHECK(cudaMemcpy(&got, v.gpu()[result].data(), sizeof got, cudaMemcpyDeviceToHost));
    const Tensor& host = v.cpu()[x];
    v.compare_value("sum_of_squares", got.sum_of_squares,
                    optim::sum_of_squares(std::span<const float>(host.data_as<float>(), host.numel()), 1));
    v.compare_value("non_finite", static_cast<double>(got.non_finite), 0.0);
  };
  return setup;
}

const Kernel kKernels[] = {
    {"linear_forward", "bf16", bf16, linear_forward},
    {"linear_backward", "bf16/f32 dW", bf16, linear_backward},
    {"layernorm_forward", "bf16", bf16, layernorm_forward},
    {"layernorm_backward", "bf16/f32 dg", bf16, layernorm_backward},
    {"gelu_forward", "bf16", bf16, gelu_forward},
    {"gelu_backward", "bf16", bf16, gelu_backward},
    {"dropout_forward", "bf16", bf16, dropout_forward},
    {"add", "bf16", bf16, residual_add},
    {"embedding_forward", "bf16", bf16, embedding_forward},
    {"embedding_backward", "bf16/f32 dT", bf16, embedding_backward},
    {"cross_entropy_forward", "f32", f32, cross_entropy_forward},
    {"cross_entropy_backward", "f32", f32, cross_entropy_backward},
    {"attention_forward", "bf16", bf16, attention_forward},
    {"attention_backward", "bf16", bf16, attention_backward},
    {"attention_forward_flash", "bf16", bf16, attention_forward_flash},
    {"attention_backward_flash", "bf16", bf16, attention_backward_flash},
    {"conv1d_forward", "bf16", bf16, conv1d_forward},
    {"conv1d_backward", "bf16/f32 dW", bf16, conv1d_backward},
    {"adamw_update", "f32+bf16", f32, adamw_update},
    {"grad_stats", "f32", f32, grad_stats},
};

}  // namespace

std::span<const Kernel> kernel_table() {
  return kKernels;
}

}  // namespace zt_bench
