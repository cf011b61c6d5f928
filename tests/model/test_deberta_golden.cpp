// Whole-model parity with HF transformers: DebertaV2ForSequenceClassification with the deterministic golden
// init (model/golden_init.h), forward + backward on the CPU, against fixtures written by
// tools/golden/make_model_fixtures.py. Logits, loss, every hidden state and EVERY parameter gradient are
// compared elementwise with the f32 tolerance policy (tests/support/tolerance.h); for large tensors the
// fixture holds a fixed sample of elements plus the exact sum and L2 norm.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/deberta.h"
#include "model/golden_init.h"
#include "model/parameters.h"
#include "runtime/arena.h"
#include "tests/support/fixtures.h"
#include "tests/support/tolerance.h"

namespace zt {
namespace {

using test::Fixture;

// Everything one golden case needs: the fixture, the model built from its config, parameters filled with the
// golden init, zeroed gradients, and the fixture's batch.
struct GoldenCase {
  Fixture fixture;
  DebertaConfig config;
  ParameterTable table;
  Arena params;
  Arena grads;
  std::vector<int64_t> ids, mask, labels;
  int64_t batch, seq;
  DebertaForSequenceClassification model;
  float loss = 0;

  explicit GoldenCase(const std::string& file)
      : fixture(file),
        config(parse_deberta_config(fixture.attr_str("config_json"))),
        table(config),
        params("params", table.layout(DType::f32)),
        grads("grads", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true}),
        ids(fixture.read_i64("input_ids")),
        mask(fixture.read_i64("attention_mask")),
        labels(fixture.read_i64("labels")),
        batch(fixture.shape("input_ids")[0]),
        seq(fixture.shape("input_ids")[1]),
        model(config, batch, seq) {
    for (const ParameterInfo& p : table.entries()) {
      Tensor t = params.tensor(p.name);
      golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
    }
  }

  DebertaBatch inputs() {
    return {Tensor(ids.data(), {batch, seq}, DType::i64), Tensor(mask.data(), {batch, seq}, DType::i64),
            Tensor(labels.data(), {batch}, DType::i64)};
  }

  void run() {
    // The fixtures are made with every dropout probability 0 in train mode; training=true runs the same path.
    loss = model.forward(params, inputs(), {.training = true, .seed = 1234, .step = 0});
    model.backward(params, grads);
  }
};

std::span<const float> span_of(const Tensor& t) {
  return {t.data_as<float>(), static_cast<size_t>(t.numel())};
}

// The parameter family a tensor belongs to, for the error report ("attention.self.query_proj.weight" etc.).
std::string family_of(const std::string& name) {
  const std::string layer = "deberta.encoder.layer.";
  if (name.rfind(layer, 0) == 0) return name.substr(name.find('.', layer.size()) + 1);
  return name;
}

// Largest |got - ref| and |got - ref| / max|ref| over the reference elements (full or sampled).
std::pair<double, double> max_errors(const Fixture& f, const std::string& full, const std::string& sample,
                                     std::span<const float> got) {
  std::vector<float> ref;
  std::vector<float> picked;
  if (f.has(full)) {
    ref = f.read_f32(full);
    picked.assign(got.begin(), got.end());
  } else {
    ref = f.read_f32(sample + "/value");
    for (int64_t i : f.read_i64(sample + "/index")) picked.push_back(got[static_cast<size_t>(i)]);
  }
  double abs_err = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    abs_err = std::max(abs_err, static_cast<double>(std::abs(picked[i] - ref[i])));
    scale = std::max(scale, static_cast<double>(std::abs(ref[i])));
  }
  return {abs_err, scale > 0 ? abs_err / scale : 0.0};
}

