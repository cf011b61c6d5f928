// The flash path's CPU implementation (kernels/disentangled_attention.h) against the stored-probabilities
// reference: the same context (the same P, row for row, and the same dropout keep bits), softmax statistics
// that reproduce the reference's P, and the same gradients, with padding, dropout, each positional term alone
// and together, log buckets and clamped buckets, at lengths that are not multiples of anything.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/disentangled_attention.h"
#include "kernels/relative_position.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;

struct Case {
  std::string name;
  int64_t batch, length, heads, head_size;
  RelativePositionConfig positions;
  bool c2p, p2c;
  float dropout_p;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

RelativePositionConfig tiny_buckets() {
  return RelativePositionConfig::from_model_config(8, -1, 64);
}
RelativePositionConfig clamped_buckets() {
  return RelativePositionConfig::from_model_config(16, 64, 512);
}
RelativePositionConfig unbucketed() {
  return RelativePositionConfig::from_model_config(-1, 4, 512);
}

struct Problem {
  Case c;
  DisentangledAttentionConfig config;
  Shape features, table, probs_shape, stats_shape;
  std::vector<float> q, k, v, pk, pq, dc;
  std::vector<int64_t> mask;

  explicit Problem(const Case& c_) : c(c_) {
    const int64_t B = c.batch, L = c.length, N = c.heads, D = N * c.head_size;
    config.num_heads = N;
    config.positions = c.positions;
    config.c2p = c.c2p;
    config.p2c = c.p2c;
    config.dropout_p = c.dropout_p;
    config.seed = 0x5eed1234u;
    config.site_id = 77;
    features = Shape{B, L, D};
    table = Shape{2 * c.positions.att_span(), D};
    probs_shape = Shape{B, N, L, L};
    stats_shape = Shape{B, N, L, 2};
    q = test::random_uniform(features.numel(), 61);
    k = test::random_uniform(features.numel(), 62);
    v = test::random_uniform(features.numel(), 63);
    pk = test::random_uniform(table.numel(), 64);
    pq = test::random_uniform(table.numel(), 65);
    dc = test::random_uniform(features.numel(), 66);
    // The last batch item has its final three positions padded (fully masked query rows are uniform).
    mask.assign(static_cast<size_t>(B * L), 1);
    for (int64_t t = std::max<int64_t>(L - 3, 0); t < L; ++t) mask[static_cast<size_t>((B - 1) * L + t)] = 0;
  }
  Tensor f32(std::vector<float>& x, const Shape& s) const { return Tensor(x.data(), s, DType::f32); }
  Tensor mask_tensor() { return Tensor(mask.data(), Shape{c.batch, c.length}, DType::i64); }
  Tensor pos_key() { return c.c2p ? f32(pk, table) : Tensor(); }
  Tensor pos_query() { return c.p2c ? f32(pq, table) : Tensor(); }
};

struct Gradients {
  std::vector<float> dq, dk, dv, dpk, dpq;
};

class FlashAttentionCpu : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionCpu, MatchesStoredPath) {
  Problem p(GetParam());
  const size_t n = static_cast<size_t>(p.features.numel());
  std::vector<float> context_ref(n), probs(static_cast<size_t>(p.probs_shape.numel()));
  disentangled_attention_forward(p.f32(p.q, p.features), p.f32(p.k, p.features), p.f32(p.v, p.features),
                                 p.pos_key(), p.pos_query(), p.mask_tensor(), p.config,
                                 p.f32(context_ref, p.features), p.f32(probs, p.probs_shape));
  std::vector<float> context(n, 9.0f), stats(static_cast<size_t>(p.stats_shape.numel()), 9.0f);
  ASSERT_EQ(flash_attention_unsupported(p.f32(p.q, p.features), p.config), nullptr);
  flash_disentangled_attention_forward(p.f32(p.q, p.features), p.f32(p.k, p.features), p.f32(p.v, p.features),
                                       p.pos_key(), p.pos_query(), p.mask_tensor(), p.config,
                                       p.f32(context, p.features), p.f32(stats, p.stats_shape));
  const test::Tolerance tol = test::tolerance_for(DType::f32);
  EXPECT_TRUE(all_close("context", context, context_ref, tol));

  // The statistics give back the reference's P: P[i, j] = exp(a - max) / sum, so max is the largest
  // log-probability's score and exp(max - max) * inverse is the largest probability of the row.
  const int64_t L = p.c.length;
  for (int64_t row = 0; row < p.c.batch * p.c.heads * L; ++row) {
    float largest = 0.0f;
    for (int64_t j = 0; j < L; ++j) largest = std::max(largest, probs[static_cast<size_t>(row * L + j)]);
    EXPECT_NEAR(stats[static_cast<size_t>(2 * row + 1)], largest, 1e-6f * std::max(1.0f, largest))
        << "row " << row;
  }

