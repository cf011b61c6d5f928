#include "kernels/disentangled_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/philox.h"
#include "kernels/relative_position.h"
#include "runtime/check.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;
using test::tolerance_for;

// Awkward sizes: L = 11 runs past the bucket midpoint, d = 5 and N = 3 are not powers of two.
struct Case {
  std::string name;
  RelativePositionConfig positions;
  bool c2p, p2c;
  float dropout_p = 0.0f;
};

// gtest prints parameters on failure; the name says everything.
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

constexpr int64_t kBatch = 2, kLength = 11, kHeads = 3, kHeadSize = 5, kFeatures = kHeads * kHeadSize;

// Inputs and outputs of one attention call, owned by the test.
struct Problem {
  DisentangledAttentionConfig config;
  int64_t table_rows;
  std::vector<float> q, k, v, pos_key, pos_query;
  std::vector<int64_t> mask;
  std::vector<float> context, probs;

  explicit Problem(const Case& c, uint64_t seed = 1) {
    config.num_heads = kHeads;
    config.positions = c.positions;
    config.c2p = c.c2p;
    config.p2c = c.p2c;
    config.dropout_p = c.dropout_p;
    config.seed = 0x5eed0000u + seed;
    config.site_id = 42;
    table_rows = 2 * c.positions.att_span();
    const int64_t n = kBatch * kLength * kFeatures;
    q = test::random_uniform(n, seed * 10 + 1);
    k = test::random_uniform(n, seed * 10 + 2);
    v = test::random_uniform(n, seed * 10 + 3);
    pos_key = test::random_uniform(table_rows * kFeatures, seed * 10 + 4);
    pos_query = test::random_uniform(table_rows * kFeatures, seed * 10 + 5);
    // Batch 0 is all real tokens; batch 1 has three padded positions at the end.
    mask.assign(kBatch * kLength, 1);
    for (int64_t t = kLength - 3; t < kLength; ++t) mask[kLength + t] = 0;
    context.assign(n, 0.0f);
    probs.assign(kBatch * kHeads * kLength * kLength, 0.0f);
  }

  static Tensor features(std::vector<float>& x) {
    return Tensor(x.data(), Shape{kBatch, kLength, kFeatures}, DType::f32);
  }
  Tensor table(std::vector<float>& x, bool used) const {
    return used ? Tensor(x.data(), Shape{table_rows, kFeatures}, DType::f32) : Tensor();
  }
  Tensor mask_tensor() { return Tensor(mask.data(), Shape{kBatch, kLength}, DType::i64); }
  Tensor probs_tensor() { return Tensor(probs.data(), Shape{kBatch, kHeads, kLength, kLength}, DType::f32); }

  void forward() {
    disentangled_attention_forward(features(q), features(k), features(v), table(pos_key, config.c2p),
                                   table(pos_query, config.p2c), mask_tensor(), config, features(context),
                                   probs_tensor());
  }
};

