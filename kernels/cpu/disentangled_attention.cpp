#include "kernels/disentangled_attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/arg_checks.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/disentangled_attention.cuh"
#endif
#include "kernels/masked_softmax.h"
#include "kernels/philox.h"
#include "runtime/check.h"

namespace zt::kernels {

namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Strided = Eigen::OuterStride<>;
// One head's [rows, d] slice of a [rows, D] feature matrix: rows are D apart.
using HeadView = Eigen::Map<RowMajor, 0, Strided>;
using ConstHeadView = Eigen::Map<const RowMajor, 0, Strided>;
using Dense = Eigen::Map<RowMajor>;
using ConstDense = Eigen::Map<const RowMajor>;

// Shapes and tables shared by forward and backward.
struct Problem {
  int64_t batch = 0, length = 0, features = 0, heads = 0, head_size = 0;
  int64_t table_rows = 0;          // 2S
  int64_t window_begin = 0;        // [window_begin, window_begin + window) are the table rows c(i,j) reaches;
  int64_t window = 0;              //   only those are projected, gathered and scattered
  std::vector<int32_t> index;      // [L, L] c(i,j) - window_begin (stored path only)
  std::vector<int32_t> diagonal;   // [2L - 1] c(i,j) - window_begin at i - j + L - 1
  std::vector<uint8_t> key_keep;   // [B, L] m[b,j] != 0
  std::vector<uint8_t> none_kept;  // [L] zeros: a padded query row has every key masked
  float scale = 1.0f;

  // Head h of batch row b of a [B, L, D] f32 tensor: its [L, d] slice, rows D apart (read-only unless
  // View = HeadView).
  template <typename View = ConstHeadView>
  View head(const Tensor& t, int64_t b, int64_t h) const {
    return View(t.data_as<float>() + b * length * features + h * head_size, length, head_size,
                Strided(features));
  }
};

// An f32, contiguous, host tensor of exactly `shape`.
void check_f32_arg(const Tensor& t, const Shape& shape, const char* op, const char* name) {
  check_cpu_arg(t, DType::f32, op, name);
  ZT_CHECK(t.shape() == shape, op, ": ", name, " must be ", shape.to_string(), ", got ",
           t.shape().to_string());
}

bool any_position_term(const DisentangledAttentionConfig& config) {
  return config.c2p || config.p2c;
}

Problem plan(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
             const Tensor& pos_query, const Tensor& attention_mask, const DisentangledAttentionConfig& config,
             const char* op, bool with_index = true) {
  check_cpu_arg(q, DType::f32, op, "q");
  ZT_CHECK(q.rank() == 3, op, ": q must be [B, L, D], got ", q.describe());
  check_f32_arg(k, q.shape(), op, "k");
  check_f32_arg(v, q.shape(), op, "v");
  Problem pr;
  pr.batch = q.dim(0);
  pr.length = q.dim(1);
  pr.features = q.dim(2);
  pr.heads = config.num_heads;
  ZT_CHECK(pr.heads > 0 && pr.features % pr.heads == 0, op, ": hidden size ", pr.features,
           " is not a multiple of num_heads ", pr.heads);
  pr.head_size = pr.features / pr.heads;
  ZT_CHECK(config.dropout_p >= 0.0f && config.dropout_p < 1.0f, op, ": dropout_p must be in [0, 1), got ",
           config.dropout_p);
  pr.scale = disentangled_attention_scale(pr.head_size, config);

  ZT_CHECK(attention_mask.shape() == (Shape{pr.batch, pr.length}), op,
           ": attention_mask must be [B, L] = ", Shape{pr.batch, pr.length}.to_string(), ", got ",
           attention_mask.shape().to_string());
  pr.key_keep = cpu::mask_to_keep(attention_mask, op);
  pr.none_kept.assign(static_cast<size_t>(pr.length), 0);

  if (!any_position_term(config)) return pr;
  const int64_t span = config.positions.att_span();
  ZT_CHECK(span > 0, op, ": the relative-position span must be positive");
  pr.table_rows = 2 * span;
  if (config.c2p) {
    check_f32_arg(pos_key, Shape{pr.table_rows, pr.features}, op, "pos_key");
  }
  if (config.p2c) {
    check_f32_arg(pos_query, Shape{pr.table_rows, pr.features}, op, "pos_query");
  }
  // bucket(i - j) is monotone in i - j, so the extreme rows come from the corners of the table.
  const int64_t L = pr.length;
  if (L == 0) return pr;
  pr.window_begin = c2p_index(0, L - 1, config.positions);
  pr.window = c2p_index(L - 1, 0, config.positions) - pr.window_begin + 1;
  pr.diagonal.resize(static_cast<size_t>(2 * L - 1));
  for (int64_t t = 0; t < 2 * L - 1; ++t) {
    pr.diagonal[static_cast<size_t>(t)] =
        static_cast<int32_t>(c2p_index(t - (L - 1), 0, config.positions) - pr.window_begin);
  }
  if (!with_index) return pr;
  pr.index.resize(static_cast<size_t>(L * L));
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) {
      pr.index[i * L + j] = static_cast<int32_t>(c2p_index(i, j, config.positions) - pr.window_begin);
    }
  }
  return pr;
}

