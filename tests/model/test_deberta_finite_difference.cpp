// Finite-difference check of the whole model's hand-written backward on a tiny config, with padding, an
// ignored label, the conv layer, log-bucketed positions and every dropout ON (masks are pure functions of
// (seed, step, layer, site), so the perturbed forwards draw the same masks as the analytic one).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/deberta.h"
#include "model/golden_init.h"
#include "model/parameters.h"
#include "runtime/arena.h"
#include "tests/model/tiny_deberta.h"
#include "tests/support/finite_difference.h"

namespace zt {
namespace {

TEST(DebertaFiniteDifference, EveryParameterGradientWithDropoutAndPadding) {
  test::TinyModelSetup s(test::tiny_deberta_config(0.2));
  const DropoutSchedule dropout{.training = true, .seed = 77, .step = 5};
  s.model.forward(s.params, s.batch, dropout);
  s.model.backward(s.params, s.grads);

  auto loss = [&] { return static_cast<double>(s.model.forward(s.params, s.batch, dropout)); };
  int checked = 0;
  for (const ParameterInfo& p : s.table.entries()) {
    Tensor w = s.params.tensor(p.name), g = s.grads.tensor(p.name);
    test::FdOptions options;
    options.step = 1e-2;
    options.max_elements = 24;
    options.atol = 5e-4;
    options.rtol = 5e-2;
    EXPECT_TRUE(test::check_gradient(p.name, std::span<float>(w.data_as<float>(), w.numel()),
                                     std::span<const float>(g.data_as<float>(), g.numel()), loss, options));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(s.table.size()));
}

}  // namespace
}  // namespace zt
