#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <cstdint>

#include "runtime/check.h"

namespace zt::kernels::cpu {
namespace {

struct ClassShape {
  int64_t rows, classes;
};

// The shape of a checked call (kernels/cross_entropy.cpp); labels (< 0: ignored) must be below the class
// count, which only the host can read.
ClassShape check_labels(const Tensor& logits, const Tensor& labels, const char* op) {
  const int64_t classes = logits.dim(1);
  const int64_t* y = labels.data_as<int64_t>();
  for (int64_t n = 0; n < logits.dim(0); ++n) {
    ZT_CHECK(y[n] < classes, op, ": label ", y[n], " of row ", n, " is not below the class count ", classes);
  }
  return {logits.dim(0), classes};
}

int64_t count_kept(const int64_t* labels, int64_t rows) {
  int64_t kept = 0;
  for (int64_t n = 0; n < rows; ++n) kept += labels[n] >= 0;
  return kept;
}

// log(sum_c exp(z[c])) with the max subtracted first, so exp never overflows.
double log_sum_exp(const float* z, int64_t classes) {
  double row_max = z[0];
  for (int64_t c = 1; c < classes; ++c) row_max = std::fmax(row_max, static_cast<double>(z[c]));
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(z[c] - row_max);
  return row_max + std::log(sum);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss) {
  constexpr const char* op = "cross_entropy_forward";
  const ClassShape s = check_labels(logits, labels, op);
  const float* z = logits.data_as<float>();
  const int64_t* y = labels.data_as<int64_t>();
  const int64_t kept = count_kept(y, s.rows);
  double total = 0;
  for (int64_t n = 0; n < s.rows; ++n) {
    if (y[n] < 0) continue;
    const float* zn = z + n * s.classes;
    total += log_sum_exp(zn, s.classes) - zn[y[n]];
  }
  loss.data_as<float>()[0] = kept == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(kept));
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits) {
  constexpr const char* op = "cross_entropy_backward";
  const ClassShape s = check_labels(logits, labels, op);
  const float* z = logits.data_as<float>();
  const int64_t* y = labels.data_as<int64_t>();
  float* dz = dlogits.data_as<float>();
  const int64_t kept = count_kept(y, s.rows);
  const double row_scale = kept == 0 ? 0.0 : static_cast<double>(dloss) / static_cast<double>(kept);
  for (int64_t n = 0; n < s.rows; ++n) {
    const float* zn = z + n * s.classes;
    float* dzn = dz + n * s.classes;
    if (y[n] < 0) {
      for (int64_t c = 0; c < s.classes; ++c) dzn[c] = 0.0f;
      continue;
    }
    const double lse = log_sum_exp(zn, s.classes);
    for (int64_t c = 0; c < s.classes; ++c) {
      const double softmax = std::exp(zn[c] - lse);
      dzn[c] = static_cast<float>(row_scale * (softmax - (c == y[n] ? 1.0 : 0.0)));
    }
  }
}

}  // namespace zt::kernels::cpu
