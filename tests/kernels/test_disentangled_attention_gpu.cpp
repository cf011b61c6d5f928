// Disentangled attention forward/backward on CUDA tensors against the CPU reference
// (kernels/cpu/disentangled_attention.cpp): f32 storage with the f32 tolerance, bf16/f16 storage with
// theirs, on the inputs rounded to the storage dtype. The GPU saves probs in the storage dtype (the CPU
// reference in f32), so they are compared with the reference's probs rounded to it; the GPU backward reads
// those rounded probs, which moves G by one more rounding of P (2^-9 relative in bf16, 2^-12 in f16), the
// same size as the rounding of G to 16 bits it already had, inside the per-dtype tolerance. Dropout cases
// check that the GPU draws the CPU's keep mask (a different mask would move context and every gradient by
// O(1)).
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <exception>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/cuda/relative_position.cuh"
#include "kernels/disentangled_attention.h"
#include "tests/kernels/attention_gpu_cases.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/support/finite_difference.h"
#include "tests/support/gpu.h"
#include "tests/support/scoped_env.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;
using test::round_to;
using test::to_device;
using test::to_host;

// tiny_buckets at L = 11 runs into the log buckets; clamped_buckets at L = 137 > 64 clamps the outer
// diagonals.
using Case = test::AttentionCase;

class DisentangledAttentionGpu : public ::testing::TestWithParam<Case> {};

