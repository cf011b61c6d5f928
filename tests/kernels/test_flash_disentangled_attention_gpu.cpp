// The flash disentangled attention on the GPU (kernels/cuda/flash_disentangled_attention.cuh) against the
// CPU reference (the stored-probabilities path in f32 on inputs rounded to the storage dtype) and against the
// stored GPU path, forward and backward, with the per-dtype tolerance of tests/support/tolerance.h (the flash
// path rounds P~ to T before P~ V as the stored path does, but from its unnormalized exponentials, and sums
// in another order: not bit for bit). Also: the dropout keep pattern entry by entry (V = identity per head:
// context row i is P~ row i / l_i, so a dropped entry is exactly 0 and a kept one is not), run-to-run
// determinism (bitwise), and lengths past the stored path's 1024 against the CPU flash path.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/cuda/flash_disentangled_attention.cuh"
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
using Case = test::AttentionCase;

// 64 buckets over 40 positions: past |i - j| = 32 a bucket step skips rows (33 -> row 37), so 64 diagonals
// reach more than 64 rows and the kernels gather per score instead of staging slices.
RelativePositionConfig steep_buckets() {
  return RelativePositionConfig::from_model_config(64, 40, 512);
}

struct Problem {
  Case c;
  DisentangledAttentionConfig config;
  Shape features, table, probs_shape, stats_shape;
  std::vector<float> q, k, v, pk, pq, dc;
  std::vector<int64_t> mask;
  test::DeviceTensor gq, gk, gv, gpk, gpq, gdc, gmask;

  explicit Problem(const Case& c_, bool identity_v = false) : c(c_) {
    const int64_t B = c.batch, L = c.length, N = c.heads, D = c.heads * c.head_size;
    config = test::attention_config(c, dropout_site_id(3, 5, 1));
    features = Shape{B, L, D};
    table = Shape{2 * c.positions.att_span(), D};
    probs_shape = Shape{B, N, L, L};
    stats_shape = Shape{B, N, L, 2};
    q = round_to(test::random_uniform(features.numel(), 71), c.dtype);
    k = round_to(test::random_uniform(features.numel(), 72), c.dtype);
    v = round_to(test::random_uniform(features.numel(), 73), c.dtype);
    if (identity_v) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < L; ++j)
          for (int64_t f = 0; f < D; ++f)
            v[static_cast<size_t>((b * L + j) * D + f)] = (f % c.head_size) == j ? 1.0f : 0.0f;
    }
    pk = round_to(test::random_uniform(table.numel(), 74), c.dtype);
    pq = round_to(test::random_uniform(table.numel(), 75), c.dtype);
    dc = round_to(test::random_uniform(features.numel(), 76), c.dtype);
    mask.assign(static_cast<size_t>(B * L), 1);
    for (int64_t t = std::max<int64_t>(L - 3, 0); t < L; ++t) mask[static_cast<size_t>((B - 1) * L + t)] = 0;
    gq = to_device(q, features, c.dtype);
    gk = to_device(k, features, c.dtype);
    gv = to_device(v, features, c.dtype);
    gpk = to_device(pk, table, c.dtype);
    gpq = to_device(pq, table, c.dtype);
    gdc = to_device(dc, features, c.dtype);
    gmask = test::to_device_i64(mask, Shape{B, L});
  }
  Tensor pos_key() const { return c.c2p ? gpk.tensor : Tensor(); }
  Tensor pos_query() const { return c.p2c ? gpq.tensor : Tensor(); }
};

// The outputs of one GPU run: context and stats of the forward, the gradients of the backward (dq, dk, dv
// start as 9; the table gradients start from fixed values and are accumulated into, in f32).
struct GpuRun {
  test::DeviceTensor context, stats, probs, dq, dk, dv, dpk, dpq;
  explicit GpuRun(const Problem& p) {
    const std::vector<float> nines(static_cast<size_t>(p.features.numel()), 9.0f);
    context = to_device(nines, p.features, p.c.dtype);
    dq = to_device(nines, p.features, p.c.dtype);
    dk = to_device(nines, p.features, p.c.dtype);
    dv = to_device(nines, p.features, p.c.dtype);
    stats = to_device(std::vector<float>(static_cast<size_t>(p.stats_shape.numel()), 9.0f), p.stats_shape,
                      DType::f32);
    dpk = to_device(test::random_uniform(p.table.numel(), 77), p.table, DType::f32);
    dpq = to_device(test::random_uniform(p.table.numel(), 78), p.table, DType::f32);
  }
  Tensor dpos_key(const Problem& p) const { return p.c.c2p ? dpk.tensor : Tensor(); }
  Tensor dpos_query(const Problem& p) const { return p.c.p2c ? dpq.tensor : Tensor(); }

