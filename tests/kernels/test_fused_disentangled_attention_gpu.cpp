// The fused disentangled-attention forward and backward (kernels/cuda/fused_disentangled_attention.cuh)
// against the CPU reference and against the unfused CUDA path, with test_disentangled_attention_gpu.cpp's
// policy: inputs rounded to the storage dtype, probs compared with the reference's probs rounded to it, the
// per-dtype tolerance of tests/support/tolerance.h (the backward reads the GPU's probs in T, one more
// rounding of P, as the unfused backward's test explains). The dropout keep pattern is checked bit for bit:
// with V the identity per head (L <= d), context row i is P~ row i exactly (one product per output), so
// every entry must be T(P * 1/(1 - p)) where the host's Philox keeps e = ((b*N + h)*L + i)*L + j and 0
// where it drops it, for the fused and the unfused forward alike.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/cuda/fused_disentangled_attention.cuh"
#include "kernels/disentangled_attention.h"
#include "kernels/dropout.h"
#include "kernels/philox.h"
#include "runtime/stream.h"
#include "tests/kernels/attention_gpu_cases.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/support/finite_difference.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;
using test::round_to;
using test::to_device;
using test::to_host;

// tiny_buckets at L 7 reaches the log buckets past 4; clamped_buckets at L 137 clamps past 64.
using Case = test::AttentionCase;

// The inputs of one case on the host (rounded to the storage dtype) and on the device, and the outputs
// of one GPU forward (context and probs start as 9, so an element the kernel skips shows).
struct Problem {
  Case c;
  DisentangledAttentionConfig config;
  Shape features, table, probs_shape;
  std::vector<float> q, k, v, pk, pq;
  std::vector<int64_t> mask;
  test::DeviceTensor gq, gk, gv, gpk, gpq, gmask;

  // identity_v: V[b, j, h*d + k] = [j == k] (needs L <= d), for the keep-pattern check.
  explicit Problem(const Case& c_, bool identity_v = false) : c(c_) {
    const int64_t B = c.batch, L = c.length, N = c.heads, D = c.heads * c.head_size;
    config = test::attention_config(c, dropout_site_id(3, 5, 1));
    features = Shape{B, L, D};
    table = Shape{2 * c.positions.att_span(), D};
    probs_shape = Shape{B, N, L, L};
    q = round_to(test::random_uniform(features.numel(), 51), c.dtype);
    k = round_to(test::random_uniform(features.numel(), 52), c.dtype);
    v = round_to(test::random_uniform(features.numel(), 53), c.dtype);
    if (identity_v) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < L; ++j)
          for (int64_t f = 0; f < D; ++f)
            v[static_cast<size_t>((b * L + j) * D + f)] = (f % c.head_size) == j ? 1.0f : 0.0f;
    }
    pk = round_to(test::random_uniform(table.numel(), 54), c.dtype);
    pq = round_to(test::random_uniform(table.numel(), 55), c.dtype);
    // Batch item 0 is all real tokens; the last has its final three positions padded (at L < 4 every
    // position: fully masked rows are uniform).
    mask.assign(static_cast<size_t>(B * L), 1);
    for (int64_t t = std::max<int64_t>(L - 3, 0); t < L; ++t) mask[static_cast<size_t>((B - 1) * L + t)] = 0;
    gq = to_device(q, features, c.dtype);
    gk = to_device(k, features, c.dtype);
    gv = to_device(v, features, c.dtype);
    gpk = to_device(pk, table, c.dtype);
    gpq = to_device(pq, table, c.dtype);
    gmask = test::to_device_i64(mask, Shape{B, L});
  }
  Tensor pos_key() const { return c.c2p ? gpk.tensor : Tensor(); }
  Tensor pos_query() const { return c.p2c ? gpq.tensor : Tensor(); }

  struct Outputs {
    test::DeviceTensor context, probs;
  };
  Outputs fresh_outputs() const {
    return {
        to_device(std::vector<float>(static_cast<size_t>(features.numel()), 9.0f), features, c.dtype),
        to_device(std::vector<float>(static_cast<size_t>(probs_shape.numel()), 9.0f), probs_shape, c.dtype)};
  }
  Outputs fused() const {
    Outputs out = fresh_outputs();
    gpu::fused_disentangled_attention_forward(gq.tensor, gk.tensor, gv.tensor, pos_key(), pos_query(),
                                              gmask.tensor, config, out.context.tensor, out.probs.tensor,
                                              current_stream());
    return out;
  }
  // The public entry point: the unfused path unless ZT_FUSED_ATTENTION=1 (the tests that need the unfused
  // path skip themselves then).
  Outputs unfused() const {
    Outputs out = fresh_outputs();
    disentangled_attention_forward(gq.tensor, gk.tensor, gv.tensor, pos_key(), pos_query(), gmask.tensor,
                                   config, out.context.tensor, out.probs.tensor);
    return out;
  }
};

