// AdamW against closed forms and an independent double-precision reference; threading, ranges, 16-bit copy.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "runtime/check.h"
#include "runtime/dtype.h"
#include "tests/support/tolerance.h"

namespace zt::optim {
namespace {

// Owns the four flat buffers of one AdamW problem.
struct Problem {
  std::vector<float> params, grads, exp_avg, exp_avg_sq;
  explicit Problem(size_t n) : params(n), grads(n), exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f) {}
  AdamWBuffers buffers() { return {params, grads, exp_avg, exp_avg_sq}; }
};

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(AdamW, FirstStepMovesEachParamByLrTimesGOverAbsGPlusEps) {
  // At t=1, m/(1-b1) = g and sqrt(v/(1-b2)) = |g| exactly in real arithmetic, so with no decay
  //   p1 = p0 - lr * g / (|g| + eps)
  // which is ~lr*sign(g) for |g| >> eps and lr/2 for |g| == eps (this catches eps in the wrong place).
  const double lr = 1e-3, eps = 1e-8;
  const std::vector<float> g = {1.0f, -2.5f, 1e-3f, -1e-6f, 1e-8f, -1e-8f, 3e-9f, 0.0f, 7.0f};
  Problem pb(g.size());
  pb.grads = g;
  for (size_t i = 0; i < g.size(); ++i) pb.params[i] = 0.25f * static_cast<float>(i) - 1.0f;
  const std::vector<float> p0 = pb.params;

  AdamW adamw(AdamWHyper{.lr = lr, .eps = eps, .weight_decay = 0.0}, 1);
  const std::vector<TensorRange> all = {{0, static_cast<int64_t>(g.size()), true}};
  adamw.step(pb.buffers(), all);
  EXPECT_EQ(adamw.step_count(), 1);

  for (size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i];
    const double expected = p0[i] - lr * gi / (std::abs(gi) + eps);
    EXPECT_NEAR(pb.params[i], expected, 1e-6 * lr + 1e-7 * std::abs(expected)) << "element " << i;
  }
  EXPECT_NEAR(pb.params[4] - p0[4], -lr / 2, 1e-4 * lr);  // |g| == eps: half a step
  EXPECT_EQ(pb.params[7], p0[7]);                         // g == 0: no movement at all
  EXPECT_FLOAT_EQ(pb.exp_avg[1], 0.1f * -2.5f);           // m = (1-b1) g
  EXPECT_FLOAT_EQ(pb.exp_avg_sq[1], 0.001f * 6.25f);      // v = (1-b2) g^2
}

TEST(AdamW, ConstantGradientTakesEqualStepsOfLr) {
  // With a constant g, m_t = g (1-b1^t) and v_t = g^2 (1-b2^t): the bias corrections undo the warm-up of
  // the moments exactly, so every step moves p by lr * g/(|g|+eps), ~lr*sign(g): after k steps k times that.
  const double lr = 0.01;
  Problem pb(5);
  pb.grads = {0.5f, -0.5f, 3.0f, -1e-2f, 2e-4f};
  pb.params = {1.0f, 1.0f, -2.0f, 0.5f, 0.0f};
  const std::vector<float> p0 = pb.params;
  AdamW adamw(AdamWHyper{.lr = lr, .weight_decay = 0.0}, 1);
  const std::vector<TensorRange> all = {{0, 5, true}};
  constexpr int kSteps = 25;
  for (int s = 0; s < kSteps; ++s) adamw.step(pb.buffers(), all);
  for (size_t i = 0; i < p0.size(); ++i) {
    const double g = pb.grads[i];
    const double per_step = lr * g / (std::abs(g) + 1e-8);  // eps = 1e-8 is visible for g = 2e-4
    EXPECT_NEAR(pb.params[i], p0[i] - kSteps * per_step, 2e-6) << "element " << i;
  }
}