// Flat index of P[b, h, i, 0], the dropout element numbering.
uint64_t probs_offset(const Problem& pr, int64_t b, int64_t h) {
  return static_cast<uint64_t>((b * pr.heads + h) * pr.length * pr.length);
}

// factor[(i - first_row) L + j] = keep(b, h, i, j) / (1 - p) for rows [first_row, end_row) of head (b, h):
// the dropout multiplier of P (philox.h's attention draw: rows padded to 8 keys, 8 keys a Philox block).
void attention_dropout_factors(float* factor, const Problem& pr, int64_t b, int64_t h, int64_t first_row,
                               int64_t end_row, const DisentangledAttentionConfig& config) {
  const float kept_scale = 1.0f / (1.0f - config.dropout_p);
  const uint32_t threshold = attention_keep_threshold(config.dropout_p);
  const auto L = static_cast<uint64_t>(pr.length);
  const uint64_t pitch = attention_row_pitch(L);
  for (int64_t i = first_row; i < end_row; ++i) {
    const uint64_t row_start =
        ((static_cast<uint64_t>(b * pr.heads + h)) * L + static_cast<uint64_t>(i)) * pitch;
    for (uint64_t j0 = 0; j0 < L; j0 += 8) {
      const PhiloxCounter words = philox_block(config.seed, config.site_id, (row_start + j0) / 8);
      for (uint64_t j = j0; j < std::min(L, j0 + 8); ++j)
        *factor++ = half_of(words, static_cast<uint32_t>(j - j0)) >= threshold ? kept_scale : 0.0f;
    }
  }
}

// The position terms' share of one head's backward, from its bucket gradients Gc, Gp [L, W] over the
// window of table rows: dQ += Gc PK, dPK += Gc^T Q (c2p); dK += Gp PQ, dPQ += Gp^T K (p2c).
void add_position_gradients(const Problem& pr, const DisentangledAttentionConfig& config, int64_t h,
                            const std::vector<float>& grad_c2p, const std::vector<float>& grad_p2c,
                            const Tensor& pos_key, const Tensor& pos_query, const ConstHeadView& qh,
                            const ConstHeadView& kh, HeadView& dqh, HeadView& dkh, const Tensor& dpos_key,
                            const Tensor& dpos_query) {
  const int64_t L = pr.length, D = pr.features, d = pr.head_size, W = pr.window;
  const int64_t first = pr.window_begin * D + h * d;
  if (config.c2p) {
    ConstDense gc(grad_c2p.data(), L, W);
    ConstHeadView pk(pos_key.data_as<float>() + first, W, d, Strided(D));
    HeadView dpk(dpos_key.data_as<float>() + first, W, d, Strided(D));
    dqh.noalias() += gc * pk;
    dpk.noalias() += gc.transpose() * qh;
  }
  if (config.p2c) {
    ConstDense gp(grad_p2c.data(), L, W);
    ConstHeadView pq(pos_query.data_as<float>() + first, W, d, Strided(D));
    HeadView dpq(dpos_query.data_as<float>() + first, W, d, Strided(D));
    dkh.noalias() += gp * pq;
    dpq.noalias() += gp.transpose() * kh;
  }
}

}  // namespace

