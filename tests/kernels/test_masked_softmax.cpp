#include "kernels/masked_softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/check.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::all_close;
using test::tolerance_for;

constexpr int64_t kRows = 3 * 5, kLength = 7;
const Shape kShape{3, 5, 7};

// Random 0/1 mask with row 2 fully masked and row 4 fully kept.
std::vector<int64_t> make_mask() {
  const std::vector<float> coin = test::random_uniform(kRows * kLength, 11);
  std::vector<int64_t> mask(coin.size());
  for (size_t e = 0; e < coin.size(); ++e) mask[e] = coin[e] > -0.3f ? 1 : 0;
  for (int64_t j = 0; j < kLength; ++j) {
    mask[2 * kLength + j] = 0;
    mask[4 * kLength + j] = 1;
  }
  return mask;
}

// exp(s) / sum over kept entries, in double; masked entries 0; a fully masked row uniform.
std::vector<float> naive_masked_softmax(const std::vector<float>& scores, const std::vector<int64_t>& mask) {
  std::vector<float> out(scores.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double max_kept = -INFINITY, sum = 0;
    int64_t kept = 0;
    for (int64_t j = 0; j < kLength; ++j) {
      if (mask[r * kLength + j]) {
        max_kept = std::max<double>(max_kept, scores[r * kLength + j]);
        ++kept;
      }
    }
    for (int64_t j = 0; j < kLength; ++j)
      if (mask[r * kLength + j]) sum += std::exp(scores[r * kLength + j] - max_kept);
    for (int64_t j = 0; j < kLength; ++j) {
      const int64_t e = r * kLength + j;
      if (kept == 0) {
        out[e] = 1.0f / kLength;
      } else {
        out[e] = mask[e] ? static_cast<float>(std::exp(scores[e] - max_kept) / sum) : 0.0f;
      }
    }
  }
  return out;
}

TEST(MaskedSoftmax, ForwardMatchesNaiveFormula) {
  std::vector<float> scores = test::random_uniform(kRows * kLength, 3, -4.0f, 4.0f);
  scores[5] = 60.0f;  // a large kept or masked score must not disturb its neighbours
  std::vector<int64_t> mask = make_mask();
  std::vector<float> probs(scores.size(), -1.0f);
  masked_softmax_forward(Tensor(scores.data(), kShape, DType::f32), Tensor(mask.data(), kShape, DType::i64),
                         Tensor(probs.data(), kShape, DType::f32));
  EXPECT_TRUE(all_close("probs", probs, naive_masked_softmax(scores, mask), tolerance_for(DType::f32)));
  for (size_t e = 0; e < probs.size(); ++e) {
    const bool fully_masked_row = e / kLength == 2;
    if (!mask[e] && !fully_masked_row) {
      EXPECT_EQ(probs[e], 0.0f) << "masked entry " << e << " must be exactly 0";
    }
  }
  for (int64_t j = 0; j < kLength; ++j) EXPECT_FLOAT_EQ(probs[2 * kLength + j], 1.0f / kLength);
}

TEST(MaskedSoftmax, LargeScoresStayFiniteAndMaskDtypesAgree) {
  std::vector<float> scores = test::random_uniform(kRows * kLength, 4, -1.0f, 1.0f);
  for (float& s : scores) s += 5000.0f;  // exp overflows without the max subtraction
  const std::vector<int64_t> mask = make_mask();
  std::vector<float> mask_f32(mask.begin(), mask.end());
  std::vector<int32_t> mask_i32(mask.begin(), mask.end());
  std::vector<float> from_i64(scores.size()), from_f32(scores.size()), in_place = scores;
  masked_softmax_forward(Tensor(scores.data(), kShape, DType::f32),
                         Tensor(const_cast<int64_t*>(mask.data()), kShape, DType::i64),
                         Tensor(from_i64.data(), kShape, DType::f32));
  masked_softmax_forward(Tensor(scores.data(), kShape, DType::f32),
                         Tensor(mask_f32.data(), kShape, DType::f32),
                         Tensor(from_f32.data(), kShape, DType::f32));
  masked_softmax_forward(Tensor(in_place.data(), kShape, DType::f32),
                         Tensor(mask_i32.data(), kShape, DType::i32),
                         Tensor(in_place.data(), kShape, DType::f32));
  EXPECT_TRUE(all_close("probs", from_i64, naive_masked_softmax(scores, mask), tolerance_for(DType::f32)));
  EXPECT_EQ(from_i64, from_f32);
  EXPECT_EQ(from_i64, in_place);
}

TEST(MaskedSoftmax, BackwardMatchesFiniteDifferences) {
  std::vector<float> scores = test::random_uniform(kRows * kLength, 5, -2.0f, 2.0f);
  std::vector<int64_t> mask = make_mask();
  const std::vector<float> weights = test::random_uniform(kRows * kLength, 6);
  std::vector<float> probs(scores.size()), dscores(scores.size(), 123.0f);
  const Tensor scores_t(scores.data(), kShape, DType::f32), mask_t(mask.data(), kShape, DType::i64);
  const Tensor probs_t(probs.data(), kShape, DType::f32);
  auto loss = [&] {
    masked_softmax_forward(scores_t, mask_t, probs_t);
    return test::dot(probs, weights);
  };
  loss();
  std::vector<float> dprobs = weights;
  masked_softmax_backward(probs_t, Tensor(dprobs.data(), kShape, DType::f32), mask_t,
                          Tensor(dscores.data(), kShape, DType::f32));
  EXPECT_TRUE(test::check_gradient("dscores", scores, dscores, loss, {.step = 1e-2, .max_elements = 0}));
  // masked_fill blocks the gradient: masked entries, including the fully masked row, get exactly 0.
  for (size_t e = 0; e < dscores.size(); ++e)
    if (!mask[e]) {
      EXPECT_EQ(dscores[e], 0.0f) << "entry " << e;
    }
  // In place (dscores aliasing dprobs) gives the same result; the FD probes left probs perturbed.
  loss();
  masked_softmax_backward(probs_t, Tensor(dprobs.data(), kShape, DType::f32), mask_t,
                          Tensor(dprobs.data(), kShape, DType::f32));
  EXPECT_EQ(dprobs, dscores);
}

TEST(MaskedSoftmax, RejectsBadArguments) {
  std::vector<float> scores(kRows * kLength), probs(scores.size());
  std::vector<int64_t> mask(scores.size(), 1);
  const Tensor scores_t(scores.data(), kShape, DType::f32), probs_t(probs.data(), kShape, DType::f32);
  EXPECT_THROW(
      masked_softmax_forward(scores_t, Tensor(mask.data(), Shape{kRows, kLength}, DType::i64), probs_t),
      Error);
  EXPECT_THROW(masked_softmax_forward(scores_t, Tensor(mask.data(), kShape, DType::i64),
                                      Tensor(probs.data(), Shape{kRows, kLength}, DType::f32)),
               Error);
  EXPECT_THROW(masked_softmax_forward(Tensor(scores.data(), kShape, DType::i32),
                                      Tensor(mask.data(), kShape, DType::i64), probs_t),
               Error);
  EXPECT_THROW(masked_softmax_forward(scores_t, Tensor(mask.data(), kShape, DType::i64),
                                      Tensor(probs.data(), kShape, DType::f32, DeviceKind::cuda)),
               Error);
}

}  // namespace
}  // namespace zt::kernels