  void flash(const Problem& p, bool backward) {
    flash_disentangled_attention_forward(p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(),
                                         p.gmask.tensor, p.config, context.tensor, stats.tensor);
    if (!backward) return;
    flash_disentangled_attention_backward(
        p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(), p.gmask.tensor, context.tensor,
        stats.tensor, p.gdc.tensor, p.config, dq.tensor, dk.tensor, dv.tensor, dpos_key(p), dpos_query(p));
  }
  void stored(const Problem& p) {
    probs =
        to_device(std::vector<float>(static_cast<size_t>(p.probs_shape.numel())), p.probs_shape, p.c.dtype);
    disentangled_attention_forward(p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(),
                                   p.gmask.tensor, p.config, context.tensor, probs.tensor);
    disentangled_attention_backward(p.gq.tensor, p.gk.tensor, p.gv.tensor, p.pos_key(), p.pos_query(),
                                    p.gmask.tensor, probs.tensor, p.gdc.tensor, p.config, dq.tensor,
                                    dk.tensor, dv.tensor, dpos_key(p), dpos_query(p));
  }
};

// The CPU's results in f32 on the same (rounded) inputs: the stored path, or the CPU flash path (L past what
// the test should spend on [L, L] buffers).
struct Reference {
  std::vector<float> context, dq, dk, dv, dpk, dpq;
};
Reference cpu_reference(const Problem& p, bool flash) {
  Problem& m = const_cast<Problem&>(p);
  const auto f32 = [](std::vector<float>& x, Shape s) { return Tensor(x.data(), s, DType::f32); };
  const size_t n = static_cast<size_t>(p.features.numel());
  Reference r;
  r.context.assign(n, 0.0f);
  r.dq.assign(n, 0.0f);
  r.dk.assign(n, 0.0f);
  r.dv.assign(n, 0.0f);
  r.dpk = test::random_uniform(p.table.numel(), 77);
  r.dpq = test::random_uniform(p.table.numel(), 78);
  const Tensor pk = p.c.c2p ? f32(m.pk, p.table) : Tensor(), pq = p.c.p2c ? f32(m.pq, p.table) : Tensor();
  const Tensor mask(m.mask.data(), Shape{p.c.batch, p.c.length}, DType::i64);
  const Tensor dpk = p.c.c2p ? f32(r.dpk, p.table) : Tensor(), dpq = p.c.p2c ? f32(r.dpq, p.table) : Tensor();
  if (flash) {
    std::vector<float> stats(static_cast<size_t>(p.stats_shape.numel()));
    flash_disentangled_attention_forward(f32(m.q, p.features), f32(m.k, p.features), f32(m.v, p.features), pk,
                                         pq, mask, p.config, f32(r.context, p.features),
                                         f32(stats, p.stats_shape));
    flash_disentangled_attention_backward(f32(m.q, p.features), f32(m.k, p.features), f32(m.v, p.features),
                                          pk, pq, mask, f32(r.context, p.features), f32(stats, p.stats_shape),
                                          f32(m.dc, p.features), p.config, f32(r.dq, p.features),
                                          f32(r.dk, p.features), f32(r.dv, p.features), dpk, dpq);
    return r;
  }
  std::vector<float> probs(static_cast<size_t>(p.probs_shape.numel()));
  disentangled_attention_forward(f32(m.q, p.features), f32(m.k, p.features), f32(m.v, p.features), pk, pq,
                                 mask, p.config, f32(r.context, p.features), f32(probs, p.probs_shape));
  disentangled_attention_backward(f32(m.q, p.features), f32(m.k, p.features), f32(m.v, p.features), pk, pq,
                                  mask, f32(probs, p.probs_shape), f32(m.dc, p.features), p.config,
                                  f32(r.dq, p.features), f32(r.dk, p.features), f32(r.dv, p.features), dpk,
                                  dpq);
  return r;
}

::testing::AssertionResult gradients_close(const Problem& p, const GpuRun& got, const Reference& ref,
                                           const test::Tolerance& tol) {
  std::vector<std::string> failures;
  auto check = [&](const char* what, const Tensor& t, const std::vector<float>& want) {
    const ::testing::AssertionResult r = all_close(what, to_host(t), want, tol);
    if (!r) failures.push_back(r.message());
  };
  check("context", got.context.tensor, ref.context);
  check("dv", got.dv.tensor, ref.dv);
  check("dq", got.dq.tensor, ref.dq);
  check("dk", got.dk.tensor, ref.dk);
  if (p.c.c2p) check("dpos_key", got.dpk.tensor, ref.dpk);
  if (p.c.p2c) check("dpos_query", got.dpq.tensor, ref.dpq);
  if (failures.empty()) return ::testing::AssertionSuccess();
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (const std::string& f : failures) r << f << "\n";
  return r;
}