float disentangled_attention_scale(int64_t head_size, const DisentangledAttentionConfig& config) {
  const int64_t factor = 1 + (config.c2p ? 1 : 0) + (config.p2c ? 1 : 0);
  return std::sqrt(static_cast<float>(head_size) * static_cast<float>(factor));
}

void disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                    const Tensor& pos_query, const Tensor& attention_mask,
                                    const DisentangledAttentionConfig& config, const Tensor& context,
                                    const Tensor& probs) {
  constexpr const char* op = "disentangled_attention_forward";
#ifdef ZT_WITH_CUDA
  if (q.device() == DeviceKind::cuda) {
    return gpu::disentangled_attention_forward(q, k, v, pos_key, pos_query, attention_mask, config, context,
                                               probs, current_stream());
  }
#endif
  if (q.device() == DeviceKind::cuda) ZT_FAIL("disentangled_attention: CUDA kernel not built yet");
  const Problem pr = plan(q, k, v, pos_key, pos_query, attention_mask, config, op);
  check_f32_arg(context, q.shape(), op, "context");
  check_f32_arg(probs, Shape{pr.batch, pr.heads, pr.length, pr.length}, op, "probs");

  const int64_t L = pr.length, D = pr.features, d = pr.head_size, W = pr.window;
  const float inverse_scale = 1.0f / pr.scale;
  const bool dropout = config.dropout_p > 0.0f;
  std::vector<float> c2p_scores(static_cast<size_t>(config.c2p ? L * W : 0));
  std::vector<float> p2c_scores(static_cast<size_t>(config.p2c ? L * W : 0));
  std::vector<float> dropped(static_cast<size_t>(dropout ? L * L : 0));

  for (int64_t b = 0; b < pr.batch; ++b) {
    const uint8_t* key_keep = pr.key_keep.data() + b * L;
    for (int64_t h = 0; h < pr.heads; ++h) {
      ConstHeadView qh = pr.head(q, b, h);
      ConstHeadView kh = pr.head(k, b, h);
      ConstHeadView vh = pr.head(v, b, h);
      float* p = probs.data_as<float>() + probs_offset(pr, b, h);
      Dense scores(p, L, L);
      scores.noalias() = qh * kh.transpose();
      if (config.c2p) {
        ConstHeadView pk(pos_key.data_as<float>() + pr.window_begin * D + h * d, W, d, Strided(D));
        Dense(c2p_scores.data(), L, W).noalias() = qh * pk.transpose();
      }
      if (config.p2c) {
        ConstHeadView pq(pos_query.data_as<float>() + pr.window_begin * D + h * d, W, d, Strided(D));
        Dense(p2c_scores.data(), L, W).noalias() = kh * pq.transpose();
      }
      for (int64_t i = 0; i < L; ++i) {
        float* row = p + i * L;
        const int32_t* index = pr.index.data() + i * L;
        if (config.c2p) {
          const float* c2p_row = c2p_scores.data() + i * W;
          for (int64_t j = 0; j < L; ++j) row[j] += c2p_row[index[j]];
        }
        if (config.p2c) {
          // Key j's positional score for query i sits in row j of K PQ^T, at the same bucket c(i,j).
          for (int64_t j = 0; j < L; ++j) row[j] += p2c_scores[j * W + index[j]];
        }
        for (int64_t j = 0; j < L; ++j) row[j] *= inverse_scale;
        cpu::masked_softmax_row(row, key_keep[i] ? key_keep : pr.none_kept.data(), row, L);
      }
      HeadView ch = pr.head<HeadView>(context, b, h);
      if (dropout) {
        attention_dropout_factors(dropped.data(), pr, b, h, 0, L, config);
        Dense p_dropped(dropped.data(), L, L);
        p_dropped.array() *= ConstDense(p, L, L).array();
        ch.noalias() = p_dropped * vh;
      } else {
        ch.noalias() = ConstDense(p, L, L) * vh;
      }
    }
  }
}

void disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const Tensor& probs, const Tensor& dcontext,
                                     const DisentangledAttentionConfig& config, const Tensor& dq,
                                     const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                     const Tensor& dpos_query) {
  constexpr const char* op = "disentangled_attention_backward";
#ifdef ZT_WITH_CUDA
  if (q.device() == DeviceKind::cuda) {
    return gpu::disentangled_attention_backward(q, k, v, pos_key, pos_query, attention_mask, probs, dcontext,
                                                config, dq, dk, dv, dpos_key, dpos_query, current_stream());
  }
#endif
  if (q.device() == DeviceKind::cuda) ZT_FAIL("disentangled_attention: CUDA kernel not built yet");
  const Problem pr = plan(q, k, v, pos_key, pos_query, attention_mask, config, op);
  check_f32_arg(probs, Shape{pr.batch, pr.heads, pr.length, pr.length}, op, "probs");
  check_f32_arg(dcontext, q.shape(), op, "dcontext");
  check_f32_arg(dq, q.shape(), op, "dq");
  check_f32_arg(dk, q.shape(), op, "dk");
  check_f32_arg(dv, q.shape(), op, "dv");
  if (config.c2p) {
    check_f32_arg(dpos_key, pos_key.shape(), op, "dpos_key");
  }
  if (config.p2c) {
    check_f32_arg(dpos_query, pos_query.shape(), op, "dpos_query");
  }

  const int64_t L = pr.length, W = pr.window;
  const float inverse_scale = 1.0f / pr.scale;
  const bool dropout = config.dropout_p > 0.0f;
  std::vector<float> dropped(static_cast<size_t>(dropout ? L * L : 0));
  std::vector<float> dropout_factor(static_cast<size_t>(dropout ? L * L : 0));
  std::vector<float> grad_scores(static_cast<size_t>(L * L));                // dP~, then dP, then G = dA / s
  std::vector<float> grad_c2p(static_cast<size_t>(config.c2p ? L * W : 0));  // Gc [L, W]
  std::vector<float> grad_p2c(static_cast<size_t>(config.p2c ? L * W : 0));  // Gp [L, W]

  for (int64_t b = 0; b < pr.batch; ++b) {
    const uint8_t* key_keep = pr.key_keep.data() + b * L;
    for (int64_t h = 0; h < pr.heads; ++h) {
      ConstHeadView qh = pr.head(q, b, h);
      ConstHeadView kh = pr.head(k, b, h);
      ConstHeadView vh = pr.head(v, b, h);
      ConstHeadView dch = pr.head(dcontext, b, h);
      HeadView dqh = pr.head<HeadView>(dq, b, h);
      HeadView dkh = pr.head<HeadView>(dk, b, h);
      HeadView dvh = pr.head<HeadView>(dv, b, h);
      const float* p = probs.data_as<float>() + probs_offset(pr, b, h);
      Dense grad(grad_scores.data(), L, L);

      if (dropout) {
        attention_dropout_factors(dropout_factor.data(), pr, b, h, 0, L, config);
        ConstDense factor(dropout_factor.data(), L, L);
        Dense p_dropped(dropped.data(), L, L);
        p_dropped = factor.cwiseProduct(ConstDense(p, L, L));
        dvh.noalias() = p_dropped.transpose() * dch;
        // dP = factor * dP~: the same keep / (1 - p) multiplier as the forward.
        grad.noalias() = dch * vh.transpose();
        grad.array() *= factor.array();
      } else {
        dvh.noalias() = ConstDense(p, L, L).transpose() * dch;
        grad.noalias() = dch * vh.transpose();
      }
      for (int64_t i = 0; i < L; ++i) {
        float* row = grad_scores.data() + i * L;
        cpu::masked_softmax_backward_row(p + i * L, row, key_keep[i] ? key_keep : pr.none_kept.data(), row,
                                         L);
        for (int64_t j = 0; j < L; ++j) row[j] *= inverse_scale;
      }

      dqh.noalias() = grad * kh;
      dkh.noalias() = grad.transpose() * qh;
      if (config.c2p) std::fill(grad_c2p.begin(), grad_c2p.end(), 0.0f);
      if (config.p2c) std::fill(grad_p2c.begin(), grad_p2c.end(), 0.0f);
      // Transposes of the forward gathers: scatter-add every score gradient into its bucket.
      for (int64_t i = 0; i < L; ++i) {
        const float* row = grad_scores.data() + i * L;
        const int32_t* index = pr.index.data() + i * L;
        if (config.c2p) {
          float* c2p_row = grad_c2p.data() + i * W;
          for (int64_t j = 0; j < L; ++j) c2p_row[index[j]] += row[j];
        }
        if (config.p2c) {
          for (int64_t j = 0; j < L; ++j) grad_p2c[j * W + index[j]] += row[j];
        }
      }
      add_position_gradients(pr, config, h, grad_c2p, grad_p2c, pos_key, pos_query, qh, kh, dqh, dkh,
                             dpos_key, dpos_query);
    }
  }
}