// The explicit per-element formula, in double: scores, masked softmax, dropout, P V.
void naive_attention(const Problem& pr, std::vector<float>& context, std::vector<float>& probs) {
  const DisentangledAttentionConfig& cfg = pr.config;
  const int64_t span = cfg.positions.att_span();
  const double scale = std::sqrt(static_cast<double>(kHeadSize) * (1 + cfg.c2p + cfg.p2c));
  context.assign(pr.context.size(), 0.0f);
  probs.assign(pr.probs.size(), 0.0f);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeads; ++h) {
      for (int64_t i = 0; i < kLength; ++i) {
        auto q_at = [&](int64_t t, int64_t x) {
          return static_cast<double>(pr.q[(b * kLength + t) * kFeatures + x]);
        };
        auto k_at = [&](int64_t t, int64_t x) {
          return static_cast<double>(pr.k[(b * kLength + t) * kFeatures + x]);
        };
        std::vector<double> score(kLength);
        for (int64_t j = 0; j < kLength; ++j) {
          const int64_t c =
              std::clamp<int64_t>(relative_bucket(i - j, cfg.positions) + span, 0, 2 * span - 1);
          double a = 0;
          for (int64_t x = h * kHeadSize; x < (h + 1) * kHeadSize; ++x) {
            a += q_at(i, x) * k_at(j, x);
            if (cfg.c2p) a += q_at(i, x) * pr.pos_key[c * kFeatures + x];
            if (cfg.p2c) a += k_at(j, x) * pr.pos_query[c * kFeatures + x];
          }
          score[j] = a / scale;
        }
        const bool query_real = pr.mask[b * kLength + i] != 0;
        double max_kept = -INFINITY, sum = 0;
        for (int64_t j = 0; j < kLength; ++j)
          if (pr.mask[b * kLength + j]) max_kept = std::max(max_kept, score[j]);
        for (int64_t j = 0; j < kLength; ++j)
          if (pr.mask[b * kLength + j]) sum += std::exp(score[j] - max_kept);
        const int64_t row = ((b * kHeads + h) * kLength + i) * kLength;
        for (int64_t j = 0; j < kLength; ++j) {
          double p = 1.0 / kLength;  // a padded query row has every key masked: uniform, as in new HF
          if (query_real) p = pr.mask[b * kLength + j] ? std::exp(score[j] - max_kept) / sum : 0.0;
          probs[row + j] = static_cast<float>(p);
          const uint64_t element =
              static_cast<uint64_t>((b * kHeads + h) * kLength + i) * attention_row_pitch(kLength) +
              static_cast<uint64_t>(j);
          const bool keep =
              attention_keep(cfg.seed, cfg.site_id, element, attention_keep_threshold(cfg.dropout_p));
          const double dropped = keep ? p / (1.0 - cfg.dropout_p) : 0.0;
          for (int64_t x = h * kHeadSize; x < (h + 1) * kHeadSize; ++x) {
            context[(b * kLength + i) * kFeatures + x] +=
                static_cast<float>(dropped * pr.v[(b * kLength + j) * kFeatures + x]);
          }
        }
      }
    }
  }
}

// buckets 8 with max_relative_positions -1 -> max_position = max_position_embeddings (64): L = 11 > mid = 4.
RelativePositionConfig tiny_buckets() {
  return RelativePositionConfig::from_model_config(8, -1, 64);
}
// max_position 8 < L: buckets beyond S - 1 appear and the index clamp matters.
RelativePositionConfig clamped_buckets() {
  return RelativePositionConfig::from_model_config(4, 8, 512);
}
// No bucketing, span 4 < L: plain i - j, clamped.
RelativePositionConfig unbucketed() {
  return RelativePositionConfig::from_model_config(-1, 4, 512);
}

std::vector<Case> all_cases() {
  return {
      {"BothTerms", tiny_buckets(), true, true},
      {"C2POnly", tiny_buckets(), true, false},
      {"P2COnly", tiny_buckets(), false, true},
      {"ContentOnly", tiny_buckets(), false, false},
      {"BothTermsClamped", clamped_buckets(), true, true},
      {"BothTermsUnbucketed", unbucketed(), true, true},
      {"BothTermsDropout", tiny_buckets(), true, true, 0.3f},
      {"C2PDropout", clamped_buckets(), true, false, 0.5f},
  };
}

class DisentangledAttention : public ::testing::TestWithParam<Case> {};

TEST_P(DisentangledAttention, ForwardMatchesNaiveFormula) {
  Problem pr(GetParam());
  pr.forward();
  std::vector<float> context, probs;
  naive_attention(pr, context, probs);
  EXPECT_TRUE(all_close("probs", pr.probs, probs, tolerance_for(DType::f32)));
  EXPECT_TRUE(all_close("context", pr.context, context, tolerance_for(DType::f32)));
  // Padded query rows (batch 1, last three positions) are uniform over all keys.
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = kLength - 3; i < kLength; ++i) {
      for (int64_t j = 0; j < kLength; ++j) {
        EXPECT_FLOAT_EQ(pr.probs[((kHeads + h) * kLength + i) * kLength + j], 1.0f / kLength);
      }
    }
  }
}