// A GPU run's outputs on the host, as a reference for another run.
Reference outputs_of(const GpuRun& run) {
  return {.context = to_host(run.context.tensor),
          .dq = to_host(run.dq.tensor),
          .dk = to_host(run.dk.tensor),
          .dv = to_host(run.dv.tensor),
          .dpk = to_host(run.dpk.tensor),
          .dpq = to_host(run.dpq.tensor)};
}

// Two runs' outputs, bit for bit.
void expect_same_bits(const GpuRun& a, const GpuRun& b) {
  for (auto [x, y, what] : {std::tuple{&a.context, &b.context, "context"},
                            {&a.dq, &b.dq, "dq"},
                            {&a.dk, &b.dk, "dk"},
                            {&a.dv, &b.dv, "dv"},
                            {&a.dpk, &b.dpk, "dpos_key"},
                            {&a.dpq, &b.dpq, "dpos_query"},
                            {&a.stats, &b.stats, "stats"}}) {
    EXPECT_EQ(to_host(x->tensor), to_host(y->tensor)) << what;
  }
}

class FlashAttentionGpu : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionGpu, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  GpuRun run(p);
  run.flash(p, /*backward=*/true);
  EXPECT_TRUE(gradients_close(p, run, cpu_reference(p, /*flash=*/false), test::tolerance_for(p.c.dtype)));
}

TEST_P(FlashAttentionGpu, MatchesStoredGpuPath) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  if (p.c.length > kStoredAttentionMaxLength) GTEST_SKIP() << "past the stored path's length";
  GpuRun flash(p), stored(p);
  flash.flash(p, true);
  stored.stored(p);
  const Reference want = outputs_of(stored);
  EXPECT_TRUE(gradients_close(p, flash, want, test::tolerance_for(p.c.dtype)));
}

TEST_P(FlashAttentionGpu, DeterministicRunToRun) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  GpuRun a(p), b(p);
  a.flash(p, true);
  b.flash(p, true);
  expect_same_bits(a, b);
}

// The backward's two orders of the dQ / Gc additions (the rotated one where a head's CTAs fit, the default;
// kernels/cuda/flash_disentangled_attention.cuh): the same gradients within the dtype's tolerance (the sums'
// order differs), the same forward bit for bit, each deterministic run to run.
class AscendingOrderScope {
 public:
  AscendingOrderScope() : saved_(gpu::flash_backward_order()) {
    gpu::set_flash_backward_order(gpu::FlashBackwardOrder::ascending);
  }
  ~AscendingOrderScope() { gpu::set_flash_backward_order(saved_); }
  AscendingOrderScope(const AscendingOrderScope&) = delete;
  AscendingOrderScope& operator=(const AscendingOrderScope&) = delete;

 private:
  gpu::FlashBackwardOrder saved_;
};

TEST_P(FlashAttentionGpu, RotatedOrderMatchesAscendingOrder) {
  ZT_SKIP_WITHOUT_GPU();
  const Problem p(GetParam());
  GpuRun ascending(p), rotated(p), rotated_again(p);
  {
    const AscendingOrderScope scope;
    ascending.flash(p, true);
  }
  rotated.flash(p, true);
  rotated_again.flash(p, true);
  const Reference want = outputs_of(ascending);
  EXPECT_TRUE(gradients_close(p, rotated, want, test::tolerance_for(p.c.dtype)));
  EXPECT_EQ(to_host(rotated.context.tensor), want.context);
  expect_same_bits(rotated, rotated_again);
}