// ---- the flash path on the CPU: a row at a time, nothing [L, L] ----

namespace {

// One head's positional scores over its rows: [L, W] = rows table_w^T (the stored path's products).
struct PositionalScores {
  std::vector<float> c2p, p2c;
};

PositionalScores head_positional_scores(const Problem& pr, const DisentangledAttentionConfig& config,
                                        const ConstHeadView& qh, const ConstHeadView& kh,
                                        const Tensor& pos_key, const Tensor& pos_query, int64_t h) {
  const int64_t L = pr.length, D = pr.features, d = pr.head_size, W = pr.window;
  PositionalScores out;
  if (config.c2p) {
    out.c2p.resize(static_cast<size_t>(L * W));
    ConstHeadView pk(pos_key.data_as<float>() + pr.window_begin * D + h * d, W, d, Strided(D));
    Dense(out.c2p.data(), L, W).noalias() = qh * pk.transpose();
  }
  if (config.p2c) {
    out.p2c.resize(static_cast<size_t>(L * W));
    ConstHeadView pq(pos_query.data_as<float>() + pr.window_begin * D + h * d, W, d, Strided(D));
    Dense(out.p2c.data(), L, W).noalias() = kh * pq.transpose();
  }
  return out;
}

// Row i of the scores a (before the mask): ((Q_i . K_j + C2P[i, c]) + P2C[j, c]) / s, the stored path's sum.
void score_row(const Problem& pr, const DisentangledAttentionConfig& config, const ConstHeadView& qh,
               const ConstHeadView& kh, const PositionalScores& pos, int64_t i, float* row) {
  const int64_t L = pr.length, W = pr.window;
  Eigen::Map<Eigen::RowVectorXf>(row, L).noalias() = qh.row(i) * kh.transpose();
  for (int64_t j = 0; j < L; ++j) {
    const int32_t c = (config.c2p || config.p2c) ? pr.diagonal[static_cast<size_t>(i - j + L - 1)] : 0;
    if (config.c2p) row[j] += pos.c2p[static_cast<size_t>(i * W + c)];
    if (config.p2c) row[j] += pos.p2c[static_cast<size_t>(j * W + c)];
    row[j] *= 1.0f / pr.scale;
  }
}

void check_stats(const Tensor& stats, const Problem& pr, const char* op) {
  check_f32_arg(stats, Shape{pr.batch, pr.heads, pr.length, 2}, op, "softmax_stats");
}

}  // namespace

const char* flash_attention_unsupported(const Tensor& q, const DisentangledAttentionConfig& config) {
#ifdef ZT_WITH_CUDA
  if (q.device() == DeviceKind::cuda) return gpu::flash_attention_unsupported(q, config);
#endif
  if (q.device() == DeviceKind::cuda) return "CUDA is not built";
  if (q.dtype() != DType::f32) return "the CPU computes in f32 only";
  (void)config;
  return nullptr;
}