class FusedAttentionGpu : public ::testing::TestWithParam<Case> {};

TEST_P(FusedAttentionGpu, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  const char* unsupported = gpu::fused_attention_forward_unsupported(
      p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(), p.gq.tensor, p.config);
  ASSERT_EQ(unsupported, nullptr) << unsupported;
  std::vector<float> context_ref(static_cast<size_t>(p.features.numel()));
  std::vector<float> probs_ref(static_cast<size_t>(p.probs_shape.numel()));
  std::vector<float> q = p.q, k = p.k, v = p.v, pk = p.pk, pq = p.pq;
  std::vector<int64_t> mask = p.mask;
  const auto f32 = [](std::vector<float>& x, Shape s) { return Tensor(x.data(), s, DType::f32); };
  disentangled_attention_forward(f32(q, p.features), f32(k, p.features), f32(v, p.features),
                                 p.c.c2p ? f32(pk, p.table) : Tensor(), p.c.p2c ? f32(pq, p.table) : Tensor(),
                                 Tensor(mask.data(), Shape{p.c.batch, p.c.length}, DType::i64), p.config,
                                 f32(context_ref, p.features), f32(probs_ref, p.probs_shape));
  const Problem::Outputs got = p.fused();
  const test::Tolerance tol = test::tolerance_for(p.c.dtype);
  EXPECT_TRUE(all_close("probs", to_host(got.probs.tensor), round_to(probs_ref, p.c.dtype), tol));
  EXPECT_TRUE(all_close("context", to_host(got.context.tensor), context_ref, tol));
}

TEST_P(FusedAttentionGpu, MatchesUnfusedGpuPath) {
  ZT_SKIP_WITHOUT_GPU();
  if (gpu::fused_attention_forward_enabled())
    GTEST_SKIP() << "ZT_FUSED_ATTENTION=1: no unfused path to compare";
  const Problem p(GetParam());
  const Problem::Outputs fused = p.fused(), unfused = p.unfused();
  const test::Tolerance tol = test::tolerance_for(p.c.dtype);
  EXPECT_TRUE(all_close("probs", to_host(fused.probs.tensor), to_host(unfused.probs.tensor), tol));
  EXPECT_TRUE(all_close("context", to_host(fused.context.tensor), to_host(unfused.context.tensor), tol));
}

// The backward's inputs and outputs beyond Problem's: dcontext, and the table gradients' starting values
// (accumulated into); dq, dk, dv start as 9.
struct BackwardRun {
  std::vector<float> dc, dpk_initial, dpq_initial;
  test::DeviceTensor gdc, dq, dk, dv, dpk, dpq;
  explicit BackwardRun(const Problem& p)
      : dc(round_to(test::random_uniform(p.features.numel(), 56), p.c.dtype)),
        dpk_initial(test::random_uniform(p.table.numel(), 57)),
        dpq_initial(test::random_uniform(p.table.numel(), 58)) {
    gdc = to_device(dc, p.features, p.c.dtype);
    const std::vector<float> nines(static_cast<size_t>(p.features.numel()), 9.0f);
    dq = to_device(nines, p.features, p.c.dtype);
    dk = to_device(nines, p.features, p.c.dtype);
    dv = to_device(nines, p.features, p.c.dtype);
    dpk = to_device(dpk_initial, p.table, DType::f32);
    dpq = to_device(dpq_initial, p.table, DType::f32);
  }
  // fused: gpu::fused_disentangled_attention_backward; else the public entry point (unfused unless
  // ZT_FUSED_ATTENTION_BACKWARD=1).
  void run(const Problem& p, const Tensor& probs, bool fused) const {
    const Tensor dpos_key = p.c.c2p ? dpk.tensor : Tensor(), dpos_query = p.c.p2c ? dpq.tensor : Tensor();
    if (fused) {
      gpu::fused_disentangled_attention_backward(
          p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(), p.gmask.tensor, probs,
          gdc.tensor, p.config, dq.tensor, dk.tensor, dv.tensor, dpos_key, dpos_query, current_stream());
    } else {
      disentangled_attention_backward(p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(),
                                      p.gmask.tensor, probs, gdc.tensor, p.config, dq.tensor, dk.tensor,
                                      dv.tensor, dpos_key, dpos_query);
    }
  }
};

