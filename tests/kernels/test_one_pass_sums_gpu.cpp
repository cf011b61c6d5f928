// The one-pass chunked column sums (ZT_ONE_PASS_SUMS=1: the last block of each column tile adds the chunk
// partials inside the partials kernel, kernels/cuda/column_sum.cuh) against the two-pass path, bit for bit:
// a bias gradient (linear_backward's column sum), the LayerNorm parameter gradients and the FFN's GELU step
// with its column sums. Over one chunk, many, the most one pass takes (64) and more (the LayerNorm's 65th
// chunk falls back to two passes), partial column tiles and the scalar path, accumulated onto 0.5 and
// written over NaN (a sum never written stays NaN), twice in a row on one stream (the counters must be back
// at zero) and on a second stream (its own counters).
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/gelu.cuh"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "runtime/stream.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/scoped_env.h"

namespace zt::kernels {
namespace {

using test::DeviceArray;
using test::random_floats;
using test::round_through;

constexpr const char* kSwitch = "ZT_ONE_PASS_SUMS";

// Bit for bit (-0 and +0 apart).
::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
    return ::testing::AssertionSuccess();
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  }
  return ::testing::AssertionFailure() << got.size() << " values vs " << want.size();
}

// `sums(write)` runs an op that (over)writes its column sums and returns them; the two-pass result must come
// back bit for bit from one pass on the default stream, again on it, and on a stream of its own (which
// gets its own counters: one more counter buffer, while the switch-off runs add none).
// `one_pass`: whether the shape takes one pass at all (the LayerNorm's chunks past 64 do not).
void expect_one_pass_matches(const std::string& what,
                             const std::function<std::vector<float>(GradWrite)>& sums, bool one_pass = true) {
  test::ScopedEnv one_pass_switch(kSwitch);
  for (GradWrite write : {GradWrite::accumulate, GradWrite::overwrite}) {
    const std::string label = what + (write == GradWrite::accumulate ? " accumulate" : " overwrite");
    ASSERT_TRUE(one_pass_switch.unset());
    const int64_t buffers = one_pass_sum_counter_count();
    const std::vector<float> two_pass = sums(write);
    for (float v : two_pass) ASSERT_FALSE(std::isnan(v)) << label << ": the two-pass sums left a NaN";
    EXPECT_EQ(one_pass_sum_counter_count(), buffers) << label << ": counters with the switch off";
    ASSERT_TRUE(one_pass_switch.set("1"));
    EXPECT_TRUE(same_bits(sums(write), two_pass)) << label << ", one pass";
    EXPECT_TRUE(same_bits(sums(write), two_pass)) << label << ", one pass again on the same stream";
    const int64_t before_stream = one_pass_sum_counter_count();
    Stream stream;
    {
      StreamScope on_stream(stream);
      EXPECT_TRUE(same_bits(sums(write), two_pass)) << label << ", one pass on another stream";
      EXPECT_EQ(one_pass_sum_counter_count(), before_stream + (one_pass ? 1 : 0))
          << label << (one_pass ? ": one pass did not run" : ": one pass ran past 64 chunks");
    }
    stream.synchronize();
  }
}

