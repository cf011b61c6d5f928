#include "optim/grad_clip.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "runtime/check.h"
#include "runtime/parallel_blocks.h"

namespace zt::optim {

namespace {

// torch's clip_grad_norm_ adds this to the norm so a zero norm does not divide by zero.
constexpr double kClipNormEpsilon = 1e-6;

// Sum of squares of n floats in double. Eight interleaved accumulators, combined in a fixed order, break the
// add-latency chain (and let the compiler use vector registers) while keeping the result reproducible.
double block_sum_of_squares(const float* x, int64_t n) {
  constexpr int kLanes = 8;
  std::array<double, kLanes> acc{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      acc[l] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = x[i];
    acc[0] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace

double sum_of_squares(std::span<const float> grads, int num_threads) {
  const int64_t n = static_cast<int64_t>(grads.size());
  std::vector<double> partial(static_cast<size_t>(zt::detail::element_block_count(n)), 0.0);
  zt::detail::run_element_blocks_in_parallel(n, num_threads, [&](int64_t b, int64_t begin, int64_t end) {
    partial[static_cast<size_t>(b)] = block_sum_of_squares(grads.data() + begin, end - begin);
  });
  double total = 0;
  for (double p : partial) total += p;  // in block order: independent of which thread summed which block
  return total;
}

double global_l2_norm(std::span<const float> grads, int num_threads) {
  return std::sqrt(sum_of_squares(grads, num_threads));
}

double clip_coefficient(double total_norm, double max_norm) {
  ZT_CHECK(max_norm > 0, "max grad norm must be positive, got ", max_norm);
  const double coef = max_norm / (total_norm + kClipNormEpsilon);
  return coef < 1.0 ? coef : (std::isnan(coef) ? coef : 1.0);
}

void scale_in_place(std::span<float> grads, float factor, int num_threads) {
  const int64_t n = static_cast<int64_t>(grads.size());
  zt::detail::run_element_blocks_in_parallel(n, num_threads, [&](int64_t, int64_t begin, int64_t end) {
    float* g = grads.data();
    for (int64_t i = begin; i < end; ++i) g[i] *= factor;
  });
}

double clip_grad_norm(std::span<float> grads, double max_norm, int num_threads) {
  ZT_CHECK(max_norm > 0, "max grad norm must be positive, got ", max_norm);
  const double norm = global_l2_norm(grads, num_threads);
  if (!std::isfinite(norm)) return norm;  // the caller skips this step; scaling by NaN would poison grads
  const double coef = clip_coefficient(norm, max_norm);
  if (coef < 1.0) scale_in_place(grads, static_cast<float>(coef), num_threads);
  return norm;
}

double unscale_and_clip_factor(double scaled_norm, double loss_scale, double max_norm) {
  ZT_CHECK(loss_scale > 0, "loss scale must be positive, got ", loss_scale);
  double combined = loss_scale;
  if (max_norm > 0) {
    // scaled_norm is the norm of loss_scale * g; the clip ratio is taken on the unscaled norm.
    const double clip = (scaled_norm / loss_scale + kClipNormEpsilon) / max_norm;
    if (clip > 1) combined = clip * loss_scale;
  }
  return 1.0 / combined;
}

}  // namespace zt::optim