TEST(AdamW, BiasCorrectionScalars) {
  // neg_step_size = -lr / (1 - b1^t), bias_correction2_sqrt = sqrt(1 - b2^t); values worked by hand:
  //   t=1: 1-0.9 = 0.1, 1-0.999 = 0.001;  t=2: 1-0.81 = 0.19, 1-0.998001 = 0.001999
  const AdamWHyper h{.lr = 2e-3, .eps = 1e-6, .weight_decay = 0.1};
  const AdamWStepScalars s1 = adamw_step_scalars(h, 2e-3, 1);
  EXPECT_FLOAT_EQ(s1.neg_step_size, -2e-3f / 0.1f);
  EXPECT_FLOAT_EQ(s1.bias_correction2_sqrt, 0.0316227766f);
  EXPECT_FLOAT_EQ(s1.decay_factor, 1.0f - 2e-4f);
  EXPECT_FLOAT_EQ(s1.m_weight, 0.1f);
  EXPECT_TRUE(s1.m_weight_is_small);
  EXPECT_FLOAT_EQ(s1.beta2, 0.999f);
  EXPECT_FLOAT_EQ(s1.v_weight, 0.001f);
  EXPECT_FLOAT_EQ(s1.eps, 1e-6f);
  const AdamWStepScalars s2 = adamw_step_scalars(h, 2e-3, 2);
  EXPECT_FLOAT_EQ(s2.neg_step_size, -2e-3f / 0.19f);
  EXPECT_FLOAT_EQ(s2.bias_correction2_sqrt, 0.0447101778f);  // sqrt(0.001999)
  // Late in training both corrections tend to 1.
  const AdamWStepScalars late = adamw_step_scalars(h, 2e-3, 100000);
  EXPECT_FLOAT_EQ(late.neg_step_size, -2e-3f);
  EXPECT_FLOAT_EQ(late.bias_correction2_sqrt, 1.0f);
  EXPECT_THROW(adamw_step_scalars(h, 2e-3, 0), Error);
}

TEST(AdamW, ZeroGradientsOnlyDecayTheRangesThatDecay) {
  // g = 0 keeps m = v = 0, so the Adam term is 0/(0+eps) = 0 and only p *= (1 - lr*wd) acts, per step.
  const double lr = 0.1, wd = 0.5;  // factor 0.95
  Problem pb(10);
  for (size_t i = 0; i < 10; ++i) pb.params[i] = static_cast<float>(i) - 4.5f;
  const std::vector<float> p0 = pb.params;
  AdamW adamw(AdamWHyper{.weight_decay = wd}, 1);
  const std::vector<TensorRange> ranges = {{0, 4, true}, {4, 3, false}, {7, 3, true}};
  for (int s = 0; s < 3; ++s) adamw.step(pb.buffers(), ranges, lr);
  for (size_t i = 0; i < 10; ++i) {
    const bool decays = i < 4 || i >= 7;
    if (decays) {
      EXPECT_NEAR(pb.params[i], p0[i] * 0.95 * 0.95 * 0.95, 1e-6) << "element " << i;
    } else {
      EXPECT_EQ(pb.params[i], p0[i]) << "element " << i;  // no decay: bitwise unchanged
    }
    EXPECT_EQ(pb.exp_avg[i], 0.0f);
    EXPECT_EQ(pb.exp_avg_sq[i], 0.0f);
  }
}

// Independent reference in double, written from the paper's formula (not torch's operation order).
struct ReferenceAdamW {
  AdamWHyper h;
  std::vector<double> p, m, v;
  int64_t t = 0;
  void step(const std::vector<float>& g, const std::vector<TensorRange>& ranges, double lr) {
    ++t;
    for (const TensorRange& r : ranges) {
      for (int64_t i = r.offset; i < r.offset + r.numel; ++i) {
        if (r.weight_decay) p[i] -= lr * h.weight_decay * p[i];
        m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
        v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
        const double m_hat = m[i] / (1 - std::pow(h.beta1, t));
        const double v_hat = v[i] / (1 - std::pow(h.beta2, t));
        p[i] -= lr * m_hat / (std::sqrt(v_hat) + h.eps);
      }
    }
  }
};

