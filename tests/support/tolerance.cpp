#include "tests/support/tolerance.h"

#include <cmath>
#include <sstream>

namespace zt::test {

Tolerance tolerance_for(DType computed_in) {
  switch (computed_in) {
    case DType::f32:
      return {1e-5, 1e-4};
    case DType::bf16:
      return {1e-2, 2e-2};  // 8 mantissa bits: 2^-8 ~ 4e-3 per rounding, a few roundings deep
    case DType::f16:
      return {2e-3, 5e-3};  // 11 mantissa bits
    default:
      return {0, 0};
  }
}

Comparison compare(std::span<const float> got, std::span<const float> ref, Tolerance tol) {
  Comparison c;
  c.count = static_cast<int64_t>(ref.size());
  for (size_t i = 0; i < ref.size() && i < got.size(); ++i) {
    double g = got[i], r = ref[i];
    double err = std::abs(g - r);
    bool bad = !(err <= tol.atol + tol.rtol * std::abs(r));  // NaN fails
    if (bad) {
      if (c.first_bad < 0) c.first_bad = static_cast<int64_t>(i);
      ++c.mismatches;
    }
    if (!std::isnan(err) && err > c.max_abs_err) {
      c.max_abs_err = err;
      c.worst = static_cast<int64_t>(i);
    }
    double rel = err / std::max(std::abs(r), 1e-30);
    if (rel > c.max_rel_err) c.max_rel_err = rel;
  }
  return c;
}

::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const float> ref, Tolerance tol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != reference size " << ref.size();
  }
  Comparison c = compare(got, ref, tol);
  if (c.mismatches == 0) return ::testing::AssertionSuccess();
  std::ostringstream out;
  out << what << ": " << c.mismatches << " of " << c.count << " elements outside atol=" << tol.atol
      << " rtol=" << tol.rtol << "; first at [" << c.first_bad << "] got " << got[c.first_bad] << " ref "
      << ref[c.first_bad] << "; max abs err " << c.max_abs_err << " at [" << c.worst << "]";
  return ::testing::AssertionFailure() << out.str();
}

}  // namespace zt::test