TEST_P(DisentangledAttention, BackwardMatchesFiniteDifferences) {
  Problem pr(GetParam(), 2);
  const auto& cfg = pr.config;
  const std::vector<float> weights = test::random_uniform(static_cast<int64_t>(pr.context.size()), 77);
  auto loss = [&] {
    pr.forward();
    return test::dot(pr.context, weights);
  };
  loss();
  std::vector<float> dcontext = weights;
  const size_t n = pr.q.size(), table = pr.pos_key.size();
  // Stale values in the overwritten gradients and a known offset in the accumulated ones.
  std::vector<float> dq(n, 9.0f), dk(n, 9.0f), dv(n, 9.0f), dpos_key(table, 0.25f), dpos_query(table, -0.5f);
  disentangled_attention_backward(Problem::features(pr.q), Problem::features(pr.k), Problem::features(pr.v),
                                  pr.table(pr.pos_key, cfg.c2p), pr.table(pr.pos_query, cfg.p2c),
                                  pr.mask_tensor(), pr.probs_tensor(), Problem::features(dcontext), cfg,
                                  Problem::features(dq), Problem::features(dk), Problem::features(dv),
                                  pr.table(dpos_key, cfg.c2p), pr.table(dpos_query, cfg.p2c));
  const test::FdOptions options{.step = 1e-2, .atol = 2e-3, .rtol = 2e-2, .max_elements = 0};
  EXPECT_TRUE(test::check_gradient("dq", pr.q, dq, loss, options));
  EXPECT_TRUE(test::check_gradient("dk", pr.k, dk, loss, options));
  EXPECT_TRUE(test::check_gradient("dv", pr.v, dv, loss, options));
  for (float& g : dpos_key) g -= 0.25f;
  for (float& g : dpos_query) g += 0.5f;
  if (cfg.c2p) {
    EXPECT_TRUE(test::check_gradient("dpos_key", pr.pos_key, dpos_key, loss, options));
  } else {
    EXPECT_TRUE(std::all_of(dpos_key.begin(), dpos_key.end(), [](float g) { return g == 0.0f; }));
  }
  if (cfg.p2c) {
    EXPECT_TRUE(test::check_gradient("dpos_query", pr.pos_query, dpos_query, loss, options));
  } else {
    EXPECT_TRUE(std::all_of(dpos_query.begin(), dpos_query.end(), [](float g) { return g == 0.0f; }));
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, DisentangledAttention, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(DisentangledAttentionDropout, MaskDependsOnSeedAndSiteAndZeroIsANoOp) {
  const Case base{"", tiny_buckets(), true, true};
  Problem plain(base);
  plain.forward();
  Case dropped_case = base;
  dropped_case.dropout_p = 0.3f;
  Problem dropped(dropped_case), same(dropped_case), other_site(dropped_case);
  dropped.forward();
  same.forward();
  other_site.config.site_id += 1;
  other_site.forward();
  EXPECT_EQ(dropped.probs, plain.probs) << "probs are saved before dropout";
  EXPECT_NE(dropped.context, plain.context);
  EXPECT_EQ(dropped.context, same.context) << "the keep mask is a pure function of (seed, site_id, index)";
  EXPECT_NE(dropped.context, other_site.context);
  // p == 0 never consults the RNG: a different seed gives bit-identical output.
  Problem reseeded(base);
  reseeded.config.seed = 999;
  reseeded.forward();
  EXPECT_EQ(reseeded.context, plain.context);
}

TEST(DisentangledAttentionScale, SharedScaleCountsPositionTerms) {
  DisentangledAttentionConfig config;
  EXPECT_FLOAT_EQ(disentangled_attention_scale(64, config), std::sqrt(192.0f));
  config.p2c = false;
  EXPECT_FLOAT_EQ(disentangled_attention_scale(64, config), std::sqrt(128.0f));
  config.c2p = false;
  EXPECT_FLOAT_EQ(disentangled_attention_scale(64, config), 8.0f);
}

// The CUDA backward's bucket gathers as bands (gathers_band_width, gathers_band_first): with xlarge's buckets
// at the short backward's lengths every window row holds one distance, and every pair (i, j) lands in query
// i's Gc band and key j's Gp band, inside the window pitch; the bands cover nothing past the L nonzero rows
// but the alignment (the first nonzero row is the band's first plus at most 7).
TEST(DisentangledAttentionBands, EveryPairLandsInItsQuerysAndItsKeysBand) {
  const auto xlarge = RelativePositionConfig::from_model_config(256, -1, 512);
  for (const int64_t L : {8, 16, 40, 64, 120, 128}) {
    SCOPED_TRACE("L " + std::to_string(L));
    const int64_t window_begin = c2p_index(0, L - 1, xlarge);
    const int64_t window = c2p_index(L - 1, 0, xlarge) - window_begin + 1, pitch = (window + 7) / 8 * 8;
    ASSERT_EQ(window, 2 * L - 1);  // one distance a row: the bands' premise
    const int64_t width = gathers_band_width(L);
    std::vector<int64_t> lowest_c(L, pitch), lowest_p(L, pitch), highest_c(L, -1), highest_p(L, -1);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j < L; ++j) {
        const int64_t r = c2p_index(i, j, xlarge) - window_begin;
        const int64_t c_first = gathers_band_first(L, i, false), p_first = gathers_band_first(L, j, true);
        EXPECT_TRUE(r >= c_first && r < c_first + width) << "Gc row " << i << ", window row " << r;
        EXPECT_TRUE(r >= p_first && r < p_first + width) << "Gp row " << j << ", window row " << r;
        lowest_c[i] = std::min(lowest_c[i], r), highest_c[i] = std::max(highest_c[i], r);
        lowest_p[j] = std::min(lowest_p[j], r), highest_p[j] = std::max(highest_p[j], r);
      }
    }
    for (int64_t p = 0; p < L; ++p) {
      for (const bool by_key : {false, true}) {
        const int64_t first = gathers_band_first(L, p, by_key);
        const int64_t lowest = by_key ? lowest_p[p] : lowest_c[p],
                      highest = by_key ? highest_p[p] : highest_c[p];
        EXPECT_EQ(first % 8, 0);
        EXPECT_TRUE(lowest - first < 8 && highest - lowest == L - 1 && first + width <= pitch)
            << (by_key ? "Gp" : "Gc") << " row " << p << ": band from " << first << ", rows " << lowest
            << ".." << highest << ", pitch " << pitch;
      }
    }
  }
}