class AdamWVsReference : public ::testing::TestWithParam<int64_t> {};

TEST_P(AdamWVsReference, SeveralStepsAgreeWithADoubleReference) {
  // Lengths around the vector width and the block size exercise the scalar tails and the block split.
  const int64_t n = GetParam();
  const AdamWHyper h{.beta1 = 0.8, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.02};
  Problem pb(static_cast<size_t>(n));
  pb.params = random_values(static_cast<size_t>(n), 1);
  ReferenceAdamW ref{
      h, {pb.params.begin(), pb.params.end()}, std::vector<double>(n), std::vector<double>(n), 0};
  // Two tensors: the first third without decay.
  const std::vector<TensorRange> ranges = {{0, n / 3, false}, {n / 3, n - n / 3, true}};
  AdamW adamw(h, 3);
  for (int s = 0; s < 6; ++s) {
    pb.grads = random_values(static_cast<size_t>(n), 100 + s, s % 2 ? 0.01f : 2.0f);
    const double lr = 1e-2 * (s + 1);
    adamw.step(pb.buffers(), ranges, lr);
    ref.step(pb.grads, ranges, lr);
  }
  const std::vector<float> ref_p(ref.p.begin(), ref.p.end());
  const std::vector<float> ref_m(ref.m.begin(), ref.m.end());
  const std::vector<float> ref_v(ref.v.begin(), ref.v.end());
  const test::Tolerance tol = test::tolerance_for(DType::f32);
  EXPECT_TRUE(test::all_close("params", pb.params, ref_p, tol));
  EXPECT_TRUE(test::all_close("exp_avg", pb.exp_avg, ref_m, tol));
  EXPECT_TRUE(test::all_close("exp_avg_sq", pb.exp_avg_sq, ref_v, {1e-12, 1e-5}));
}

INSTANTIATE_TEST_SUITE_P(Lengths, AdamWVsReference, ::testing::Values(1, 3, 7, 33, 130, 1001, 70001),
                         [](const auto& info) { return zt::str("n", info.param); });

TEST(AdamW, ResultDoesNotDependOnThreadCount) {
  const size_t n = 300007;  // several blocks, ragged tail
  const std::vector<TensorRange> ranges = {{0, 5, false}, {5, 100000, true}, {100010, 199997, true}};
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 5}) {
    Problem pb(n);
    pb.params = random_values(n, 7);
    AdamW adamw(AdamWHyper{}, threads);
    for (int s = 0; s < 3; ++s) {
      pb.grads = random_values(n, 20 + s);
      adamw.step(pb.buffers(), ranges, 1e-3);
    }
    results.push_back(pb.params);
    results.push_back(pb.exp_avg_sq);
  }
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(results[0], results[4]);
  EXPECT_EQ(results[1], results[3]);
  EXPECT_EQ(results[1], results[5]);
}

TEST(AdamW, ElementsOutsideRangesAreUntouched) {
  Problem pb(20);
  pb.params = random_values(20, 3);
  pb.grads = random_values(20, 4);
  const std::vector<float> p0 = pb.params;
  AdamW adamw(AdamWHyper{}, 2);
  adamw.step(pb.buffers(), std::vector<TensorRange>{{2, 5, true}, {12, 4, false}});
  for (size_t i = 0; i < 20; ++i) {
    const bool inside = (i >= 2 && i < 7) || (i >= 12 && i < 16);
    if (inside) {
      EXPECT_NE(pb.params[i], p0[i]) << i;
    } else {
      EXPECT_EQ(pb.params[i], p0[i]) << i;
      EXPECT_EQ(pb.exp_avg[i], 0.0f) << i;
    }
  }
}

