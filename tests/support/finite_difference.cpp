#include "tests/support/finite_difference.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

namespace zt::test {

::testing::AssertionResult check_gradient(const std::string& what, std::span<float> x,
                                          std::span<const float> analytic,
                                          const std::function<double()>& loss, FdOptions options) {
  if (x.size() != analytic.size()) {
    return ::testing::AssertionFailure()
           << what << ": gradient size " << analytic.size() << " != input size " << x.size();
  }
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t count = options.max_elements > 0 ? std::min(n, options.max_elements) : n;
  int64_t bad = 0, first_bad = -1;
  double worst = 0;
  std::ostringstream first;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = count == n ? k : k * n / count;
    const float saved = x[i];
    x[i] = saved + static_cast<float>(options.step);
    const double up = loss();
    x[i] = saved - static_cast<float>(options.step);
    const double down = loss();
    x[i] = saved;
    // The perturbation actually applied is what f32 could represent, not options.step.
    const double h = (static_cast<double>(saved + static_cast<float>(options.step)) -
                      static_cast<double>(saved - static_cast<float>(options.step)));
    const double numeric = (up - down) / h;
    const double err = std::abs(numeric - analytic[i]);
    worst = std::max(worst, err);
    if (!(err <= options.atol + options.rtol * std::abs(numeric))) {
      if (first_bad < 0) {
        first_bad = i;
        first << "numeric " << numeric << " analytic " << analytic[i];
      }
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << count
                                       << " checked elements disagree with finite differences; first at ["
                                       << first_bad << "] " << first.str() << "; max abs err " << worst;
}

std::vector<float> random_uniform(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& v : out) v = dist(gen);
  return out;
}

double dot(std::span<const float> a, std::span<const float> b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace zt::test