// Host values onto the device, finished before the call returns: DeviceArray::upload's cudaMemcpy runs on
// the legacy stream, which a non-blocking stream's kernels do not wait for.
void upload(DeviceArray& array, const std::vector<float>& values) {
  array.upload(values);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

std::vector<float> start_values(int64_t n, GradWrite write) {
  return std::vector<float>(static_cast<size_t>(n), write == GradWrite::accumulate ? 0.5f : std::nanf(""));
}

struct SumCase {
  DType dtype;
  int64_t rows, cols;
};

std::string describe(const SumCase& c) {
  return std::string(dtype_name(c.dtype)) + " [" + std::to_string(c.rows) + ", " + std::to_string(c.cols) +
         "]";
}

// 1 chunk; 9 chunks and a partial column tile (264 = 256 + 8); the scalar path (7 columns); ColumnSumPlan's
// 64-chunk cap (9000 rows); a LayerNorm past 64 chunks (2080 rows of 32: 65); with ZT_SMALL_SUM_CHUNKS=1 an
// empty last chunk (2060 rows: 64 chunks of 33, the last starting at row 2079).
const std::vector<SumCase> kCases = {
    {DType::bf16, 5, 264},   {DType::bf16, 1030, 264},  {DType::bf16, 1030, 7}, {DType::f32, 1030, 264},
    {DType::bf16, 9000, 96}, {DType::bf16, 2080, 1536}, {DType::f32, 2048, 40}, {DType::bf16, 2060, 264}};

TEST(OnePassSumsGpu, BiasGradientEqualsTwoPasses) {
  ZT_SKIP_WITHOUT_GPU();
  for (const SumCase& c : kCases) {
    // linear_backward's db over dy: a [rows, cols] output of a 1-feature input (x and W never read).
    DeviceArray dy(c.dtype, Shape{c.rows, c.cols}), ones(c.dtype, Shape{c.rows, 1}),
        weight(c.dtype, Shape{c.cols, 1}), db(DType::f32, Shape{c.cols});
    dy.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 41)));
    expect_one_pass_matches("bias gradient " + describe(c), [&](GradWrite write) {
      upload(db, start_values(c.cols, write));
      linear_backward(dy.tensor(), ones.tensor(), weight.tensor(), Tensor(), Tensor(), db.tensor(), false,
                      write);
      return db.download();
    });
  }
}

TEST(OnePassSumsGpu, LayerNormParameterGradientsEqualTwoPasses) {
  ZT_SKIP_WITHOUT_GPU();
  for (const SumCase& c : kCases) {
    const Shape shape{c.rows, c.cols};
    DeviceArray x(c.dtype, shape), dy(c.dtype, shape), y(c.dtype, shape), dx(c.dtype, shape),
        gamma(DType::f32, Shape{c.cols}), beta(DType::f32, Shape{c.cols}), mean(DType::f32, Shape{c.rows}),
        rstd(DType::f32, Shape{c.rows}), dgamma(DType::f32, Shape{c.cols}), dbeta(DType::f32, Shape{c.cols});
    x.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 42)));
    dy.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 43)));
    gamma.upload(random_floats(c.cols, 44, 0.5f, 1.5f));
    beta.upload(random_floats(c.cols, 45));
    layernorm_forward(x.tensor(), gamma.tensor(), beta.tensor(), 1e-7f, y.tensor(), mean.tensor(),
                      rstd.tensor());
    const bool one_pass = (c.rows + 31) / 32 <= 64;  // the LayerNorm's chunks: >= 32 rows each
    expect_one_pass_matches(
        "LayerNorm " + describe(c),
        [&](GradWrite write) {
          upload(dgamma, start_values(c.cols, write));
          upload(dbeta, start_values(c.cols, write));
          layernorm_backward(dy.tensor(), x.tensor(), gamma.tensor(), mean.tensor(), rstd.tensor(),
                             dx.tensor(), dgamma.tensor(), dbeta.tensor(), write);
          std::vector<float> both = dgamma.download();
          const std::vector<float> b = dbeta.download();
          both.insert(both.end(), b.begin(), b.end());
          return both;
        },
        one_pass);
  }
}

TEST(OnePassSumsGpu, GeluStepColumnSumsEqualTwoPasses) {
  ZT_SKIP_WITHOUT_GPU();
  for (const SumCase& c : kCases) {
    if (c.cols % 8 != 0) continue;  // the fused GELU step is the vector path only
    const Shape shape{c.rows, c.cols};
    DeviceArray x(c.dtype, shape), dy(c.dtype, shape), y(c.dtype, shape), dx(c.dtype, shape),
        sums(DType::f32, Shape{c.cols});
    x.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 46, -4.0f, 4.0f)));
    dy.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 47)));
    for (auto path : {gpu::GeluColumnSumPath::fused, gpu::GeluColumnSumPath::separate}) {
      const char* name = path == gpu::GeluColumnSumPath::fused ? " fused" : " separate";
      expect_one_pass_matches("GELU step " + describe(c) + name, [&](GradWrite write) {
        upload(sums, start_values(c.cols, write));
        gpu::gelu_recompute_and_backward(dy.tensor(), x.tensor(), y.tensor(), dx.tensor(), sums.tensor(),
                                         write, current_stream(), path);
        return sums.download();
      });
    }
  }
}

