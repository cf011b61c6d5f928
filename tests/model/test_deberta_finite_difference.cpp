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
#include "tests/support/finite_difference.h"

namespace zt {
namespace {

DebertaConfig tiny_config(double dropout) {
  DebertaConfig c = deberta_small_cpu_config();
  c.vocab_size = 50;
  c.hidden_size = 12;
  c.num_attention_heads = 3;
  c.attention_head_size = 4;
  c.intermediate_size = 20;
  c.num_hidden_layers = 2;
  c.position_buckets = 4;  // midpoint 2 < L: the log-bucket branch runs
  c.max_relative_positions = -1;
  c.max_position_embeddings = 16;
  c.pooler_hidden_size = 12;
  c.hidden_dropout_prob = dropout;
  c.attention_probs_dropout_prob = dropout;
  c.cls_dropout = dropout;
  c.num_labels = 3;
  return c;
}

TEST(DebertaFiniteDifference, EveryParameterGradientWithDropoutAndPadding) {
  const DebertaConfig config = tiny_config(0.2);
  ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  Arena grads("grads", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true});
  for (const ParameterInfo& p : table.entries()) {
    Tensor t = params.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
  const int64_t B = 3, L = 9;
  std::vector<int64_t> ids = {1, 7,  9, 0, 12, 2, 30, 31, 2,  // id 0 inside a real row
                              1, 4,  4, 2, 19, 2, 0,  0,  0,  // padded
                              1, 45, 2, 8, 2,  0, 0,  0,  0};
  std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                               1, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0};
  std::vector<int64_t> labels = {2, -100, 1};
  DebertaBatch batch{Tensor(ids.data(), {B, L}, DType::i64), Tensor(mask.data(), {B, L}, DType::i64),
                     Tensor(labels.data(), {B}, DType::i64)};
  DebertaForSequenceClassification model(config, B, L);
  const DropoutSchedule dropout{.training = true, .seed = 77, .step = 5};
  model.forward(params, batch, dropout);
  model.backward(params, grads);

  auto loss = [&] { return static_cast<double>(model.forward(params, batch, dropout)); };
  int checked = 0;
  for (const ParameterInfo& p : table.entries()) {
    Tensor w = params.tensor(p.name), g = grads.tensor(p.name);
    test::FdOptions options;
    options.step = 1e-2;
    options.max_elements = 24;
    options.atol = 5e-4;
    options.rtol = 5e-2;
    EXPECT_TRUE(test::check_gradient(p.name, std::span<float>(w.data_as<float>(), w.numel()),
                                     std::span<const float>(g.data_as<float>(), g.numel()), loss, options));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(table.size()));
}

}  // namespace
}  // namespace zt
