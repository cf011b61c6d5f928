// The parts of AdamW both backends share: the per-step scalars and the check of the ranges an update
// takes (optim/cpu/adamw.cpp, optim/cuda/adamw.cu).
#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/check.h"

namespace zt::optim {

AdamWStepScalars adamw_step_scalars(const AdamWHyper& h, double lr, int64_t t) {
  ZT_CHECK(t >= 1, "AdamW step count must be >= 1 when updating, got ", t);
  // Everything below is computed in double, as Python does, then rounded once where torch hands a Python
  // float to a float32 kernel.
  const double step = static_cast<double>(t);
  const double bias_correction1 = 1.0 - std::pow(h.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(h.beta2, step);
  AdamWStepScalars s{};
  s.decay_factor = static_cast<float>(1.0 - lr * h.weight_decay);
  s.m_weight = static_cast<float>(1.0 - h.beta1);
  s.m_weight_is_small = std::abs(s.m_weight) < 0.5f;  // torch's is_lerp_weight_small, on the float weight
  s.beta2 = static_cast<float>(h.beta2);
  s.v_weight = static_cast<float>(1.0 - h.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));  // torch: bc2 ** 0.5
  s.eps = static_cast<float>(h.eps);
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  return s;
}

void check_adamw_ranges(std::span<const TensorRange> ranges, int64_t size, const char* op) {
  std::vector<TensorRange> sorted(ranges.begin(), ranges.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorRange& a, const TensorRange& b) { return a.offset < b.offset; });
  int64_t end_of_previous = 0;
  for (const TensorRange& r : sorted) {
    ZT_CHECK(r.offset >= 0 && r.numel >= 0 && r.offset + r.numel <= size, op, ": range [", r.offset, ", ",
             r.offset + r.numel, ") lies outside buffers of ", size, " elements");
    ZT_CHECK(r.offset >= end_of_previous, op, ": ranges overlap at element ", r.offset);
    end_of_previous = r.offset + r.numel;
  }
}

}  // namespace zt::optim
