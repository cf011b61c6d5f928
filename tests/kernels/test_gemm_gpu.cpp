// The GEMM wrapper's two-level batch (kernels/cuda/gemm.h: outer items with their own stride, e.g. batch rows
// of a [B, L, D] tensor, times inner items, e.g. heads) against a double-precision host product, in f32 and
// bf16, with transposes, beta = 1 accumulation into f32, and the case whose strides fold into one batch.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::round_to;
using test::to_device;
using test::to_host;

struct Case {
  DType dtype;
  bool transpose_a, transpose_b;
  bool uniform;  // outer stride == batch * batch stride everywhere: folds into one strided batch
};

class GemmTwoLevelBatchGpu : public ::testing::TestWithParam<Case> {};

// The sizes and flags of a two-level batch (operands and strides are the caller's).
GemmProblem two_level_problem(int64_t outer, int64_t batch, int64_t m, int64_t n, int64_t k, DType dtype,
                              bool transpose_a, bool transpose_b) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.outer = outer;
  p.input_dtype = dtype;
  p.transpose_a = transpose_a;
  p.transpose_b = transpose_b;
  return p;
}

// Element (r, c) of op(X) for a row-major operand with leading dimension ld.
double at(const std::vector<float>& x, int64_t base, int64_t ld, bool transposed, int64_t r, int64_t c) {
  return transposed ? x[static_cast<size_t>(base + c * ld + r)] : x[static_cast<size_t>(base + r * ld + c)];
}

TEST_P(GemmTwoLevelBatchGpu, MatchesHostProductForEveryItem) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  const int64_t outer = 3, batch = 5, m = 19, n = 13, k = 24;
  // "Head" layout as in attention: item (o, z) of A is the [m, k] (or [k, m]) block at column z * cols of a
  // [outer * rows, batch * cols] matrix (ld = batch * cols), rows o * rows...; the uniform case instead
  // stacks the items one after another.
  const int64_t a_rows = c.transpose_a ? k : m, a_cols = c.transpose_a ? m : k;
  const int64_t b_rows = c.transpose_b ? n : k, b_cols = c.transpose_b ? k : n;
  GemmProblem p = two_level_problem(outer, batch, m, n, k, c.dtype, c.transpose_a, c.transpose_b);
  p.beta = 1.0f;
  int64_t a_size, b_size, c_size;
  if (c.uniform) {
    p.a = {nullptr, a_cols, a_rows * a_cols, batch * a_rows * a_cols};
    p.b = {nullptr, b_cols, b_rows * b_cols, batch * b_rows * b_cols};
    a_size = outer * batch * a_rows * a_cols;
    b_size = outer * batch * b_rows * b_cols;
  } else {
    p.a = {nullptr, batch * a_cols, a_cols, a_rows * batch * a_cols};
    p.b = {nullptr, batch * b_cols, b_cols, b_rows * batch * b_cols};
    a_size = outer * a_rows * batch * a_cols;
    b_size = outer * b_rows * batch * b_cols;
  }
  // C: f32 [outer, m, batch * n] head layout (or stacked), accumulated onto its old values.
  p.c = c.uniform ? GemmOutput{nullptr, DType::f32, n, m * n, batch * m * n}
                  : GemmOutput{nullptr, DType::f32, batch * n, n, m * batch * n};
  c_size = outer * batch * m * n;
  const std::vector<float> a = round_to(test::random_floats(a_size, 1), c.dtype);
  const std::vector<float> b = round_to(test::random_floats(b_size, 2), c.dtype);
  const std::vector<float> c0 = test::random_floats(c_size, 3);
  auto da = to_device(a, {a_size}, c.dtype), db = to_device(b, {b_size}, c.dtype);
  auto dc = to_device(c0, {c_size}, DType::f32);
  p.a.data = da.tensor.data();
  p.b.data = db.tensor.data();
  p.c.data = dc.tensor.data();
  gemm(p, nullptr);
  const std::vector<float> got = to_host(dc.tensor);

  std::vector<float> want = c0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t z = 0; z < batch; ++z) {
      const int64_t a_base = o * p.a.outer_stride + z * p.a.batch_stride;
      const int64_t b_base = o * p.b.outer_stride + z * p.b.batch_stride;
      const int64_t c_base = o * p.c.outer_stride + z * p.c.batch_stride;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t col = 0; col < n; ++col) {
          double sum = 0;
          for (int64_t i = 0; i < k; ++i) {
            sum += at(a, a_base, p.a.ld, c.transpose_a, r, i) * at(b, b_base, p.b.ld, c.transpose_b, i, col);
          }
          want[static_cast<size_t>(c_base + r * p.c.ld + col)] += static_cast<float>(sum);
        }
      }
    }
  }
  // f32 inputs: fp32 products in a different order; bf16 inputs are exact in fp32, so the same bound holds.
  EXPECT_TRUE(test::all_close("two-level batched C", got, want, test::tolerance_for(DType::f32)));
}