  Gradients ref, got;
  for (Gradients* g : {&ref, &got}) {
    g->dq.assign(n, 9.0f);
    g->dk.assign(n, 9.0f);
    g->dv.assign(n, 9.0f);
    g->dpk = test::random_uniform(p.table.numel(), 67);  // accumulated into
    g->dpq = test::random_uniform(p.table.numel(), 68);
  }
  disentangled_attention_backward(
      p.f32(p.q, p.features), p.f32(p.k, p.features), p.f32(p.v, p.features), p.pos_key(), p.pos_query(),
      p.mask_tensor(), p.f32(probs, p.probs_shape), p.f32(p.dc, p.features), p.config,
      p.f32(ref.dq, p.features), p.f32(ref.dk, p.features), p.f32(ref.dv, p.features),
      p.c.c2p ? p.f32(ref.dpk, p.table) : Tensor(), p.c.p2c ? p.f32(ref.dpq, p.table) : Tensor());
  flash_disentangled_attention_backward(
      p.f32(p.q, p.features), p.f32(p.k, p.features), p.f32(p.v, p.features), p.pos_key(), p.pos_query(),
      p.mask_tensor(), p.f32(context, p.features), p.f32(stats, p.stats_shape), p.f32(p.dc, p.features),
      p.config, p.f32(got.dq, p.features), p.f32(got.dk, p.features), p.f32(got.dv, p.features),
      p.c.c2p ? p.f32(got.dpk, p.table) : Tensor(), p.c.p2c ? p.f32(got.dpq, p.table) : Tensor());
  EXPECT_TRUE(all_close("dq", got.dq, ref.dq, tol));
  EXPECT_TRUE(all_close("dk", got.dk, ref.dk, tol));
  EXPECT_TRUE(all_close("dv", got.dv, ref.dv, tol));
  EXPECT_TRUE(all_close("dpos_key", got.dpk, ref.dpk, tol));
  EXPECT_TRUE(all_close("dpos_query", got.dpq, ref.dpq, tol));
}

// Dropout changes the result: the same op with p = 0 differs (the keep bits are used, not ignored).
TEST(FlashAttentionCpuDropout, DropsSomething) {
  Case c{"drop", 1, 9, 2, 4, tiny_buckets(), true, true, 0.3f};
  Problem with(c);
  c.dropout_p = 0.0f;
  Problem without(c);
  const size_t n = static_cast<size_t>(with.features.numel());
  std::vector<float> a(n), b(n), stats(static_cast<size_t>(with.stats_shape.numel()));
  flash_disentangled_attention_forward(with.f32(with.q, with.features), with.f32(with.k, with.features),
                                       with.f32(with.v, with.features), with.pos_key(), with.pos_query(),
                                       with.mask_tensor(), with.config, with.f32(a, with.features),
                                       with.f32(stats, with.stats_shape));
  flash_disentangled_attention_forward(
      without.f32(without.q, without.features), without.f32(without.k, without.features),
      without.f32(without.v, without.features), without.pos_key(), without.pos_query(), without.mask_tensor(),
      without.config, without.f32(b, without.features), without.f32(stats, without.stats_shape));
  int differing = 0;
  for (size_t e = 0; e < n; ++e) differing += a[e] != b[e];
  EXPECT_GT(differing, 0);
}

TEST(FlashAttentionCpuChecks, RefusesWrongStatsShape) {
  Case c{"checks", 1, 5, 1, 4, tiny_buckets(), true, true, 0.0f};
  Problem p(c);
  std::vector<float> context(static_cast<size_t>(p.features.numel()));
  std::vector<float> stats(static_cast<size_t>(p.c.length));
  EXPECT_THROW(flash_disentangled_attention_forward(p.f32(p.q, p.features), p.f32(p.k, p.features),
                                                    p.f32(p.v, p.features), p.pos_key(), p.pos_query(),
                                                    p.mask_tensor(), p.config, p.f32(context, p.features),
                                                    p.f32(stats, Shape{1, 1, p.c.length})),
               std::exception);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FlashAttentionCpu,
    ::testing::Values(Case{"both_tiny_L7", 2, 7, 3, 5, tiny_buckets(), true, true, 0.0f},
                      Case{"both_tiny_L37_dropout", 2, 37, 2, 8, tiny_buckets(), true, true, 0.2f},
                      Case{"c2p_only_L13", 2, 13, 2, 4, tiny_buckets(), true, false, 0.1f},
                      Case{"p2c_only_L13", 2, 13, 2, 4, tiny_buckets(), false, true, 0.1f},
                      Case{"no_positions_L10", 2, 10, 2, 4, tiny_buckets(), false, false, 0.1f},
                      Case{"clamped_L137_dropout", 2, 137, 2, 8, clamped_buckets(), true, true, 0.1f},
                      Case{"unbucketed_L19", 2, 19, 2, 4, unbucketed(), true, true, 0.0f},
                      Case{"fully_padded_L3", 2, 3, 2, 4, tiny_buckets(), true, true, 0.1f}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace zt::kernels