// ZT_SMALL_SUM_CHUNKS=1 (kernels/cuda/column_sum.cuh): chunks of >= 32 rows, so other summation orders —
// still within f32 summation error of the exact column sums (1e-5 of the sum of magnitudes: a lost chunk
// is ~1/64 of it), the same bits run after run and with one pass as with two, the GELU step's fused sums
// (same plan) bitwise its separate pass's, and at 1030 rows (33 chunks instead of 9) not the default plan's
// bits — the switch took effect.
TEST(SmallSumChunksGpu, SumsStayExactEnoughDeterministicAndFused) {
  ZT_SKIP_WITHOUT_GPU();
  test::ScopedEnv small_chunks("ZT_SMALL_SUM_CHUNKS"), one_pass_switch(kSwitch);
  for (const SumCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Shape shape{c.rows, c.cols};
    const std::vector<float> dy = round_through(c.dtype, random_floats(c.rows * c.cols, 61));
    DeviceArray gdy(c.dtype, shape), ones(c.dtype, Shape{c.rows, 1}), weight(c.dtype, Shape{c.cols, 1}),
        db(DType::f32, Shape{c.cols});
    gdy.upload(dy);
    const auto bias_gradient = [&]() {
      upload(db, start_values(c.cols, GradWrite::overwrite));
      linear_backward(gdy.tensor(), ones.tensor(), weight.tensor(), Tensor(), Tensor(), db.tensor(), false,
                      GradWrite::overwrite);
      return db.download();
    };
    ASSERT_TRUE(small_chunks.unset());
    ASSERT_TRUE(one_pass_switch.unset());
    const std::vector<float> default_plan = bias_gradient();
    ASSERT_TRUE(small_chunks.set("1"));
    const std::vector<float> small = bias_gradient();
    EXPECT_TRUE(same_bits(bias_gradient(), small)) << "run to run";
    ASSERT_TRUE(one_pass_switch.set("1"));
    EXPECT_TRUE(same_bits(bias_gradient(), small)) << "one pass against two";
    if (c.rows == 1030 && c.cols == 264) {
      EXPECT_FALSE(same_bits(small, default_plan)) << "33 chunks of 32 rows summed like 9 of 115";
    }
    for (int64_t col = 0; col < c.cols; ++col) {
      double exact = 0, magnitude = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        exact += dy[static_cast<size_t>(r * c.cols + col)];
        magnitude += std::fabs(dy[static_cast<size_t>(r * c.cols + col)]);
      }
      ASSERT_NEAR(small[static_cast<size_t>(col)], exact, 1e-5 * (magnitude + 1.0)) << "column " << col;
    }
    if (c.cols % 8 != 0) continue;  // the fused GELU step is the vector path only
    // The GELU step's sums, fused and separate, over the same plan (one pass still on).
    DeviceArray x(c.dtype, shape), y(c.dtype, shape), dx(c.dtype, shape), fused(DType::f32, Shape{c.cols}),
        separate(DType::f32, Shape{c.cols});
    x.upload(round_through(c.dtype, random_floats(c.rows * c.cols, 62, -4.0f, 4.0f)));
    upload(fused, start_values(c.cols, GradWrite::accumulate));
    upload(separate, start_values(c.cols, GradWrite::accumulate));
    gpu::gelu_recompute_and_backward(gdy.tensor(), x.tensor(), y.tensor(), dx.tensor(), fused.tensor(),
                                     GradWrite::accumulate, current_stream(), gpu::GeluColumnSumPath::fused);
    gpu::gelu_recompute_and_backward(gdy.tensor(), x.tensor(), y.tensor(), dx.tensor(), separate.tensor(),
                                     GradWrite::accumulate, current_stream(),
                                     gpu::GeluColumnSumPath::separate);
    EXPECT_TRUE(same_bits(fused.download(), separate.download())) << "GELU sums, fused vs separate";
  }
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
