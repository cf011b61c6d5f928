// Overflow detection for loss scaling (declared in optim/loss_scaler.h).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>

#include "optim/loss_scaler.h"
#include "runtime/parallel_blocks.h"

namespace zt::optim {

namespace {

// An IEEE value is inf or NaN exactly when all its exponent bits are set.
constexpr uint32_t kF32ExponentBits = 0x7F800000u;
constexpr uint16_t kBf16ExponentBits = 0x7F80u;
constexpr uint16_t kF16ExponentBits = 0x7C00u;

bool block_has_inf_or_nan(const float* x, int64_t n) {
  uint32_t any = 0;  // OR of "exponent all ones" over the block: no early exit, so the loop vectorises
  for (int64_t i = 0; i < n; ++i) {
    any |= static_cast<uint32_t>((std::bit_cast<uint32_t>(x[i]) & kF32ExponentBits) == kF32ExponentBits);
  }
  return any != 0;
}

template <typename Half>
bool half_has_inf_or_nan(std::span<const Half> values, uint16_t exponent_bits) {
  uint32_t any = 0;
  for (const Half& h : values) any |= static_cast<uint32_t>((h.bits & exponent_bits) == exponent_bits);
  return any != 0;
}

}  // namespace

bool has_inf_or_nan(std::span<const float> values, int num_threads) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::atomic<bool> found{false};
  zt::detail::run_element_blocks_in_parallel(n, num_threads, [&](int64_t, int64_t begin, int64_t end) {
    if (found.load(std::memory_order_relaxed)) return;  // one bad value is enough
    if (block_has_inf_or_nan(values.data() + begin, end - begin)) {
      found.store(true, std::memory_order_relaxed);
    }
  });
  return found.load();
}

bool has_inf_or_nan(std::span<const bf16> values) {
  return half_has_inf_or_nan(values, kBf16ExponentBits);
}

bool has_inf_or_nan(std::span<const f16> values) {
  return half_has_inf_or_nan(values, kF16ExponentBits);
}

NonFiniteReport find_non_finite(std::span<const float> values) {
  NonFiniteReport report;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (std::isfinite(v)) continue;
    if (std::isnan(v)) {
      ++report.nan_count;
    } else {
      ++report.inf_count;
    }
    if (report.first_index < 0) report.first_index = static_cast<int64_t>(i);
  }
  return report;
}

}  // namespace zt::optim