INSTANTIATE_TEST_SUITE_P(Cases, GemmTwoLevelBatchGpu,
                         ::testing::Values(Case{DType::f32, false, false, false},
                                           Case{DType::f32, true, true, false},
                                           Case{DType::bf16, false, true, false},
                                           Case{DType::bf16, true, false, false},
                                           Case{DType::bf16, false, true, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::string(dtype_name(c.dtype)) + (c.transpose_a ? "_tA" : "") +
                                  (c.transpose_b ? "_tB" : "") + (c.uniform ? "_uniform" : "_heads");
                         });

// A two-level batch in the attention's head layout fills its pointer arrays once per (stream, addresses,
// strides): the same call again reuses them (no new entry) and writes the same product, bit for bit; another
// output address is another entry with its own product.
TEST(GemmTwoLevelBatchGpuCache, ReusesPointerArraysForTheSameOperands) {
  ZT_SKIP_WITHOUT_GPU();
  const int64_t outer = 3, batch = 5, m = 19, n = 13, k = 24;
  GemmProblem p = two_level_problem(outer, batch, m, n, k, DType::bf16, false, true);
  p.a = {nullptr, batch * k, k, m * batch * k};
  p.b = {nullptr, batch * k, k, n * batch * k};
  p.c = {nullptr, DType::f32, batch * n, n, m * batch * n};
  const int64_t a_size = outer * m * batch * k, b_size = outer * n * batch * k,
                c_size = outer * m * batch * n;
  auto da = to_device(round_to(test::random_floats(a_size, 7), DType::bf16), {a_size}, DType::bf16);
  auto db = to_device(round_to(test::random_floats(b_size, 8), DType::bf16), {b_size}, DType::bf16);
  auto dc = to_device(std::vector<float>(static_cast<size_t>(c_size), 0.0f), {c_size}, DType::f32);
  auto dc2 = to_device(std::vector<float>(static_cast<size_t>(c_size), 0.0f), {c_size}, DType::f32);
  p.a.data = da.tensor.data();
  p.b.data = db.tensor.data();
  p.c.data = dc.tensor.data();
  const int64_t before = gemm_cached_pointer_array_count();
  gemm(p, nullptr);
  const std::vector<float> first = to_host(dc.tensor);
  EXPECT_EQ(gemm_cached_pointer_array_count(), before + 1);
  for (int round = 0; round < 2; ++round) {
    // NaN first (all bits set), so a product not written again shows.
    ASSERT_EQ(cudaMemset(dc.tensor.data(), 0xff, static_cast<size_t>(c_size) * sizeof(float)), cudaSuccess);
    gemm(p, nullptr);
    EXPECT_EQ(to_host(dc.tensor), first) << "round " << round;
    EXPECT_EQ(gemm_cached_pointer_array_count(), before + 1) << "round " << round;
  }
  p.c.data = dc2.tensor.data();
  gemm(p, nullptr);
  EXPECT_EQ(to_host(dc2.tensor), first);
  EXPECT_EQ(gemm_cached_pointer_array_count(), before + 2);
}

TEST(GemmTwoLevelBatchGpuArgs, RejectsABiasEpilogue) {
  ZT_SKIP_WITHOUT_GPU();
  GemmProblem p;
  p.m = p.n = p.k = 2;
  p.outer = 2;
  p.a.ld = p.b.ld = p.c.ld = 2;
  float bias[2] = {0, 0};
  p.epilogue = GemmEpilogue::bias;
  p.bias = bias;
  EXPECT_THROW(gemm(p, nullptr), Error);
}

}  // namespace
}  // namespace zt::kernels

#else

TEST(GemmTwoLevelBatchGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
