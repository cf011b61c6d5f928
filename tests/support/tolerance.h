// One tolerance policy per dtype, elementwise: |got - ref| <= atol + rtol * |ref|.
// A failure reports how many elements miss, the first one, and the largest error, never a norm.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>

#include "runtime/dtype.h"

namespace zt::test {

struct Tolerance {
  double atol;
  double rtol;
};

// The project's policy: f32 results vs an f32 reference; 16-bit results vs an f32 reference.
Tolerance tolerance_for(DType computed_in);

struct Comparison {
  int64_t count = 0;       // elements compared
  int64_t mismatches = 0;  // elements outside tolerance (NaN counts as a mismatch)
  int64_t first_bad = -1;  // index of the first mismatch
  int64_t worst = -1;      // index of the largest |got - ref|
  double max_abs_err = 0;
  double max_rel_err = 0;  // |got-ref| / max(|ref|, tiny), over all elements
};

Comparison compare(std::span<const float> got, std::span<const float> ref, Tolerance tol);

// gtest assertion: EXPECT_TRUE(all_close("logits", got, ref, tol));
::testing::AssertionResult all_close(const std::string& what, std::span<const float> got,
                                     std::span<const float> ref, Tolerance tol);

}  // namespace zt::test