void check_against_cpu_reference(const Case& c) {
  const int64_t B = c.batch, L = c.length, N = c.heads, D = c.heads * c.head_size;
  const int64_t rows = 2 * c.positions.att_span();
  const DisentangledAttentionConfig config = test::attention_config(c, 7);

  const Shape features{B, L, D}, table{rows, D}, probs_shape{B, N, L, L};
  const int64_t n = features.numel(), nt = table.numel(), np = probs_shape.numel();
  std::vector<float> q = round_to(test::random_uniform(n, 41), c.dtype);
  std::vector<float> k = round_to(test::random_uniform(n, 42), c.dtype);
  std::vector<float> v = round_to(test::random_uniform(n, 43), c.dtype);
  std::vector<float> pk = round_to(test::random_uniform(nt, 44), c.dtype);
  std::vector<float> pq = round_to(test::random_uniform(nt, 45), c.dtype);
  std::vector<float> dc = round_to(test::random_uniform(n, 46), c.dtype);
  std::vector<float> dpk_initial = test::random_uniform(nt, 47), dpq_initial = test::random_uniform(nt, 48);
  // Batch item 0 is all real tokens; the last item has its final three positions padded.
  std::vector<int64_t> mask(B * L, 1);
  for (int64_t t = L - 3; t < L; ++t) mask[(B - 1) * L + t] = 0;

  // CPU reference.
  std::vector<float> context_ref(n), probs_ref(np), dq_ref(n), dk_ref(n), dv_ref(n);
  std::vector<float> dpk_ref = dpk_initial, dpq_ref = dpq_initial;
  const auto f32 = [](std::vector<float>& x, Shape s) { return Tensor(x.data(), s, DType::f32); };
  Tensor mask_cpu(mask.data(), Shape{B, L}, DType::i64);
  Tensor pk_cpu = c.c2p ? f32(pk, table) : Tensor(), pq_cpu = c.p2c ? f32(pq, table) : Tensor();
  disentangled_attention_forward(f32(q, features), f32(k, features), f32(v, features), pk_cpu, pq_cpu,
                                 mask_cpu, config, f32(context_ref, features), f32(probs_ref, probs_shape));
  disentangled_attention_backward(
      f32(q, features), f32(k, features), f32(v, features), pk_cpu, pq_cpu, mask_cpu,
      f32(probs_ref, probs_shape), f32(dc, features), config, f32(dq_ref, features), f32(dk_ref, features),
      f32(dv_ref, features), c.c2p ? f32(dpk_ref, table) : Tensor(), c.p2c ? f32(dpq_ref, table) : Tensor());

  // GPU: the storage dtype for activations and probs, f32 for the table gradients.
  auto gq = to_device(q, features, c.dtype), gk = to_device(k, features, c.dtype);
  auto gv = to_device(v, features, c.dtype), gdc = to_device(dc, features, c.dtype);
  auto gpk = to_device(pk, table, c.dtype), gpq = to_device(pq, table, c.dtype);
  auto gmask = test::to_device_i64(mask, Shape{B, L});
  auto gcontext = to_device(std::vector<float>(n, 9.0f), features, c.dtype);
  auto gprobs = to_device(std::vector<float>(np, 9.0f), probs_shape, c.dtype);
  auto gdq = to_device(std::vector<float>(n, 9.0f), features, c.dtype);
  auto gdk = to_device(std::vector<float>(n, 9.0f), features, c.dtype);
  auto gdv = to_device(std::vector<float>(n, 9.0f), features, c.dtype);
  auto gdpk = to_device(dpk_initial, table, DType::f32), gdpq = to_device(dpq_initial, table, DType::f32);
  Tensor pk_gpu = c.c2p ? gpk.tensor : Tensor(), pq_gpu = c.p2c ? gpq.tensor : Tensor();
  // 16-bit heads of 64 at L <= 128 run the one-kernel forward; everything else the GEMMs and softmax kernel.
  EXPECT_EQ(gpu::short_attention_forward_applies(gq.tensor, gk.tensor, gv.tensor, pk_gpu, pq_gpu,
                                                 gmask.tensor, config, gcontext.tensor, gprobs.tensor),
            c.dtype != DType::f32 && c.head_size == 64 && c.length <= 128);
  disentangled_attention_forward(gq.tensor, gk.tensor, gv.tensor, pk_gpu, pq_gpu, gmask.tensor, config,
                                 gcontext.tensor, gprobs.tensor);
  disentangled_attention_backward(gq.tensor, gk.tensor, gv.tensor, pk_gpu, pq_gpu, gmask.tensor,
                                  gprobs.tensor, gdc.tensor, config, gdq.tensor, gdk.tensor, gdv.tensor,
                                  c.c2p ? gdpk.tensor : Tensor(), c.p2c ? gdpq.tensor : Tensor());

  const test::Tolerance tol = test::tolerance_for(c.dtype);
  EXPECT_TRUE(all_close("probs", to_host(gprobs.tensor), round_to(probs_ref, c.dtype), tol));
  EXPECT_TRUE(all_close("context", to_host(gcontext.tensor), context_ref, tol));
  EXPECT_TRUE(all_close("dv", to_host(gdv.tensor), dv_ref, tol));
  EXPECT_TRUE(all_close("dq", to_host(gdq.tensor), dq_ref, tol));
  EXPECT_TRUE(all_close("dk", to_host(gdk.tensor), dk_ref, tol));
  if (c.c2p) {
    EXPECT_TRUE(all_close("dpos_key", to_host(gdpk.tensor), dpk_ref, tol));
  }
  if (c.p2c) {
    EXPECT_TRUE(all_close("dpos_query", to_host(gdpq.tensor), dpq_ref, tol));
  }
}

TEST_P(DisentangledAttentionGpu, MatchesCpuReference) {
  ZT_SKIP_WITHOUT_GPU();
  check_against_cpu_reference(GetParam());
}