TEST(AdamW, BucketByBucketUpdateEqualsOneStep) {
  const size_t n = 1000;
  const std::vector<TensorRange> first = {{0, 300, true}, {300, 200, false}};
  const std::vector<TensorRange> second = {{500, 500, true}};
  std::vector<TensorRange> all = first;
  all.insert(all.end(), second.begin(), second.end());
  Problem whole(n), buckets(n);
  whole.params = buckets.params = random_values(n, 11);
  AdamW a(AdamWHyper{}, 2), b(AdamWHyper{}, 2);
  for (int s = 0; s < 3; ++s) {
    whole.grads = buckets.grads = random_values(n, 50 + s);
    a.step(whole.buffers(), all, 1e-3);
    b.begin_step();
    b.update(buckets.buffers(), second, 1e-3);  // buckets land in reverse layer order
    b.update(buckets.buffers(), first, 1e-3);
  }
  EXPECT_EQ(a.step_count(), b.step_count());
  EXPECT_EQ(whole.params, buckets.params);
  EXPECT_EQ(whole.exp_avg, buckets.exp_avg);
  EXPECT_EQ(whole.exp_avg_sq, buckets.exp_avg_sq);
}

TEST(AdamW, WritesSixteenBitCopyOfUpdatedParams) {
  const size_t n = 5000;
  const std::vector<TensorRange> ranges = {{0, 1000, false}, {1000, 3000, true}};  // [4000, 5000) left out
  Problem plain(n), with_bf16(n), with_f16(n);
  plain.params = with_bf16.params = with_f16.params = random_values(n, 5);
  plain.grads = with_bf16.grads = with_f16.grads = random_values(n, 6);
  std::vector<bf16> out_bf16(n, bf16{0x1234});
  std::vector<f16> out_f16(n, f16{0x1234});
  AdamW a(AdamWHyper{}, 2), b(AdamWHyper{}, 2), c(AdamWHyper{}, 2);
  a.step(plain.buffers(), ranges, 1e-2);
  b.step(with_bf16.buffers(), ranges, 1e-2, std::span<bf16>(out_bf16));
  c.step(with_f16.buffers(), ranges, 1e-2, std::span<f16>(out_f16));
  EXPECT_EQ(plain.params, with_bf16.params);  // the copy does not change the fp32 result
  EXPECT_EQ(plain.params, with_f16.params);
  for (size_t i = 0; i < n; ++i) {
    if (i < 4000) {
      ASSERT_EQ(out_bf16[i].bits, float_to_bf16(plain.params[i]).bits) << i;
      ASSERT_EQ(out_f16[i].bits, float_to_f16(plain.params[i]).bits) << i;
      ASSERT_NEAR(bf16_to_float(out_bf16[i]), plain.params[i], 1e-2 * std::abs(plain.params[i])) << i;
    } else {
      ASSERT_EQ(out_bf16[i].bits, 0x1234) << i;
      ASSERT_EQ(out_f16[i].bits, 0x1234) << i;
    }
  }
}