TEST(DisentangledAttentionArguments, RejectsBadShapesAndMissingTables) {
  Problem pr({"", tiny_buckets(), true, true});
  auto f = Problem::features;
  const Tensor mask = pr.mask_tensor(), probs = pr.probs_tensor();
  const Tensor pos_key = pr.table(pr.pos_key, true), pos_query = pr.table(pr.pos_query, true);
  // Table with the wrong number of rows (2S - 1).
  const Tensor short_table(pr.pos_key.data(), Shape{pr.table_rows - 1, kFeatures}, DType::f32);
  EXPECT_THROW(disentangled_attention_forward(f(pr.q), f(pr.k), f(pr.v), short_table, pos_query, mask,
                                              pr.config, f(pr.context), probs),
               Error);
  EXPECT_THROW(disentangled_attention_forward(f(pr.q), f(pr.k), f(pr.v), Tensor(), pos_query, mask, pr.config,
                                              f(pr.context), probs),
               Error);
  DisentangledAttentionConfig bad_heads = pr.config;
  bad_heads.num_heads = 4;  // 15 features do not split into 4 heads
  EXPECT_THROW(disentangled_attention_forward(f(pr.q), f(pr.k), f(pr.v), pos_key, pos_query, mask, bad_heads,
                                              f(pr.context), probs),
               Error);
  DisentangledAttentionConfig bad_dropout = pr.config;
  bad_dropout.dropout_p = 1.0f;
  EXPECT_THROW(disentangled_attention_forward(f(pr.q), f(pr.k), f(pr.v), pos_key, pos_query, mask,
                                              bad_dropout, f(pr.context), probs),
               Error);
  const Tensor wrong_mask(pr.mask.data(), Shape{kBatch, kLength - 1}, DType::i64);
  EXPECT_THROW(disentangled_attention_forward(f(pr.q), f(pr.k), f(pr.v), pos_key, pos_query, wrong_mask,
                                              pr.config, f(pr.context), probs),
               Error);
  const Tensor on_gpu(pr.q.data(), Shape{kBatch, kLength, kFeatures}, DType::f32, DeviceKind::cuda);
  EXPECT_THROW(disentangled_attention_forward(on_gpu, f(pr.k), f(pr.v), pos_key, pos_query, mask, pr.config,
                                              f(pr.context), probs),
               Error);
}

TEST(DisentangledAttentionMask, FloatMaskMatchesIntegerMask) {
  Problem pr({"", tiny_buckets(), true, true});
  pr.forward();
  std::vector<float> mask_f32(pr.mask.begin(), pr.mask.end());
  std::vector<float> context(pr.context.size()), probs(pr.probs.size());
  auto f = Problem::features;
  disentangled_attention_forward(
      f(pr.q), f(pr.k), f(pr.v), pr.table(pr.pos_key, true), pr.table(pr.pos_query, true),
      Tensor(mask_f32.data(), Shape{kBatch, kLength}, DType::f32), pr.config, f(context),
      Tensor(probs.data(), Shape{kBatch, kHeads, kLength, kLength}, DType::f32));
  EXPECT_EQ(context, pr.context);
  EXPECT_EQ(probs, pr.probs);
}

}  // namespace
}  // namespace zt::kernels