// The short backward's unrun candidates (kernels/cuda/flash_disentangled_attention.cuh,
// FlashAttentionParams): its own dV / dQ / dK, the gathers as bands, each alone and both, against the same
// reference (shapes where they do not apply take the default path).
TEST_P(DisentangledAttentionGpu, MatchesCpuReferenceWithTheShortBackwardCandidates) {
  ZT_SKIP_WITHOUT_GPU();
  for (const auto& [products, bands] : {std::pair{"1", "0"}, std::pair{"0", "1"}, std::pair{"1", "1"}}) {
    SCOPED_TRACE(std::string("ZT_SHORT_BACKWARD_PRODUCTS=") + products + " ZT_GATHER_BANDS=" + bands);
    const test::ScopedEnv take_products("ZT_SHORT_BACKWARD_PRODUCTS", products);
    const test::ScopedEnv take_bands("ZT_GATHER_BANDS", bands);
    check_against_cpu_reference(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DisentangledAttentionGpu,
    ::testing::Values(
        Case{"f32_L11_both", DType::f32, 2, 11, 3, 5, test::tiny_buckets(), true, true, 0.0f},
        Case{"bf16_L11_both", DType::bf16, 2, 11, 3, 5, test::tiny_buckets(), true, true, 0.0f},
        Case{"f16_L11_both", DType::f16, 2, 11, 3, 5, test::tiny_buckets(), true, true, 0.0f},
        Case{"f32_L11_both_dropout", DType::f32, 2, 11, 3, 5, test::tiny_buckets(), true, true, 0.1f},
        Case{"bf16_L11_both_dropout", DType::bf16, 2, 11, 3, 5, test::tiny_buckets(), true, true, 0.1f},
        Case{"f32_L11_c2p_only", DType::f32, 2, 11, 3, 5, test::tiny_buckets(), true, false, 0.0f},
        Case{"f32_L11_p2c_only_unbucketed", DType::f32, 2, 11, 3, 5, test::unbucketed(), false, true, 0.0f},
        Case{"f32_L11_content_only", DType::f32, 2, 11, 3, 5, test::tiny_buckets(), false, false, 0.0f},
        Case{"f32_L137_clamped_dropout", DType::f32, 2, 137, 3, 5, test::clamped_buckets(), true, true, 0.1f},
        Case{"bf16_L137_clamped_dropout", DType::bf16, 2, 137, 3, 5, test::clamped_buckets(), true, true,
             0.1f},
        Case{"f16_L137_clamped", DType::f16, 3, 137, 3, 5, test::clamped_buckets(), true, true, 0.0f},
        // B*L >= 512: the table gradients take the k-split path (2 and 3 slices).
        Case{"f32_B4_L137_split_k", DType::f32, 4, 137, 3, 5, test::clamped_buckets(), true, true, 0.0f},
        Case{"bf16_B6_L128_split_k_dropout", DType::bf16, 6, 128, 4, 16, test::clamped_buckets(), true, true,
             0.1f},
        // L 128 with xlarge's buckets: every bucket one distance (the bucket gathers' one-term path).
        Case{"bf16_B3_L128_xlarge_buckets_dropout", DType::bf16, 3, 128, 4, 16, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"f32_B3_L128_xlarge_buckets", DType::f32, 3, 128, 4, 16, test::xlarge_buckets(), true, true,
             0.0f},
        Case{"bf16_L137_24heads_d64_dropout", DType::bf16, 2, 137, 24, 64, test::xlarge_buckets(), true, true,
             0.1f},
        Case{"f32_L137_24heads_d64", DType::f32, 2, 137, 24, 64, test::xlarge_buckets(), true, true, 0.0f},
        // Score rows of 3 and 5 register chunks (L > 256, > 512); past the bucket midpoint, so the bucket
        // gathers sum several diagonals; [L, L] blocks too large for the shared-memory gather.
        Case{"bf16_L300_xlarge_buckets_dropout", DType::bf16, 1, 300, 2, 8, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"f32_L600_xlarge_buckets", DType::f32, 1, 600, 2, 8, test::xlarge_buckets(), true, true, 0.0f},
        // The tile bucket gathers at MRPC's longer length (32 lines a CTA, 4-wide row accesses in the softmax
        // kernels) and at an odd length (the staged lines' pitch L + 2; scalar row accesses).
        Case{"bf16_B2_L512_xlarge_buckets_dropout", DType::bf16, 2, 512, 2, 8, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"f16_L257_xlarge_buckets_dropout", DType::f16, 1, 257, 2, 8, test::xlarge_buckets(), true, true,
             0.1f},
        // The one-kernel forward (heads of 64, L <= 128): two key tiles, one, a partial one, an odd L (P
        // stored a key at a time), each positional term alone, none, clamped and log buckets.
        Case{"bf16_B2_L128_d64_xlarge_buckets_dropout", DType::bf16, 2, 128, 3, 64, test::xlarge_buckets(),
             true, true, 0.1f},
        Case{"f16_B2_L100_d64_clamped", DType::f16, 2, 100, 2, 64, test::clamped_buckets(), true, true, 0.0f},
        Case{"bf16_L37_d64_tiny_buckets_dropout", DType::bf16, 2, 37, 2, 64, test::tiny_buckets(), true, true,
             0.1f},
        Case{"bf16_L64_d64_c2p_only", DType::bf16, 2, 64, 2, 64, test::xlarge_buckets(), true, false, 0.0f},
        Case{"f16_L77_d64_p2c_only_unbucketed_dropout", DType::f16, 2, 77, 2, 64, test::unbucketed(), false,
             true, 0.1f},
        Case{"bf16_L128_d64_content_only", DType::bf16, 2, 128, 2, 64, test::xlarge_buckets(), false, false,
             0.0f},
        // xlarge's buckets with a partial key tile in f16; p2c alone.
        Case{"f16_B5_L100_d64_xlarge_buckets_dropout", DType::f16, 5, 100, 2, 64, test::xlarge_buckets(),
             true, true, 0.1f},
        Case{"bf16_B3_L128_d64_p2c_only_xlarge", DType::bf16, 3, 128, 2, 64, test::xlarge_buckets(), false,
             true, 0.0f},
        // The one-kernel backward (L a multiple of 8): one key tile and a partial second one with one
        // distance a bucket (its own gathers) in f16; buckets of several distances (G in f32 for the gather
        // kernels) with dropout, clamped and log.
        Case{"f16_B2_L120_d64_xlarge_buckets", DType::f16, 2, 120, 2, 64, test::xlarge_buckets(), true, true,
             0.0f},
        Case{"f16_B2_L40_d64_xlarge_buckets_dropout", DType::f16, 2, 40, 3, 64, test::xlarge_buckets(), true,
             true, 0.1f},
        Case{"bf16_B2_L96_d64_clamped_dropout", DType::bf16, 2, 96, 2, 64, test::clamped_buckets(), true,
             true, 0.1f},
        Case{"f16_L64_d64_tiny_buckets_dropout", DType::f16, 1, 64, 2, 64, test::tiny_buckets(), true, true,
             0.1f},
        // The positional gradients' one kernel (attention_positional.cu: 16-bit heads of 64, window pitch
        // <= 256, B*L in > 1 slices of whole 64-row tiles): 2 slices of 256 rows with the 256-row window
        // (W = 255), 3 slices of 256 at a 128-row window (zero Gx columns from 128 on), 2 of 256 at the
        // 32-row window of the clamped buckets; beside them the GEMMs where the slices are not whole tiles
        // (B*L = 600: 2 slices of 300 rows).
        Case{"bf16_B4_L128_d64_positional_kernel_dropout", DType::bf16, 4, 128, 2, 64, test::xlarge_buckets(),
             true, true, 0.1f},
        Case{"f16_B12_L64_d64_positional_kernel", DType::f16, 12, 64, 2, 64, test::xlarge_buckets(), true,
             true, 0.0f},
        Case{"bf16_B4_L128_d64_positional_kernel_clamped_c2p_only", DType::bf16, 4, 128, 2, 64,
             test::clamped_buckets(), true, false, 0.0f},
        Case{"bf16_B6_L100_d64_positional_gemms", DType::bf16, 6, 100, 2, 64, test::xlarge_buckets(), true,
             true, 0.0f},
        // The short backward's gathers as bands for that kernel (one distance a window row) where a 64-row
        // tile holds parts of two sequences: L 40 (5 slices of 256 rows) and L 120 (15 slices, W8 = 240).
        Case{"bf16_B32_L40_d64_positional_bands_dropout", DType::bf16, 32, 40, 2, 64, test::xlarge_buckets(),
             true, true, 0.1f},
        Case{"f16_B32_L120_d64_positional_bands", DType::f16, 32, 120, 2, 64, test::xlarge_buckets(), true,
             true, 0.0f}),
    [](const auto& info) { return info.param.name; });

// The backward's bucket gathers take their one-term path exactly where every bucket of the window holds one
// relative distance: inside the linear range of the log buckets (|i - j| < 128 for xlarge's 256 buckets),
// not past it, nor with 16 buckets at L = 128.
TEST(RelativeIndexTablesGpu, OneDistancePerBucketOnlyInsideTheLinearRange) {
  ZT_SKIP_WITHOUT_GPU();
  const auto one_distance = [](const RelativePositionConfig& config, int64_t L) {
    return gpu::relative_index_tables(config, L, nullptr).one_distance_per_bucket;
  };
  EXPECT_TRUE(one_distance(test::xlarge_buckets(), 128));
  EXPECT_TRUE(one_distance(test::xlarge_buckets(), 11));
  EXPECT_FALSE(one_distance(test::xlarge_buckets(), 137));
  EXPECT_FALSE(one_distance(test::clamped_buckets(), 128));
}

// One head of width 4 over a [1, L] batch, every input 0.5, for the argument checks below: q = k = v, one
// table for both terms, `out` [1, L, 4] for context or the feature gradients, probs [1, 1, L, L] in
// probs_dtype.
struct SmallCall {
  DisentangledAttentionConfig config;
  test::DeviceTensor x, pos, mask, out, dpos, probs;
  SmallCall(int64_t L, DType dtype, DType probs_dtype, RelativePositionConfig positions) {
    constexpr int64_t D = 4;
    config.num_heads = 1;
    config.positions = positions;
    const Shape features{1, L, D}, table{2 * positions.att_span(), D};
    x = to_device(std::vector<float>(features.numel(), 0.5f), features, dtype);
    pos = to_device(std::vector<float>(table.numel(), 0.5f), table, dtype);
    mask = test::to_device_i64(std::vector<int64_t>(L, 1), Shape{1, L});
    out = to_device(std::vector<float>(features.numel(), 0.0f), features, dtype);
    dpos = to_device(std::vector<float>(table.numel(), 0.0f), table, DType::f32);
    probs = to_device(std::vector<float>(L * L, 0.0f), Shape{1, 1, L, L}, probs_dtype);
  }
  void forward() const {
    disentangled_attention_forward(x.tensor, x.tensor, x.tensor, pos.tensor, pos.tensor, mask.tensor, config,
                                   out.tensor, probs.tensor);
  }
  void backward() const {
    disentangled_attention_backward(x.tensor, x.tensor, x.tensor, pos.tensor, pos.tensor, mask.tensor,
                                    probs.tensor, out.tensor, config, out.tensor, out.tensor, out.tensor,
                                    dpos.tensor, dpos.tensor);
  }
};

// The softmax kernels hold a score row in registers: lengths past 1024 are refused with a clear error.
TEST(DisentangledAttentionGpuLimits, RejectsSequencesLongerThan1024) {
  ZT_SKIP_WITHOUT_GPU();
  const SmallCall call(1025, DType::f32, DType::f32, test::xlarge_buckets());
  try {
    call.forward();
    FAIL() << "expected an error for L = 1025";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 1025"), std::string::npos) << e.what();
  }
}

// probs are stored in the storage dtype of q, k, v on the GPU: an f32 probs beside bf16 inputs (the layout
// before the 16-bit probs) is refused by forward and backward with an error naming probs and the dtype.
TEST(DisentangledAttentionGpuLimits, RejectsProbsNotInTheStorageDtype) {
  ZT_SKIP_WITHOUT_GPU();
  const SmallCall call(8, DType::bf16, DType::f32, test::tiny_buckets());
  const auto expect_probs_error = [](const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("probs must be bf16"), std::string::npos) << what;
  };
  try {
    call.forward();
    ADD_FAILURE() << "forward accepted f32 probs beside bf16 q, k, v";
  } catch (const std::exception& e) {
    expect_probs_error(e);
  }
  try {
    call.backward();
    ADD_FAILURE() << "backward accepted f32 probs beside bf16 q, k, v";
  } catch (const std::exception& e) {
    expect_probs_error(e);
  }
}

}  // namespace
}  // namespace zt::kernels

#else
// A build without nvcc has no CUDA kernels to test.
TEST(DisentangledAttentionGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
