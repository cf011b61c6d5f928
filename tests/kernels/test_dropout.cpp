// Dropout: the mask follows the Philox rule element by element, p = 0 is an exact copy, the kept fraction is
// 1 - p, forward and backward share the mask, and different sites draw different masks.
#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/philox.h"
#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;

TEST(Dropout, ForwardFollowsThePhiloxRuleElementwise) {
  const DropoutSite site{.p = 0.3f, .seed = 1234, .site_id = dropout_site_id(7, 3, 2)};
  const int n = 5 * 7;  // not a multiple of the 4-wide Philox block
  std::vector<float> x = test::random_uniform(n, 31), y(n), y_ref(n);
  dropout_forward(f32_view(x, {5, 7}), f32_view(y, {5, 7}), site);
  for (int i = 0; i < n; ++i) {
    y_ref[i] =
        uniform(site.seed, site.site_id, static_cast<uint64_t>(i)) >= site.p ? x[i] / (1.0f - site.p) : 0.0f;
  }
  EXPECT_TRUE(test::all_close("y", y, y_ref, {0, 1e-6}));
}

TEST(Dropout, ZeroProbabilityIsAnExactCopy) {
  std::vector<float> x = test::random_uniform(13, 32), y(13, -1.0f), dx(13, -1.0f);
  const DropoutSite site{.p = 0.0f, .seed = 1, .site_id = 2};
  dropout_forward(f32_view(x, {13}), f32_view(y, {13}), site);
  dropout_backward(f32_view(x, {13}), f32_view(dx, {13}), site);
  for (int i = 0; i < 13; ++i) {
    EXPECT_EQ(y[i], x[i]);
    EXPECT_EQ(dx[i], x[i]);
  }
}

TEST(Dropout, KeptFractionIsOneMinusP) {
  const int n = 200003;
  std::vector<float> x(n, 1.0f), y(n);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    dropout_forward(f32_view(x, {n}), f32_view(y, {n}), {.p = p, .seed = 99, .site_id = 5});
    int kept = 0;
    for (float v : y) {
      if (v != 0.0f) {
        ++kept;
        EXPECT_FLOAT_EQ(v, 1.0f / (1.0f - p));
      }
    }
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(kept, n * (1.0 - p), 5 * sigma) << "p = " << p;
  }
}

TEST(Dropout, BackwardRegeneratesTheForwardMask) {
  const DropoutSite site{.p = 0.25f, .seed = 77, .site_id = 123456789};
  const int n = 1001;
  std::vector<float> x(n, 1.0f), y(n), dy = test::random_uniform(n, 33, 0.5f, 1.0f), dx(n, 42.0f);
  dropout_forward(f32_view(x, {n}), f32_view(y, {n}), site);
  dropout_backward(f32_view(dy, {n}), f32_view(dx, {n}), site);
  int dropped = 0;
  for (int i = 0; i < n; ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
      EXPECT_EQ(dx[i], 0.0f) << i;
    } else {
      EXPECT_FLOAT_EQ(dx[i], dy[i] / (1.0f - site.p)) << i;
    }
  }
  EXPECT_GT(dropped, 0);
}

TEST(Dropout, BackwardMatchesFiniteDifferences) {
  const DropoutSite site{.p = 0.4f, .seed = 3, .site_id = 4};
  std::vector<float> x = test::random_uniform(35, 34), y(35), r = test::random_uniform(35, 35);
  std::vector<float> dx(35);
  dropout_backward(f32_view(r, {5, 7}), f32_view(dx, {5, 7}), site);
  auto loss = [&] {
    dropout_forward(f32_view(x, {5, 7}), f32_view(y, {5, 7}), site);
    return test::dot(y, r);
  };
  EXPECT_TRUE(test::check_gradient("dx", x, dx, loss));
}

TEST(Dropout, DifferentSitesAndSeedsDrawDifferentMasks) {
  const int n = 4096;
  const float p = 0.5f;
  std::vector<float> x(n, 1.0f), a(n), b(n), c(n);
  dropout_forward(f32_view(x, {n}), f32_view(a, {n}),
                  {.p = p, .seed = 1, .site_id = dropout_site_id(0, 0, 0)});
  dropout_forward(f32_view(x, {n}), f32_view(b, {n}),
                  {.p = p, .seed = 1, .site_id = dropout_site_id(0, 0, 1)});
  dropout_forward(f32_view(x, {n}), f32_view(c, {n}),
                  {.p = p, .seed = 2, .site_id = dropout_site_id(0, 0, 0)});
  int site_differs = 0, seed_differs = 0;
  for (int i = 0; i < n; ++i) {
    site_differs += (a[i] == 0.0f) != (b[i] == 0.0f);
    seed_differs += (a[i] == 0.0f) != (c[i] == 0.0f);
  }
  // Independent masks disagree with probability 2p(1-p) = 1/2 per element.
  const double expected = n * 2 * p * (1 - p), sigma = std::sqrt(expected * 0.5);
  EXPECT_NEAR(site_differs, expected, 5 * sigma);
  EXPECT_NEAR(seed_differs, expected, 5 * sigma);
}

TEST(Dropout, SiteIdPacksStepLayerSite) {
  EXPECT_EQ(dropout_site_id(0, 0, 0), 0u);
  EXPECT_NE(dropout_site_id(1, 0, 0), dropout_site_id(0, 1, 0));
  EXPECT_NE(dropout_site_id(0, 1, 0), dropout_site_id(0, 0, 1));
  EXPECT_EQ(dropout_site_id(5, 23, 4), (5ull << 24) | (23ull << 8) | 4ull);
}

TEST(Dropout, RejectsProbabilityOne) {
  std::vector<float> x(4), y(4);
  EXPECT_THROW(dropout_forward(f32_view(x, {4}), f32_view(y, {4}), {.p = 1.0f}), Error);
  EXPECT_THROW(dropout_forward(f32_view(x, {4}), f32_view(y, {4}), {.p = -0.1f}), Error);
}

}  // namespace
}  // namespace zt::kernels