// The fused backward on the GPU's probs against the CPU reference backward on its own (f32) probs, as
// test_disentangled_attention_gpu.cpp compares the unfused one.
TEST_P(FusedAttentionGpu, BackwardMatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  const BackwardRun run(p);
  std::vector<float> q = p.q, k = p.k, v = p.v, pk = p.pk, pq = p.pq, dc = run.dc;
  std::vector<int64_t> mask = p.mask;
  std::vector<float> context_ref(static_cast<size_t>(p.features.numel()));
  std::vector<float> probs_ref(static_cast<size_t>(p.probs_shape.numel()));
  std::vector<float> dq_ref(context_ref.size()), dk_ref(context_ref.size()), dv_ref(context_ref.size());
  std::vector<float> dpk_ref = run.dpk_initial, dpq_ref = run.dpq_initial;
  const auto f32 = [](std::vector<float>& x, Shape s) { return Tensor(x.data(), s, DType::f32); };
  const Tensor pk_cpu = p.c.c2p ? f32(pk, p.table) : Tensor(), pq_cpu = p.c.p2c ? f32(pq, p.table) : Tensor();
  const Tensor mask_cpu(mask.data(), Shape{p.c.batch, p.c.length}, DType::i64);
  disentangled_attention_forward(f32(q, p.features), f32(k, p.features), f32(v, p.features), pk_cpu, pq_cpu,
                                 mask_cpu, p.config, f32(context_ref, p.features),
                                 f32(probs_ref, p.probs_shape));
  disentangled_attention_backward(f32(q, p.features), f32(k, p.features), f32(v, p.features), pk_cpu, pq_cpu,
                                  mask_cpu, f32(probs_ref, p.probs_shape), f32(dc, p.features), p.config,
                                  f32(dq_ref, p.features), f32(dk_ref, p.features), f32(dv_ref, p.features),
                                  p.c.c2p ? f32(dpk_ref, p.table) : Tensor(),
                                  p.c.p2c ? f32(dpq_ref, p.table) : Tensor());
  const Problem::Outputs forward = p.unfused();  // the backward alone under test
  run.run(p, forward.probs.tensor, /*fused=*/true);
  const test::Tolerance tol = test::tolerance_for(p.c.dtype);
  EXPECT_TRUE(all_close("dv", to_host(run.dv.tensor), dv_ref, tol));
  EXPECT_TRUE(all_close("dq", to_host(run.dq.tensor), dq_ref, tol));
  EXPECT_TRUE(all_close("dk", to_host(run.dk.tensor), dk_ref, tol));
  if (p.c.c2p) {
    EXPECT_TRUE(all_close("dpos_key", to_host(run.dpk.tensor), dpk_ref, tol));
  }
  if (p.c.p2c) {
    EXPECT_TRUE(all_close("dpos_query", to_host(run.dpq.tensor), dpq_ref, tol));
  }
}