TEST(AdamW, SixteenBitCopyRoundsLikeTheRuntimeAtTheEdges) {
  // Params that land on bf16 rounding ties, NaN (from a NaN gradient), infinity and the largest float.
  // With lr = 0 and no decay the update leaves finite params as they are, so the copy sees exactly these.
  std::vector<float> special = {1.0f + 1.0f / 256,  // tie between 1 and 1 + 2^-7: rounds to even (1)
                                1.0f + 3.0f / 256,  // tie: rounds up to even
                                -1.0f - 1.0f / 256,
                                std::numeric_limits<float>::max(),
                                std::numeric_limits<float>::infinity(),
                                1e-40f,
                                0.0f,
                                -0.0f,
                                1.0f};
  const size_t n = special.size();
  Problem pb(n);
  pb.params = special;
  pb.grads.assign(n, 0.0f);
  pb.grads.back() = std::numeric_limits<float>::quiet_NaN();  // makes the last param NaN
  std::vector<bf16> out(n);
  std::vector<f16> out_f16(n);
  AdamW a(AdamWHyper{.weight_decay = 0.0}, 1), b(AdamWHyper{.weight_decay = 0.0}, 1);
  Problem pb2 = pb;
  a.step(pb.buffers(), std::vector<TensorRange>{{0, static_cast<int64_t>(n), false}}, 0.0,
         std::span<bf16>(out));
  b.step(pb2.buffers(), std::vector<TensorRange>{{0, static_cast<int64_t>(n), false}}, 0.0,
         std::span<f16>(out_f16));
  ASSERT_TRUE(std::isnan(pb.params.back()));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[i].bits, float_to_bf16(pb.params[i]).bits) << "element " << i;
    EXPECT_EQ(out_f16[i].bits, float_to_f16(pb2.params[i]).bits) << "element " << i;
  }
  EXPECT_EQ(out[0].bits, 0x3F80);  // 1.0
  EXPECT_EQ(out[1].bits, 0x3F82);  // 1 + 2^-6
  EXPECT_TRUE(std::isnan(bf16_to_float(out.back())));
}