void flash_disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_key, const Tensor& pos_query,
                                          const Tensor& attention_mask,
                                          const DisentangledAttentionConfig& config, const Tensor& context,
                                          const Tensor& softmax_stats) {
  constexpr const char* op = "flash_disentangled_attention_forward";
#ifdef ZT_WITH_CUDA
  if (q.device() == DeviceKind::cuda) {
    return gpu::flash_disentangled_attention_forward(q, k, v, pos_key, pos_query, attention_mask, config,
                                                     context, softmax_stats, current_stream());
  }
#endif
  if (q.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA is not built");
  const Problem pr = plan(q, k, v, pos_key, pos_query, attention_mask, config, op, /*with_index=*/false);
  check_f32_arg(context, q.shape(), op, "context");
  check_stats(softmax_stats, pr, op);
  const int64_t L = pr.length;
  constexpr float kMaskedScore = std::numeric_limits<float>::lowest();
  std::vector<float> scores(static_cast<size_t>(L)), probs(static_cast<size_t>(L));
  std::vector<float> factor(static_cast<size_t>(config.dropout_p > 0.0f ? L : 0));
  for (int64_t b = 0; b < pr.batch; ++b) {
    const uint8_t* key_keep = pr.key_keep.data() + b * L;
    for (int64_t h = 0; h < pr.heads; ++h) {
      ConstHeadView qh = pr.head(q, b, h);
      ConstHeadView kh = pr.head(k, b, h);
      ConstHeadView vh = pr.head(v, b, h);
      HeadView ch = pr.head<HeadView>(context, b, h);
      const PositionalScores pos = head_positional_scores(pr, config, qh, kh, pos_key, pos_query, h);
      float* stats = softmax_stats.data_as<float>() + (b * pr.heads + h) * L * 2;
      for (int64_t i = 0; i < L; ++i) {
        score_row(pr, config, qh, kh, pos, i, scores.data());
        const uint8_t* keep = key_keep[i] ? key_keep : pr.none_kept.data();
        cpu::masked_softmax_row(scores.data(), keep, probs.data(), L);
        // The statistics masked_softmax_row used: max of the masked row and 1 / sum of the exponentials.
        float row_max = kMaskedScore;
        for (int64_t j = 0; j < L; ++j) row_max = std::max(row_max, keep[j] ? scores[j] : kMaskedScore);
        float sum = 0.0f;
        for (int64_t j = 0; j < L; ++j) sum += std::exp((keep[j] ? scores[j] : kMaskedScore) - row_max);
        stats[2 * i] = row_max;
        stats[2 * i + 1] = 1.0f / sum;
        if (!factor.empty()) {
          attention_dropout_factors(factor.data(), pr, b, h, i, i + 1, config);
          for (int64_t j = 0; j < L; ++j) probs[j] *= factor[j];
        }
        ch.row(i).noalias() = Eigen::Map<const Eigen::RowVectorXf>(probs.data(), L) * vh;
      }
    }
  }
}

void flash_disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& pos_key, const Tensor& pos_query,
                                           const Tensor& attention_mask, const Tensor& context,
                                           const Tensor& softmax_stats, const Tensor& dcontext,
                                           const DisentangledAttentionConfig& config, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                           const Tensor& dpos_query) {
  constexpr const char* op = "flash_disentangled_attention_backward";
#ifdef ZT_WITH_CUDA
  if (q.device() == DeviceKind::cuda) {
    return gpu::flash_disentangled_attention_backward(q, k, v, pos_key, pos_query, attention_mask, context,
                                                      softmax_stats, dcontext, config, dq, dk, dv, dpos_key,
                                                      dpos_query, current_stream());
  }
#endif
  if (q.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA is not built");
  const Problem pr = plan(q, k, v, pos_key, pos_query, attention_mask, config, op, /*with_index=*/false);
  check_f32_arg(context, q.shape(), op, "context");
  check_stats(softmax_stats, pr, op);
  check_f32_arg(dcontext, q.shape(), op, "dcontext");
  check_f32_arg(dq, q.shape(), op, "dq");
  check_f32_arg(dk, q.shape(), op, "dk");
  check_f32_arg(dv, q.shape(), op, "dv");
  if (config.c2p) check_f32_arg(dpos_key, pos_key.shape(), op, "dpos_key");
  if (config.p2c) check_f32_arg(dpos_query, pos_query.shape(), op, "dpos_query");
  const int64_t L = pr.length, W = pr.window;
  constexpr float kMaskedScore = std::numeric_limits<float>::lowest();
  const bool dropout = config.dropout_p > 0.0f;
  std::vector<float> scores(static_cast<size_t>(L)), dp(static_cast<size_t>(L));
  std::vector<float> factor(static_cast<size_t>(L), 1.0f);
  std::vector<float> grad_c2p(static_cast<size_t>(config.c2p ? L * W : 0));
  std::vector<float> grad_p2c(static_cast<size_t>(config.p2c ? L * W : 0));
  for (int64_t b = 0; b < pr.batch; ++b) {
    const uint8_t* key_keep = pr.key_keep.data() + b * L;
    for (int64_t h = 0; h < pr.heads; ++h) {
      ConstHeadView qh = pr.head(q, b, h);
      ConstHeadView kh = pr.head(k, b, h);
      ConstHeadView vh = pr.head(v, b, h);
      ConstHeadView ch = pr.head(context, b, h);
      ConstHeadView dch = pr.head(dcontext, b, h);
      HeadView dqh = pr.head<HeadView>(dq, b, h);
      HeadView dkh = pr.head<HeadView>(dk, b, h);
      HeadView dvh = pr.head<HeadView>(dv, b, h);
      const PositionalScores pos = head_positional_scores(pr, config, qh, kh, pos_key, pos_query, h);
      const float* stats = softmax_stats.data_as<float>() + (b * pr.heads + h) * L * 2;
      dqh.setZero();
      dkh.setZero();
      dvh.setZero();
      std::fill(grad_c2p.begin(), grad_c2p.end(), 0.0f);
      std::fill(grad_p2c.begin(), grad_p2c.end(), 0.0f);
      for (int64_t i = 0; i < L; ++i) {
        score_row(pr, config, qh, kh, pos, i, scores.data());
        const uint8_t* keep = key_keep[i] ? key_keep : pr.none_kept.data();
        if (dropout) attention_dropout_factors(factor.data(), pr, b, h, i, i + 1, config);
        // dP~ = dC_i V^T; D_i = dC_i . context_i = sum_j P~_ij dP~_ij.
        Eigen::Map<Eigen::RowVectorXf>(dp.data(), L).noalias() = dch.row(i) * vh.transpose();
        const float row_dot = dch.row(i).dot(ch.row(i));
        for (int64_t j = 0; j < L; ++j) {
          const float prob = std::exp((keep[j] ? scores[j] : kMaskedScore) - stats[2 * i]) * stats[2 * i + 1];
          const float p_tilde = prob * factor[j];
          dvh.row(j) += p_tilde * dch.row(i);
          const float g = keep[j] ? prob * (factor[j] * dp[j] - row_dot) / pr.scale : 0.0f;
          if (g == 0.0f) continue;
          dqh.row(i) += g * kh.row(j);
          dkh.row(j) += g * qh.row(i);
          const int32_t c = (config.c2p || config.p2c) ? pr.diagonal[static_cast<size_t>(i - j + L - 1)] : 0;
          if (config.c2p) grad_c2p[static_cast<size_t>(i * W + c)] += g;
          if (config.p2c) grad_p2c[static_cast<size_t>(j * W + c)] += g;
        }
      }
      add_position_gradients(pr, config, h, grad_c2p, grad_p2c, pos_key, pos_query, qh, kh, dqh, dkh,
                             dpos_key, dpos_query);
    }
  }
}

}  // namespace zt::kernels
