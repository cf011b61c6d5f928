// Fused multi-tensor AdamW on the GPU against the CPU AdamW over 5 steps (bit-identical: the same
// per-element operations in the same order, no FMA contraction on either side), with decaying and
// non-decaying ranges, gaps that must stay untouched, more ranges than one launch takes, misaligned buffers,
// and the bf16/f16 copy equal to the host rounding of the f32 master. Also the GPU gradient statistics
// (sum of squares, non-finite count) against the CPU's.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "optim/adamw.h"
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#include "optim/grad_clip.h"
#include "runtime/cuda_check.h"
#include "tests/kernels/test_gpu_support.h"

namespace zt::optim {
namespace {

using test::DeviceArray;
using test::random_floats;

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Largest distance in units in the last place between two float arrays (sign-magnitude order).
int64_t max_ulp_distance(const std::vector<float>& a, const std::vector<float>& b) {
  auto ordered = [](float x) {
    const int64_t u = bits_of(x);
    return u & 0x80000000 ? -(u & 0x7FFFFFFF) : u;
  };
  int64_t worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(ordered(a[i]) - ordered(b[i])));
  return worst;
}

// 150 ranges (two launches of at most 96) of awkward sizes, some empty, with a gap of 3 untouched elements
// after each.
std::vector<TensorRange> awkward_ranges(int64_t& total) {
  std::vector<TensorRange> ranges;
  int64_t offset = 0;
  const int64_t sizes[] = {1, 7, 1000, 4097, 33, 128, 8193, 2};
  for (int i = 0; i < 150; ++i) {
    const int64_t n = i % 10 == 9 ? 0 : sizes[i % 8] + (i / 8);  // some empty ranges
    ranges.push_back({offset, n, i % 3 != 0});
    offset += n + 3;
  }
  total = offset;
  return ranges;
}

struct AdamWGpuCase {
  int64_t offset;  // element offset of every device buffer (1: the scalar path)
  DType params16;  // bf16, f16, or i32 for "no 16-bit copy"
  double beta1;    // 0.9 (lerp's small-weight form) or 0.3 (the other form)
};

class AdamWGpu : public ::testing::TestWithParam<AdamWGpuCase> {};

TEST_P(AdamWGpu, FiveStepsMatchCpuBitwise) {
  ZT_SKIP_WITHOUT_GPU();
  const AdamWGpuCase c = GetParam();
  int64_t size = 0;
  const std::vector<TensorRange> ranges = awkward_ranges(size);
  const AdamWHyper hyper{1e-3, c.beta1, 0.999, 1e-8, 0.01};
  AdamW cpu(hyper, 1);
  std::vector<float> params = random_floats(size, 51), m(static_cast<size_t>(size)),
                     v(static_cast<size_t>(size));
  DeviceArray gp(DType::f32, Shape{size}, c.offset), gg(DType::f32, Shape{size}, c.offset);
  DeviceArray gm(DType::f32, Shape{size}, c.offset), gv(DType::f32, Shape{size}, c.offset);
  const bool with_copy = c.params16 != DType::i32;
  DeviceArray g16(with_copy ? c.params16 : DType::bf16, Shape{size}, c.offset);
  gp.upload(params);
  gm.upload(m);
  gv.upload(v);
  std::vector<uint16_t> copy16(static_cast<size_t>(size), 0x1234);  // sentinel outside the ranges
  g16.upload_raw(copy16);
  for (int step = 1; step <= 5; ++step) {
    const double lr = 1e-3 * step;  // a schedule: the scalars change every step
    std::vector<float> grads = random_floats(size, 100 + static_cast<uint32_t>(step), -0.1f, 0.1f);
    cpu.step({params, grads, m, v}, ranges, lr);
    gg.upload(grads);
    gpu::adamw_update(adamw_step_scalars(hyper, lr, step), gp.tensor(), gg.tensor(), gm.tensor(), gv.tensor(),
                      ranges, with_copy ? g16.tensor() : Tensor(), nullptr);
  }
  const std::vector<float> p_gpu = gp.download(), m_gpu = gm.download(), v_gpu = gv.download();
  EXPECT_EQ(max_ulp_distance(p_gpu, params), 0);
  EXPECT_EQ(max_ulp_distance(m_gpu, m), 0);
  EXPECT_EQ(max_ulp_distance(v_gpu, v), 0);
  if (with_copy) {
    const std::vector<uint16_t> got = g16.download_raw<uint16_t>();
    std::vector<bool> in_range(static_cast<size_t>(size), false);
    for (const TensorRange& r : ranges) {
      for (int64_t i = r.offset; i < r.offset + r.numel; ++i) in_range[static_cast<size_t>(i)] = true;
    }
    int64_t mismatches = 0;
    for (int64_t i = 0; i < size; ++i) {
      const size_t k = static_cast<size_t>(i);
      const uint16_t want = !in_range[k]                ? uint16_t{0x1234}
                            : c.params16 == DType::bf16 ? float_to_bf16(params[k]).bits
                                                        : float_to_f16(params[k]).bits;
      mismatches += got[k] != want;
    }
    EXPECT_EQ(mismatches, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, AdamWGpu,
                         ::testing::Values(AdamWGpuCase{0, DType::bf16, 0.9},
                                           AdamWGpuCase{1, DType::bf16, 0.9},
                                           AdamWGpuCase{0, DType::f16, 0.9}, AdamWGpuCase{0, DType::i32, 0.3},
                                           AdamWGpuCase{1, DType::i32, 0.3}),
                         [](const auto& info) {
                           const AdamWGpuCase& c = info.param;
                           return std::string(c.offset ? "misaligned_" : "aligned_") +
                                  (c.params16 == DType::i32 ? "nocopy"
                                                            : std::string(dtype_name(c.params16))) +
                                  (c.beta1 < 0.5 ? "_largelerpweight" : "");
                         });

// The fused forms the trainer uses: grad_scale (unscale x clip) must give bitwise what scaling the gradients
// first (grad_clip.h's scale_in_place) and then stepping gives, and zero_grads must zero exactly the
// gradients inside the ranges, leaving the gaps as they were.
TEST(AdamWGpuFused, GradScaleAndZeroingMatchScaleThenStep) {
  ZT_SKIP_WITHOUT_GPU();
  int64_t size = 0;
  const std::vector<TensorRange> ranges = awkward_ranges(size);
  const AdamWHyper hyper{1e-3, 0.9, 0.999, 1e-8, 0.01};
  AdamW cpu(hyper, 1);
  std::vector<float> params = random_floats(size, 61), m(static_cast<size_t>(size)), v(m.size());
  DeviceArray gp(DType::f32, Shape{size}), gg(DType::f32, Shape{size});
  DeviceArray gm(DType::f32, Shape{size}), gv(DType::f32, Shape{size});
  gp.upload(params);
  gm.upload(m);
  gv.upload(v);
  const float factor = 0.37f;
  for (int step = 1; step <= 3; ++step) {
    const std::vector<float> grads = random_floats(size, 200 + static_cast<uint32_t>(step), -0.1f, 0.1f);
    std::vector<float> scaled = grads;
    scale_in_place(scaled, factor, 1);
    cpu.step({params, scaled, m, v}, ranges, 1e-3);
    gg.upload(grads);
    gpu::adamw_update(adamw_step_scalars(hyper, 1e-3, step), gp.tensor(), gg.tensor(), gm.tensor(),
                      gv.tensor(), ranges, Tensor(), nullptr, factor, /*zero_grads=*/true);
    const std::vector<float> after = gg.download();
    std::vector<float> want = grads;
    for (const TensorRange& r : ranges) std::fill_n(want.begin() + r.offset, r.numel, 0.0f);
    EXPECT_EQ(after, want) << "step " << step;
  }
  EXPECT_EQ(max_ulp_distance(gp.download(), params), 0);
  EXPECT_EQ(max_ulp_distance(gm.download(), m), 0);
  EXPECT_EQ(max_ulp_distance(gv.download(), v), 0);
}

TEST(AdamWGpuChecks, RejectsOverlappingRangesAndWrongBuffers) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceArray p(DType::f32, Shape{64}), g(DType::f32, Shape{64}), m(DType::f32, Shape{64}),
      v(DType::f32, Shape{32});
  const AdamWStepScalars s = adamw_step_scalars({}, 1e-3, 1);
  const std::vector<TensorRange> overlapping = {{0, 10, true}, {5, 10, true}};
  EXPECT_THROW(
      gpu::adamw_update(s, p.tensor(), g.tensor(), m.tensor(), m.tensor(), overlapping, Tensor(), nullptr),
      Error);
  const std::vector<TensorRange> one = {{0, 10, true}};
  EXPECT_THROW(gpu::adamw_update(s, p.tensor(), g.tensor(), m.tensor(), v.tensor(), one, Tensor(), nullptr),
               Error);
}

class GradStatsGpu : public ::testing::TestWithParam<int64_t> {};

TEST_P(GradStatsGpu, SumOfSquaresMatchesCpuAndIsDeterministic) {
  ZT_SKIP_WITHOUT_GPU();
  const int64_t n = GetParam();
  const std::vector<float> g = random_floats(n, 61, -3.0f, 3.0f);
  DeviceArray gg(DType::f32, Shape{n}, n % 2);
  gg.upload(g);
  const gpu::GradStats first = gpu::grad_stats(gg.tensor(), nullptr);
  const gpu::GradStats second = gpu::grad_stats(gg.tensor(), nullptr);
  const double ref = sum_of_squares(g, 1);
  EXPECT_NEAR(first.sum_of_squares, ref, 1e-10 * ref);
  EXPECT_EQ(first.non_finite, 0);
  EXPECT_EQ(std::memcmp(&first.sum_of_squares, &second.sum_of_squares, sizeof(double)), 0);
  // Partials in scratch the caller owns (what the engine's early norm passes): the same bits.
  DeviceArray scratch(DType::f32, Shape{static_cast<int64_t>(gpu::grad_stats_scratch_bytes(n) / 4)});
  DeviceArray result(DType::f32, Shape{static_cast<int64_t>(sizeof(gpu::GradStats) / 4)});
  gpu::grad_stats_async(gg.tensor(), static_cast<gpu::GradStats*>(result.tensor().data()), nullptr,
                        scratch.tensor().data());
  gpu::GradStats owned;
  ZT_CUDA_CHECK(cudaMemcpy(&owned, result.tensor().data(), sizeof owned, cudaMemcpyDeviceToHost));
  EXPECT_EQ(std::memcmp(&owned.sum_of_squares, &first.sum_of_squares, sizeof(double)), 0);
  EXPECT_EQ(owned.non_finite, 0);
  // The same values stored in bf16: the sum of the rounded values' squares.
  std::vector<float> rounded = test::round_through(DType::bf16, g);
  DeviceArray gb(DType::bf16, Shape{n});
  gb.upload(g);
  const double ref_bf16 = sum_of_squares(rounded, 1);
  EXPECT_NEAR(gpu::grad_stats(gb.tensor(), nullptr).sum_of_squares, ref_bf16, 1e-10 * ref_bf16);
}

INSTANTIATE_TEST_SUITE_P(Sizes, GradStatsGpu, ::testing::Values(1, 7, 1000, 4097, 1 << 20, 30000001));

TEST(GradStatsGpuNonFinite, CountsInfAndNan) {
  ZT_SKIP_WITHOUT_GPU();
  std::vector<float> g = random_floats(100003, 62);
  g[5] = std::numeric_limits<float>::infinity();
  g[70000] = std::numeric_limits<float>::quiet_NaN();
  g[100002] = -std::numeric_limits<float>::infinity();
  DeviceArray gg(DType::f32, Shape{static_cast<int64_t>(g.size())});
  gg.upload(g);
  const gpu::GradStats stats = gpu::grad_stats(gg.tensor(), nullptr);
  EXPECT_EQ(stats.non_finite, 3);
  EXPECT_FALSE(std::isfinite(stats.sum_of_squares));
  DeviceArray gh(DType::f16, Shape{4});
  gh.upload({1.0f, 70000.0f, 2.0f, 3.0f});  // 70000 overflows f16 to inf: the fp16 overflow case
  EXPECT_EQ(gpu::grad_stats(gh.tensor(), nullptr).non_finite, 1);
}

}  // namespace
}  // namespace zt::optim

#endif  // ZT_WITH_CUDA
