// Untouched rows (optim/cuda/untouched_rows.cuh, ZT_TOUCHED_WORD_ROWS): the gradient statistics and both
// AdamW kernels, given the rows no token named, must store bit for bit what they store for a gradient whose
// untouched rows hold zeros — while those rows hold NaN, so that any load of them would show in the sums,
// the master, m and v. zero_grads clears the touched rows and leaves the untouched ones unwritten. Default
// and bounded launches, aligned (vector) and misaligned (scalar) buffers.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#include "optim/cuda/untouched_rows.cuh"
#include "optim/split_master.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/optim/adamw_gpu_cases.h"

namespace zt::optim {
namespace {

using namespace test_cases;  // NOLINT: the shared cases are this test's vocabulary
using test::DeviceArray;
using test::random_floats;

// [prefix 24 | a table of 301 rows x 40 | suffix 100]: three ranges (the suffix without decay), rows 0, 7,
// 14, ... and 3, 14, 25, ... touched.
constexpr int64_t kFirst = 24, kRows = 301, kWidth = 40, kSize = kFirst + kRows * kWidth + 100;
const std::vector<TensorRange> kRanges = {
    {0, kFirst, true}, {kFirst, kRows* kWidth, true}, {kFirst + kRows * kWidth, 100, false}};

std::vector<int32_t> touched_rows() {
  std::vector<int32_t> touched(kRows);
  for (int64_t r = 0; r < kRows; ++r) touched[static_cast<size_t>(r)] = r % 7 == 0 || r % 11 == 3;
  return touched;
}

bool in_untouched_row(int64_t i, const std::vector<int32_t>& touched) {
  return i >= kFirst && i < kFirst + kRows * kWidth &&
         touched[static_cast<size_t>((i - kFirst) / kWidth)] == 0;
}

// Random gradients, `stale` in every element of an untouched row.
std::vector<float> gradients(uint32_t seed, float stale) {
  std::vector<float> g = random_floats(kSize, seed, -0.1f, 0.1f);
  const std::vector<int32_t> touched = touched_rows();
  for (int64_t i = 0; i < kSize; ++i)
    if (in_untouched_row(i, touched)) g[static_cast<size_t>(i)] = stale;
  return g;
}

constexpr float kStale = std::numeric_limits<float>::quiet_NaN();

// The gradients after the update: as the reference left them outside untouched rows, still stale inside.
void expect_gradients(const std::vector<float>& got, const std::vector<float>& reference,
                      const std::string& what) {
  const std::vector<int32_t> touched = touched_rows();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kSize; ++i) {
    const float g = got[static_cast<size_t>(i)], want = reference[static_cast<size_t>(i)];
    wrong += in_untouched_row(i, touched) ? !std::isnan(g) : std::memcmp(&g, &want, sizeof g) != 0;
  }
  EXPECT_EQ(wrong, 0) << what;
}

struct TouchedFlags {
  DeviceArray flags{DType::i32, Shape{kRows}};
  TouchedFlags() { flags.upload_raw(touched_rows()); }
  gpu::UntouchedRows rows() const {
    return gpu::untouched_rows(static_cast<const int32_t*>(flags.tensor().data()), kFirst, kWidth, kRows);
  }
};

TEST(UntouchedRowsGpu, GradStatsEqualTheZeroFilledTablesWithoutReadingIt) {
  ZT_SKIP_WITHOUT_GPU();
  const TouchedFlags touched;
  for (const int64_t offset : {0, 1}) {
    DeviceArray stale(DType::f32, Shape{kSize}, offset), zeros(DType::f32, Shape{kSize}, offset);
    stale.upload(gradients(5, kStale));
    zeros.upload(gradients(5, 0.0f));
    const gpu::GradStats want = gpu::grad_stats(zeros.tensor(), nullptr);
    const gpu::GradStats got = gpu::grad_stats(stale.tensor(), nullptr, touched.rows());
    EXPECT_EQ(std::memcmp(&got.sum_of_squares, &want.sum_of_squares, sizeof(double)), 0)
        << got.sum_of_squares << " vs " << want.sum_of_squares << ", offset " << offset;
    EXPECT_EQ(got.non_finite, 0) << "offset " << offset;
    EXPECT_GT(gpu::grad_stats(stale.tensor(), nullptr).non_finite, 0) << "the stale rows are NaN";
  }
}

// Every buffer adamw_update writes, and the gradients, after two steps (grad_scale 0.37, the bf16 copy).
struct Outputs {
  std::vector<uint32_t> params, exp_avg, exp_avg_sq;
  std::vector<uint16_t> params16;
  std::vector<float> grads;
};

Outputs two_steps(float stale, const gpu::UntouchedRows& untouched, const AdamWLaunch& launch, int64_t offset,
                  bool zero_grads) {
  const AdamWHyper hyper{1e-3, 0.9, 0.999, 1e-8, 0.01};
  DeviceArray p(DType::f32, Shape{kSize}, offset), g(DType::f32, Shape{kSize}, offset);
  DeviceArray m(DType::f32, Shape{kSize}, offset), v(DType::f32, Shape{kSize}, offset);
  DeviceArray p16(DType::bf16, Shape{kSize}, offset);
  p.upload(random_floats(kSize, 91));
  m.upload(random_floats(kSize, 92, -0.01f, 0.01f));
  v.upload(random_floats(kSize, 93, 0.0f, 1e-4f));
  for (int step = 1; step <= 2; ++step) {
    g.upload(gradients(94 + static_cast<uint32_t>(step), stale));
    gpu::adamw_update(adamw_step_scalars(hyper, 1e-3 * step, step), p.tensor(), g.tensor(), m.tensor(),
                      v.tensor(), kRanges, p16.tensor(), nullptr, 0.37f, zero_grads, launch, untouched);
  }
  return {p.download_raw<uint32_t>(), m.download_raw<uint32_t>(), v.download_raw<uint32_t>(),
          p16.download_raw<uint16_t>(), g.download()};
}

const AdamWLaunch kLaunches[] = {{}, {33, 512}, {3, 64}};

TEST(UntouchedRowsGpu, AdamWStoresWhatItStoresForZeroGradients) {
  ZT_SKIP_WITHOUT_GPU();
  const TouchedFlags touched;
  for (const AdamWLaunch& launch : kLaunches) {
    for_each_offset_and_zeroing([&](int64_t offset, bool zero_grads, const std::string& variant) {
      const std::string what = describe(launch) + variant;
      const Outputs want = two_steps(0.0f, {}, launch, offset, zero_grads);
      const Outputs got = two_steps(kStale, touched.rows(), launch, offset, zero_grads);
      expect_same_bits(got.params, want.params, what + "params");
      expect_same_bits(got.exp_avg, want.exp_avg, what + "exp_avg");
      expect_same_bits(got.exp_avg_sq, want.exp_avg_sq, what + "exp_avg_sq");
      expect_same_bits(got.params16, want.params16, what + "params16");
      expect_gradients(got.grads, want.grads, what + "grads");
    });
  }
}

struct SplitOutputs {
  std::vector<uint16_t> hi, lo;
  std::vector<uint32_t> up, exp_avg, exp_avg_sq;
  std::vector<float> grads;
};

SplitOutputs two_split_steps(float stale, const gpu::UntouchedRows& untouched, const AdamWLaunch& launch,
                             int64_t offset, bool zero_grads) {
  const AdamWHyper hyper{1e-3, 0.9, 0.999, 1e-8, 0.01};
  DeviceArray hi(DType::bf16, Shape{kSize}, offset), lo(DType::bf16, Shape{kSize}, offset),
      up(DType::i32, Shape{(kSize + 31) / 32});
  up.upload_raw(std::vector<uint32_t>(static_cast<size_t>((kSize + 31) / 32), 0));
  const gpu::SplitMaster master{hi.tensor(), lo.tensor(), up.tensor()};
  DeviceArray staged(DType::f32, Shape{kSize});
  staged.upload(random_floats(kSize, 71, -0.5f, 0.5f));
  gpu::write_split_master(staged.tensor(), master, 0, nullptr);
  DeviceArray g(DType::f32, Shape{kSize}, offset), m(DType::f32, Shape{kSize}, offset),
      v(DType::f32, Shape{kSize}, offset);
  m.upload(random_floats(kSize, 92, -0.01f, 0.01f));
  v.upload(random_floats(kSize, 93, 0.0f, 1e-4f));
  for (int step = 1; step <= 2; ++step) {
    g.upload(gradients(94 + static_cast<uint32_t>(step), stale));
    gpu::adamw_update_split_master(adamw_step_scalars(hyper, 1e-3 * step, step), master, g.tensor(),
                                   m.tensor(), v.tensor(), kRanges, nullptr, 0.37f, zero_grads, launch,
                                   untouched);
  }
  return {hi.download_raw<uint16_t>(), lo.download_raw<uint16_t>(), up.download_raw<uint32_t>(),
          m.download_raw<uint32_t>(),  v.download_raw<uint32_t>(),  g.download()};
}

TEST(UntouchedRowsGpu, SplitMasterAdamWStoresWhatItStoresForZeroGradients) {
  ZT_SKIP_WITHOUT_GPU();
  const TouchedFlags touched;
  for (const AdamWLaunch& launch : kLaunches) {
    for_each_offset_and_zeroing([&](int64_t offset, bool zero_grads, const std::string& variant) {
      const std::string what = describe(launch) + variant;
      const SplitOutputs want = two_split_steps(0.0f, {}, launch, offset, zero_grads);
      const SplitOutputs got = two_split_steps(kStale, touched.rows(), launch, offset, zero_grads);
      expect_same_bits(got.hi, want.hi, what + "hi");
      expect_same_bits(got.lo, want.lo, what + "lo");
      expect_same_bits(got.up, want.up, what + "up");
      expect_same_bits(got.exp_avg, want.exp_avg, what + "exp_avg");
      expect_same_bits(got.exp_avg_sq, want.exp_avg_sq, what + "exp_avg_sq");
      expect_gradients(got.grads, want.grads, what + "grads");
    });
  }
}

TEST(UntouchedRowsGpu, RefusesRowsOffEightElementBoundaries) {
  ZT_SKIP_WITHOUT_GPU();
  const TouchedFlags touched;
  DeviceArray p(DType::f32, Shape{kSize}), g(DType::f32, Shape{kSize}), m(DType::f32, Shape{kSize}),
      v(DType::f32, Shape{kSize});
  const auto* flags = static_cast<const int32_t*>(touched.flags.tensor().data());
  const AdamWStepScalars s = adamw_step_scalars({}, 1e-3, 1);
  for (const gpu::UntouchedRows& bad :
       {gpu::untouched_rows(flags, kFirst + 4, kWidth, kRows), gpu::untouched_rows(flags, kFirst, 36, kRows),
        gpu::untouched_rows(flags, kFirst, kWidth, kRows + 100)}) {
    EXPECT_THROW(gpu::adamw_update(s, p.tensor(), g.tensor(), m.tensor(), v.tensor(), kRanges, Tensor(),
                                   nullptr, 1.0f, false, {}, bad),
                 Error)
        << bad.first << " " << bad.width << " " << bad.rows;
  }
  EXPECT_THROW(gpu::grad_stats(g.tensor(), nullptr, gpu::untouched_rows(flags, kFirst, kWidth, kRows + 100)),
               Error);
}

}  // namespace
}  // namespace zt::optim

#endif  // ZT_WITH_CUDA