// Compares a tensor with its fixture entry: the full tensor under `full`, or the sampled elements under
// `sample/{index,value}` plus [sum, L2 norm] under `stats`.
void expect_matches(const Fixture& f, const std::string& full, const std::string& sample,
                    const std::string& stats, const Tensor& got, test::Tolerance tol) {
  std::span<const float> g = span_of(got);
  if (f.has(full)) {
    std::vector<float> ref = f.read_f32(full);
    EXPECT_TRUE(test::all_close(full, g, ref, tol));
    return;
  }
  ASSERT_TRUE(f.has(sample + "/index")) << "fixture has neither " << full << " nor " << sample;
  std::vector<int64_t> index = f.read_i64(sample + "/index");
  std::vector<float> ref = f.read_f32(sample + "/value");
  std::vector<float> picked;
  for (int64_t i : index) picked.push_back(g[static_cast<size_t>(i)]);
  EXPECT_TRUE(test::all_close(sample, picked, ref, tol));
  std::vector<float> sum_norm = f.read_f32(stats);
  double sum = 0, sq = 0;
  for (float v : g) {
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  // Sums over millions of elements cancel: compare them against the scale of the norm, not the sum itself.
  EXPECT_NEAR(sum, sum_norm[0], 1e-4 * sum_norm[1] + 1e-6) << stats << " sum";
  EXPECT_NEAR(std::sqrt(sq), sum_norm[1], 1e-4 * sum_norm[1] + 1e-7) << stats << " norm";
}

class DebertaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(DebertaGolden, InitMatchesFixtureSamples) {
  GoldenCase c(GetParam());
  for (const std::string& name : c.fixture.names("param_sample")) {
    std::vector<int64_t> index = c.fixture.read_i64("param_sample/" + name + "/index");
    std::vector<float> value = c.fixture.read_f32("param_sample/" + name + "/value");
    const float* p = c.params.tensor(name).data_as<float>();
    for (size_t i = 0; i < index.size(); ++i)
      ASSERT_EQ(p[index[i]], value[i]) << name << "[" << index[i] << "]";
  }
}

TEST_P(DebertaGolden, LogitsLossHiddenStatesAndEveryGradient) {
  GoldenCase c(GetParam());
  const auto start = std::chrono::steady_clock::now();
  c.run();
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const test::Tolerance tol = test::tolerance_for(DType::f32);
  const Fixture& f = c.fixture;
  EXPECT_TRUE(test::all_close("logits", span_of(c.model.logits()), f.read_f32("logits"), tol));
  std::vector<float> loss{c.loss};
  EXPECT_TRUE(test::all_close("loss", loss, f.read_f32("loss"), tol));
  for (int k = 0; k <= c.config.num_hidden_layers; ++k) {
    const std::string key = std::to_string(k);
    expect_matches(f, "hidden_states/" + key, "hidden_sample/" + key, "hidden_stats/" + key,
                   c.model.hidden_state(k), tol);
  }
  int compared = 0;
  for (const ParameterInfo& p : c.table.entries()) {
    SCOPED_TRACE(p.name);
    expect_matches(f, "grad/" + p.name, "grad_sample/" + p.name, "grad_stats/" + p.name,
                   c.grads.tensor(p.name), tol);
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(c.table.size()));

  // Report (not asserted beyond the checks above): worst error per gradient family, and the step time.
  std::map<std::string, std::pair<double, double>> families;
  for (const ParameterInfo& p : c.table.entries()) {
    const auto [abs_err, rel_err] =
        max_errors(f, "grad/" + p.name, "grad_sample/" + p.name, span_of(c.grads.tensor(p.name)));
    auto& worst = families[family_of(p.name)];
    worst = {std::max(worst.first, abs_err), std::max(worst.second, rel_err)};
  }
  const auto [logit_abs, logit_rel] = max_errors(f, "logits", "", span_of(c.model.logits()));
  std::printf("%s: forward+backward %.1f ms; logits max abs err %.3g (%.3g of max |logit|)\n", GetParam(),
              step_ms, logit_abs, logit_rel);
  for (const auto& [family, err] : families) {
    std::printf("  grad %-45s max abs err %.3g  (%.3g of max |grad|)\n", family.c_str(), err.first,
                err.second);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DebertaGolden,
                         ::testing::Values("deberta_tiny.h5", "deberta_tiny_padded.h5",
                                           "deberta_xlarge_layout.h5"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

}  // namespace
}  // namespace zt