TEST(AdamW, RejectsBadInput) {
  EXPECT_THROW(AdamW(AdamWHyper{.lr = -1}), Error);
  EXPECT_THROW(AdamW(AdamWHyper{.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW(AdamWHyper{.beta2 = -0.1}), Error);
  EXPECT_THROW(AdamW(AdamWHyper{.eps = -1e-8}), Error);
  EXPECT_THROW(AdamW(AdamWHyper{.weight_decay = -0.01}), Error);

  Problem pb(10);
  AdamW adamw(AdamWHyper{}, 1);
  EXPECT_THROW(adamw.update(pb.buffers(), std::vector<TensorRange>{{0, 10, true}}, 1e-3), Error);  // t = 0
  EXPECT_THROW(adamw.step(pb.buffers(), std::vector<TensorRange>{{5, 6, true}}), Error);  // past the end
  EXPECT_THROW(adamw.step(pb.buffers(), std::vector<TensorRange>{{-1, 2, true}}), Error);
  EXPECT_THROW(adamw.step(pb.buffers(), std::vector<TensorRange>{{4, 3, true}, {0, 5, true}}),
               Error);  // overlap
  EXPECT_THROW(adamw.step(pb.buffers(), std::vector<TensorRange>{{0, 10, true}}, -1e-3), Error);
  std::vector<bf16> short_copy(9);
  EXPECT_THROW(
      adamw.step(pb.buffers(), std::vector<TensorRange>{{0, 10, true}}, 1e-3, std::span<bf16>(short_copy)),
      Error);
  std::vector<float> short_grads(9);
  EXPECT_THROW(adamw.step({pb.params, short_grads, pb.exp_avg, pb.exp_avg_sq}, std::vector<TensorRange>{}),
               Error);
  EXPECT_THROW(adamw.set_step_count(-1), Error);
  adamw.set_step_count(41);
  EXPECT_EQ(adamw.step_count(), 41);
}

// Every vector body this CPU runs equals the scalar body bit for bit: lengths that are not multiples of 8 or
// 16 (so the scalar tail runs), both lerp forms (beta1 0.9 and 0.3), a gradient scale, special values
// (NaN, inf, huge, tiny), and the bf16 and f16 copies.
struct SimdCase {
  CpuIsa isa;
  size_t n;
};

class AdamWSimd : public ::testing::TestWithParam<SimdCase> {};

TEST_P(AdamWSimd, EqualsScalarElementwise) {
  const auto [isa, n] = GetParam();
  if (!cpu_supports(isa)) GTEST_SKIP() << "this CPU cannot run " << cpu_isa_name(isa);
  for (const double beta1 : {0.9, 0.3}) {
    for (const float grad_scale : {1.0f, 0.37f}) {
      Problem ref(n), vec(n);
      ref.params = vec.params = random_values(n, 17, 0.5f);
      ref.exp_avg = vec.exp_avg = random_values(n, 18, 0.01f);
      ref.exp_avg_sq = vec.exp_avg_sq = random_values(n, 19, 0.001f);
      for (float& v : ref.exp_avg_sq) v = std::abs(v);
      vec.exp_avg_sq = ref.exp_avg_sq;
      ref.grads = vec.grads = random_values(n, 20, 3.0f);
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                1e30f,
                                1e-30f,
                                0.0f,
                                -0.0f};
      for (size_t k = 0; k < std::size(specials) && 3 * k < n; ++k) ref.grads[3 * k] = specials[k];
      vec.grads = ref.grads;
      const std::vector<TensorRange> ranges = {
          {0, static_cast<int64_t>(n / 3), false},
          {static_cast<int64_t>(n / 3), static_cast<int64_t>(n - n / 3), true}};
      const AdamWHyper hyper{.beta1 = beta1, .weight_decay = 0.1};
      for (int kind = 0; kind < 3; ++kind) {  // no copy, bf16, f16
        AdamW a(hyper, 2), b(hyper, 3);
        a.set_isa(CpuIsa::scalar);
        b.set_isa(isa);
        Problem r = ref, v = vec;
        std::vector<bf16> rb(n), vb(n);
        std::vector<f16> rh(n), vh(n);
        for (int step = 0; step < 2; ++step) {
          Params16Out ro, vo;
          if (kind == 1) ro = std::span<bf16>(rb), vo = std::span<bf16>(vb);
          if (kind == 2) ro = std::span<f16>(rh), vo = std::span<f16>(vh);
          a.step(r.buffers(), ranges, 1e-2, ro, grad_scale);
          b.step(v.buffers(), ranges, 1e-2, vo, grad_scale);
        }
        const std::string what =
            str(cpu_isa_name(isa), " n=", n, " beta1=", beta1, " scale=", grad_scale, " copy=", kind);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(r.params[i]), std::bit_cast<uint32_t>(v.params[i]))
              << what << " " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(r.exp_avg[i]), std::bit_cast<uint32_t>(v.exp_avg[i]))
              << what << " " << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(r.exp_avg_sq[i]), std::bit_cast<uint32_t>(v.exp_avg_sq[i]))
              << what << " " << i;
          ASSERT_EQ(rb[i].bits, vb[i].bits) << what << " " << i;
          ASSERT_EQ(rh[i].bits, vh[i].bits) << what << " " << i;
        }
        ASSERT_TRUE(std::isnan(v.params[0])) << what;  // the NaN gradient reached the check
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(IsasAndLengths, AdamWSimd,
                         ::testing::Values(SimdCase{CpuIsa::avx2, 1}, SimdCase{CpuIsa::avx2, 7},
                                           SimdCase{CpuIsa::avx2, 8}, SimdCase{CpuIsa::avx2, 61},
                                           SimdCase{CpuIsa::avx2, 100003}, SimdCase{CpuIsa::avx512, 5},
                                           SimdCase{CpuIsa::avx512, 16}, SimdCase{CpuIsa::avx512, 47},
                                           SimdCase{CpuIsa::avx512, 1025}, SimdCase{CpuIsa::avx512, 100003}),
                         [](const auto& info) {
                           return zt::str(cpu_isa_name(info.param.isa), "_n", info.param.n);
                         });

TEST(AdamW, PicksTheWidestBodyThisCpuRunsAndRefusesOthers) {
  AdamW adamw;
  EXPECT_EQ(adamw.isa(), best_cpu_isa());
  EXPECT_TRUE(cpu_supports(CpuIsa::scalar));
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (cpu_supports(isa)) {
      EXPECT_NO_THROW(adamw.set_isa(isa));
    } else {
      EXPECT_THROW(adamw.set_isa(isa), Error);
    }
  }
}

}  // namespace
}  // namespace zt::optim