// Fused and unfused backward on the same probs (the unfused forward's).
TEST_P(FusedAttentionGpu, BackwardMatchesUnfusedGpuPath) {
  ZT_SKIP_WITHOUT_GPU();
  if (gpu::fused_attention_forward_enabled() || gpu::fused_attention_backward_enabled())
    GTEST_SKIP() << "a ZT_FUSED_ATTENTION* switch is on: no unfused path to compare";
  const Problem p(GetParam());
  const Problem::Outputs forward = p.unfused();
  const BackwardRun fused(p), unfused(p);
  fused.run(p, forward.probs.tensor, true);
  unfused.run(p, forward.probs.tensor, false);
  const test::Tolerance tol = test::tolerance_for(p.c.dtype);
  EXPECT_TRUE(all_close("dv", to_host(fused.dv.tensor), to_host(unfused.dv.tensor), tol));
  EXPECT_TRUE(all_close("dq", to_host(fused.dq.tensor), to_host(unfused.dq.tensor), tol));
  EXPECT_TRUE(all_close("dk", to_host(fused.dk.tensor), to_host(unfused.dk.tensor), tol));
  if (p.c.c2p) {
    EXPECT_TRUE(all_close("dpos_key", to_host(fused.dpk.tensor), to_host(unfused.dpk.tensor), tol));
  }
  if (p.c.p2c) {
    EXPECT_TRUE(all_close("dpos_query", to_host(fused.dpq.tensor), to_host(unfused.dpq.tensor), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedAttentionGpu,
    ::testing::Values(
        Case{"bf16_L1_both", DType::bf16, 2, 1, 2, 64, test::xlarge_buckets(), true, true, 0.0f},
        Case{"bf16_L1_both_dropout", DType::bf16, 2, 1, 2, 64, test::xlarge_buckets(), true, true, 0.1f},
        Case{"bf16_L7_both_dropout", DType::bf16, 2, 7, 3, 64, test::tiny_buckets(), true, true, 0.1f},
        Case{"f16_L7_c2p_only", DType::f16, 2, 7, 3, 64, test::tiny_buckets(), true, false, 0.0f},
        Case{"bf16_L64_p2c_only_unbucketed", DType::bf16, 2, 64, 2, 64, test::unbucketed(), false, true,
             0.0f},
        Case{"bf16_L64_content_only_dropout", DType::bf16, 2, 64, 2, 64, test::xlarge_buckets(), false, false,
             0.1f},
        Case{"bf16_L128_xlarge_dropout", DType::bf16, 2, 128, 3, 64, test::xlarge_buckets(), true, true,
             0.1f},
        Case{"f16_L128_xlarge", DType::f16, 2, 128, 3, 64, test::xlarge_buckets(), true, true, 0.0f},
        Case{"bf16_L137_clamped_dropout", DType::bf16, 2, 137, 2, 64, test::clamped_buckets(), true, true,
             0.1f},
        // Past the bucket midpoint 128: the log buckets, several key chunks per 128-key softmax chunk.
        Case{"bf16_L300_xlarge_buckets_dropout", DType::bf16, 1, 300, 2, 64, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"f16_L512_xlarge_buckets", DType::f16, 1, 512, 2, 64, test::xlarge_buckets(), true, true, 0.0f},
        // The other head sizes (16: zt_bench's validation shape).
        Case{"bf16_L40_d16_dropout", DType::bf16, 3, 40, 3, 16, test::tiny_buckets(), true, true, 0.1f},
        Case{"f16_L40_d32", DType::f16, 2, 40, 2, 32, test::tiny_buckets(), true, true, 0.0f},
        Case{"bf16_L40_d128_dropout", DType::bf16, 2, 40, 2, 128, test::xlarge_buckets(), true, true, 0.1f}),
    [](const auto& info) { return info.param.name; });

// Every entry of P~ (read through V = identity) is T(P * 1/(1 - p)) or 0, as the host's Philox says.
::testing::AssertionResult dropout_matches_host_keep(const Problem& p, const Problem::Outputs& out) {
  const std::vector<float> context = to_host(out.context.tensor), probs = to_host(out.probs.tensor);
  const int64_t B = p.c.batch, L = p.c.length, N = p.c.heads, d = p.c.head_size, D = N * d;
  const float scale = 1.0f / (1.0f - p.config.dropout_p);
  int64_t wrong = 0, dropped = 0;
  std::string first;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < N; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int64_t e = ((b * N + h) * L + i) * L + j;
          const bool keep =
              dropout_keep(p.config.seed, p.config.site_id, static_cast<uint64_t>(e), p.config.dropout_p);
          dropped += keep ? 0 : 1;
          const float want = keep ? round_to({probs[static_cast<size_t>(e)] * scale}, p.c.dtype)[0] : 0.0f;
          const float got = context[static_cast<size_t>((b * L + i) * D + h * d + j)];
          if (got != want && wrong++ == 0)
            first = "(b " + std::to_string(b) + ", h " + std::to_string(h) + ", i " + std::to_string(i) +
                    ", j " + std::to_string(j) + "): got " + std::to_string(got) + ", want " +
                    std::to_string(want);
        }
  if (dropped == 0) return ::testing::AssertionFailure() << "no entry dropped: the check cannot fail";
  if (wrong > 0) return ::testing::AssertionFailure() << wrong << " entries of P~ differ, first " << first;
  return ::testing::AssertionSuccess();
}

class FusedAttentionDropoutGpu : public ::testing::TestWithParam<Case> {};

TEST_P(FusedAttentionDropoutGpu, KeepsTheHostsEntries) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam(), /*identity_v=*/true);
  EXPECT_TRUE(dropout_matches_host_keep(p, p.fused())) << "fused";
  if (!gpu::fused_attention_forward_enabled()) {
    EXPECT_TRUE(dropout_matches_host_keep(p, p.unfused())) << "unfused";
  }
}

