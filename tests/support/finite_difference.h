// Finite-difference gradient checks for hand-written backwards.
//
// For a scalar loss L(x) (usually sum(y * r) with a fixed random r, accumulated in double), the central
// difference  (L(x + h e_i) - L(x - h e_i)) / 2h  must match the analytic dL/dx_i within atol + rtol*|g|.
// Ops run in f32, so h is large (1e-2) and tolerances are loose; the check still catches wrong formulas,
// which are off by O(1), not O(h^2).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace zt::test {

struct FdOptions {
  double step = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  int64_t max_elements = 256;  // elements checked, spread evenly over the buffer (0 = all)
};

// Perturbs x in place (restoring it) and compares numeric against analytic gradients.
::testing::AssertionResult check_gradient(const std::string& what, std::span<float> x,
                                          std::span<const float> analytic,
                                          const std::function<double()>& loss, FdOptions options = {});

// Deterministic pseudo-random values in [lo, hi) for test inputs (a fixed seed per call site).
std::vector<float> random_uniform(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// sum_i a[i] * b[i] in double: the usual scalar "loss" that turns an output into a gradient seed.
double dot(std::span<const float> a, std::span<const float> b);

}  // namespace zt::test
