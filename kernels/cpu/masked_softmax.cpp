#include "kernels/masked_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/arg_checks.h"
#include "runtime/check.h"

namespace zt::kernels {

namespace cpu {

void masked_softmax_row(const float* scores, const uint8_t* keep, float* probs, int64_t n) {
  // Filling with the lowest finite value (not -inf) is what makes a fully masked row uniform, as in HF.
  constexpr float kMaskedScore = std::numeric_limits<float>::lowest();
  float row_max = kMaskedScore;
  for (int64_t j = 0; j < n; ++j) {
    const float x = keep[j] ? scores[j] : kMaskedScore;
    probs[j] = x;
    row_max = std::max(row_max, x);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    probs[j] = std::exp(probs[j] - row_max);
    sum += probs[j];
  }
  const float inverse = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) probs[j] *= inverse;
}

void masked_softmax_backward_row(const float* probs, const float* dprobs, const uint8_t* keep, float* dscores,
                                 int64_t n) {
  float weighted = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    if (keep[j]) weighted += probs[j] * dprobs[j];
  }
  for (int64_t j = 0; j < n; ++j) dscores[j] = keep[j] ? probs[j] * (dprobs[j] - weighted) : 0.0f;
}

std::vector<uint8_t> mask_to_keep(const Tensor& mask, const char* op) {
  ZT_CHECK(mask.device() == DeviceKind::cpu, op, ": mask must be a CPU tensor, got ", mask.describe());
  ZT_CHECK(mask.is_contiguous(), op, ": mask must be contiguous, got ", mask.describe());
  const int64_t n = mask.numel();
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  switch (mask.dtype()) {
    case DType::i64:
      for (int64_t i = 0; i < n; ++i) keep[i] = mask.data_as<int64_t>()[i] != 0;
      break;
    case DType::i32:
      for (int64_t i = 0; i < n; ++i) keep[i] = mask.data_as<int32_t>()[i] != 0;
      break;
    case DType::f32:
      for (int64_t i = 0; i < n; ++i) keep[i] = mask.data_as<float>()[i] != 0.0f;
      break;
    default:
      ZT_FAIL(op, ": mask must be i64, i32 or f32, got ", mask.describe());
  }
  return keep;
}

}  // namespace cpu

namespace {

void check_rows_tensor(const Tensor& t, const Tensor& like, const char* op, const char* what,
                       const char* like_name) {
  check_cpu_arg(t, DType::f32, op, what);
  check_same_shape(t, like, op, what, like_name);
}

}  // namespace

void masked_softmax_forward(const Tensor& scores, const Tensor& mask, const Tensor& probs) {
  constexpr const char* op = "masked_softmax_forward";
  if (scores.device() == DeviceKind::cuda) ZT_FAIL("masked_softmax: CUDA kernel not built yet");
  ZT_CHECK(scores.rank() >= 1, op, ": scores must have rank >= 1");
  check_cpu_arg(scores, DType::f32, op, "scores");
  check_rows_tensor(probs, scores, op, "probs", "scores");
  check_same_shape(mask, scores, op, "mask", "scores");
  const std::vector<uint8_t> keep = cpu::mask_to_keep(mask, op);
  const int64_t n = scores.dim(-1), rows = rows_of(scores);
  const float* in = scores.data_as<float>();
  float* out = probs.data_as<float>();
  for (int64_t r = 0; r < rows; ++r) cpu::masked_softmax_row(in + r * n, keep.data() + r * n, out + r * n, n);
}

void masked_softmax_backward(const Tensor& probs, const Tensor& dprobs, const Tensor& mask,
                             const Tensor& dscores) {
  constexpr const char* op = "masked_softmax_backward";
  if (probs.device() == DeviceKind::cuda) ZT_FAIL("masked_softmax: CUDA kernel not built yet");
  ZT_CHECK(probs.rank() >= 1, op, ": probs must have rank >= 1");
  check_cpu_arg(probs, DType::f32, op, "probs");
  check_rows_tensor(dprobs, probs, op, "dprobs", "probs");
  check_rows_tensor(dscores, probs, op, "dscores", "probs");
  check_same_shape(mask, probs, op, "mask", "probs");
  const std::vector<uint8_t> keep = cpu::mask_to_keep(mask, op);
  const int64_t n = probs.dim(-1), rows = rows_of(probs);
  const float* p = probs.data_as<float>();
  const float* dp = dprobs.data_as<float>();
  float* ds = dscores.data_as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    cpu::masked_softmax_backward_row(p + r * n, dp + r * n, keep.data() + r * n, ds + r * n, n);
  }
}

}  // namespace zt::kernels