// The rotation's waits reach later tickets: only when a head's tiles fit in the resident CTAs, shared by the
// ranks on the device (none counted as one).
TEST(FlashAttentionBackwardOrder, RotatedOnlyWhereAHeadsCtasFitBesideTheOtherRanks) {
  EXPECT_TRUE(gpu::flash_backward_rotated_order(128, 396, 0));
  EXPECT_TRUE(gpu::flash_backward_rotated_order(128, 396, 3));
  EXPECT_FALSE(gpu::flash_backward_rotated_order(128, 396, 4));
  EXPECT_FALSE(gpu::flash_backward_rotated_order(397, 396, 1));
  EXPECT_TRUE(gpu::flash_backward_rotated_order(396, 396, 1));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionGpu,
    ::testing::Values(
        Case{"bf16_L1_both_dropout", DType::bf16, 2, 1, 2, 64, test::xlarge_buckets(), true, true, 0.1f},
        Case{"bf16_L7_both_dropout", DType::bf16, 2, 7, 3, 64, test::tiny_buckets(), true, true, 0.1f},
        Case{"f16_L7_c2p_only", DType::f16, 2, 7, 3, 64, test::tiny_buckets(), true, false, 0.0f},
        Case{"bf16_L64_p2c_only_unbucketed", DType::bf16, 2, 64, 2, 64, test::unbucketed(), false, true,
             0.0f},
        Case{"bf16_L65_content_only_dropout", DType::bf16, 2, 65, 2, 64, test::xlarge_buckets(), false, false,
             0.1f},
        Case{"bf16_L128_xlarge_dropout", DType::bf16, 2, 128, 3, 64, test::xlarge_buckets(), true, true,
             0.1f},
        Case{"f16_L128_xlarge", DType::f16, 2, 128, 3, 64, test::xlarge_buckets(), true, true, 0.0f},
        Case{"bf16_L137_clamped_dropout", DType::bf16, 2, 137, 2, 64, test::clamped_buckets(), true, true,
             0.1f},
        Case{"bf16_L300_xlarge_buckets_dropout", DType::bf16, 1, 300, 2, 64, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"bf16_L150_steep_buckets_gathered", DType::bf16, 2, 150, 2, 64, steep_buckets(), true, true,
             0.1f},
        Case{"f16_L600_xlarge_buckets", DType::f16, 1, 600, 2, 64, test::xlarge_buckets(), true, true, 0.0f},
        // Past the stored path's limit and past the buckets' saturation (|i - j| > 511): whole tiles of one
        // bucket; checked against the CPU stored path still (one head).
        Case{"bf16_L1100_xlarge_dropout", DType::bf16, 1, 1100, 1, 64, test::xlarge_buckets(), true, true,
             0.1f}),
    [](const auto& info) { return info.param.name; });

// Every entry of P~ through V = identity (L <= 64): 0 exactly where the host's Philox drops it, non-zero
// where it keeps it (P > 0 there: every pair but a real query's padded keys).
TEST(FlashAttentionDropoutGpu, KeepsTheHostsEntries) {
  ZT_SKIP_WITHOUT_GPU();
  for (const int64_t L : {7, 36, 64}) {  // odd; a multiple of 4 whose rows start mid-block; of 8
    const Case c{"keep", DType::bf16, 2, L, 2, 64, test::tiny_buckets(), true, true, 0.3f};
    const Problem p(c, /*identity_v=*/true);
    GpuRun run(p);
    run.flash(p, false);
    const std::vector<float> context = to_host(run.context.tensor);
    const int64_t B = c.batch, N = c.heads, d = c.head_size, D = N * d;
    int64_t wrong = 0, dropped = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < L; ++j) {
            const bool real_query = p.mask[static_cast<size_t>(b * L + i)] != 0;
            if (real_query && p.mask[static_cast<size_t>(b * L + j)] == 0) continue;  // P = 0 there
            const uint64_t e = static_cast<uint64_t>((b * N + h) * L + i) * attention_row_pitch(L) +
                               static_cast<uint64_t>(j);
            const bool keep = attention_keep(p.config.seed, p.config.site_id, e,
                                             attention_keep_threshold(p.config.dropout_p));
            dropped += keep ? 0 : 1;
            const float got = context[static_cast<size_t>((b * L + i) * D + h * d + j)];
            wrong += keep ? (got == 0.0f) : (got != 0.0f);
          }
    EXPECT_GT(dropped, 0) << "L " << L;
    EXPECT_EQ(wrong, 0) << "L " << L;
  }
}

// Long sequences against the CPU flash path (no [L, L] on either side): L 2100 with dropout, padding, both
// terms and xlarge's buckets, one batch row and one head so the CPU side stays quick.
TEST(FlashAttentionLongGpu, L2100MatchesCpuFlashPath) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c{"long", DType::bf16, 1, 2100, 1, 64, test::xlarge_buckets(), true, true, 0.1f};
  const Problem p(c);
  GpuRun run(p);
  run.flash(p, true);
  EXPECT_TRUE(gradients_close(p, run, cpu_reference(p, /*flash=*/true), test::tolerance_for(c.dtype)));
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