// L 7: rows start mid Philox block (e % 4 != 0), the per-element path; L 64: whole blocks.
INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedAttentionDropoutGpu,
    ::testing::Values(Case{"bf16_L7_d16", DType::bf16, 2, 7, 2, 16, test::tiny_buckets(), true, true, 0.25f},
                      Case{"f16_L64_d64", DType::f16, 2, 64, 3, 64, test::xlarge_buckets(), true, true, 0.1f},
                      Case{"bf16_L128_d128", DType::bf16, 1, 128, 2, 128, test::xlarge_buckets(), true, true,
                           0.1f}),
    [](const auto& info) { return info.param.name; });

// The support check looks at dtypes, shapes, pointers and the bucketing only (no device access), so it
// runs here on host tensors, GPU or not.
TEST(FusedAttentionSupport, SaysWhyNot) {
  alignas(16) static uint8_t memory[64];
  const auto tensor = [](DType dtype, Shape shape, int64_t offset = 0) {
    return Tensor(memory + offset, shape, dtype);
  };
  DisentangledAttentionConfig config;
  config.num_heads = 24;
  config.positions = test::xlarge_buckets();
  const auto why = [&](DType dtype, int64_t L, int64_t D, int64_t offset = 0) {
    const Tensor x = tensor(dtype, Shape{40, L, D}), table = tensor(dtype, Shape{512, D});
    const char* reason = gpu::fused_attention_forward_unsupported(tensor(dtype, Shape{40, L, D}, offset), x,
                                                                  x, table, table, x, config);
    return std::string(reason == nullptr ? "" : reason);
  };
  EXPECT_EQ(why(DType::bf16, 128, 1536), "");  // deberta-v2-xlarge, d 64
  EXPECT_EQ(why(DType::f16, 512, 1536), "");
  EXPECT_NE(why(DType::f32, 128, 1536).find("bf16 or f16"), std::string::npos);
  EXPECT_NE(why(DType::bf16, 128, 24 * 8).find("head size"), std::string::npos);
  EXPECT_NE(why(DType::bf16, 513, 1536).find("over 512"), std::string::npos);
  EXPECT_NE(why(DType::bf16, 128, 1536, 2).find("16-byte aligned"), std::string::npos);
  // 256 buckets over 260 positions: the log buckets step by up to 2 rows, 63 positions reach 74 rows.
  config.positions = RelativePositionConfig::from_model_config(256, 260, 512);
  EXPECT_EQ(why(DType::bf16, 128, 1536), "");  // |i - j| < 128: identity buckets
  EXPECT_NE(why(DType::bf16, 256, 1536).find("more than 64 table rows"), std::string::npos);
  // The backward adds the gradients' alignment.
  {
    config.positions = test::xlarge_buckets();
    const Tensor x = tensor(DType::bf16, Shape{40, 128, 1536}), table = tensor(DType::bf16, Shape{512, 1536});
    const Tensor shifted = tensor(DType::bf16, Shape{40, 128, 1536}, 2);
    EXPECT_EQ(gpu::fused_attention_backward_unsupported(x, x, x, table, table, x, x, x, x, config), nullptr);
    const char* reason =
        gpu::fused_attention_backward_unsupported(x, x, x, table, table, x, x, shifted, x, config);
    EXPECT_NE(std::string(reason == nullptr ? "" : reason).find("gradient"), std::string::npos);
  }
  // The budgets quoted in the kernels' comments.
  EXPECT_EQ(gpu::fused_attention_shared_bytes(128, 64, DType::bf16), size_t{62208});
  EXPECT_LE(gpu::fused_attention_shared_bytes(512, 128, DType::f16), gpu::kFusedMaxSharedBytes);
  EXPECT_EQ(gpu::fused_attention_backward_shared_bytes(128, 64, DType::bf16), size_t{40448});
  EXPECT_LE(gpu::fused_attention_backward_shared_bytes(512, 128, DType::f16), gpu::kFusedMaxSharedBytes);
}

}  // namespace
}  // namespace zt::kernels

#else
// A build without nvcc has no CUDA kernels to test.
TEST(FusedAttentionGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
