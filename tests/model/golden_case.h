// Golden-data cases shared by the CPU and GPU whole-model tests: a fixture from
// tools/golden/make_model_fixtures.py, the model built from its config with the golden init, and elementwise
// comparisons of logits, loss, hidden states and every gradient (full tensors, or sampled elements plus exact
// sum and L2 norm for large ones).
#pragma once

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
#include "runtime/device.h"
#include "tests/support/fixtures.h"
#include "tests/support/tolerance.h"

namespace zt::golden {

using test::Fixture;

// Everything one golden case needs: the fixture, the model built from its config, parameters filled with the
// golden init, zeroed gradients, and the fixture's batch.
struct GoldenCase {
  Fixture fixture;
  DebertaConfig config;
  ParameterTable table;
  MemoryKind kind;
  Arena params;
  Arena grads;
  std::vector<int64_t> ids, mask, labels;
  std::vector<float> targets;  // the labels of a regression head (f32)
  int64_t batch, seq;
  Arena inputs_arena;  // the batch, where the model runs
  DebertaForSequenceClassification model;
  float loss = 0;

  static ArenaLayout inputs_layout(int64_t b, int64_t l, bool regression) {
    return ArenaLayout({{"ids", {b, l}, DType::i64},
                        {"mask", {b, l}, DType::i64},
                        {"labels", {b}, regression ? DType::f32 : DType::i64}});
  }

  // The fixture's config with the attention core to run (a training-time choice config.json never holds).
  static DebertaConfig config_with(const std::string& config_json, DebertaConfig::AttentionKernel kernel) {
    DebertaConfig c = parse_deberta_config(config_json);
    c.attention_kernel = kernel;
    return c;
  }

  // `compute`: the model's storage dtype; 16-bit parameters are the golden init rounded to nearest even.
  explicit GoldenCase(const std::string& file, DeviceKind device = DeviceKind::cpu,
                      DType compute = DType::f32,
                      DebertaConfig::AttentionKernel kernel = DebertaConfig::AttentionKernel::automatic)
      : fixture(file),
        config(config_with(fixture.attr_str("config_json"), kernel)),
        table(config),
        kind(device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host),
        params("params", table.layout(compute), {.kind = kind}),
        grads("grads", table.layout(DType::f32), {.kind = kind, .zero_fill = true}),
        ids(fixture.read_i64("input_ids")),
        mask(fixture.read_i64("attention_mask")),
        labels(config.is_regression() ? std::vector<int64_t>{} : fixture.read_i64("labels")),
        targets(config.is_regression() ? fixture.read_f32("labels") : std::vector<float>{}),
        batch(fixture.shape("input_ids")[0]),
        seq(fixture.shape("input_ids")[1]),
        inputs_arena("inputs", inputs_layout(batch, seq, config.is_regression()), {.kind = kind}),
        model(config, batch, seq, device, compute) {
    for (const ParameterInfo& p : table.entries()) {
      std::vector<float> host(static_cast<size_t>(p.numel()));
      golden_init_fill(p.name, p.kind, host);
      if (compute == DType::f32) {
        copy_tensor(Tensor(host.data(), p.shape, DType::f32), params.tensor(p.name));
        continue;
      }
      std::vector<uint16_t> bits(host.size());
      for (size_t i = 0; i < host.size(); ++i) {
        bits[i] = compute == DType::bf16 ? float_to_bf16(host[i]).bits : float_to_f16(host[i]).bits;
      }
      copy_tensor(Tensor(bits.data(), p.shape, compute), params.tensor(p.name));
    }
    copy_tensor(Tensor(ids.data(), {batch, seq}, DType::i64), inputs_arena.tensor("ids"));
    copy_tensor(Tensor(mask.data(), {batch, seq}, DType::i64), inputs_arena.tensor("mask"));
    if (config.is_regression()) {
      copy_tensor(Tensor(targets.data(), {batch}, DType::f32), inputs_arena.tensor("labels"));
    } else {
      copy_tensor(Tensor(labels.data(), {batch}, DType::i64), inputs_arena.tensor("labels"));
    }
  }

  DebertaBatch inputs() {
    return {inputs_arena.tensor("ids"), inputs_arena.tensor("mask"), inputs_arena.tensor("labels")};
  }

  // The factor the fixture's gradients carry (of grad_scale x loss; 1 where it stores none).
  float grad_scale() const { return fixture.has("grad_scale") ? fixture.read_f32("grad_scale")[0] : 1.0f; }

  void run() {
    // The fixtures are made with every dropout probability 0 in train mode; training=true runs the same path.
    loss = model.forward(params, inputs(), {.training = true, .seed = 1234, .step = 0});
    model.backward(params, grads, grad_scale());
  }
};

// The values of an f32 tensor wherever it lives.
inline std::vector<float> host_values(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  copy_tensor(t, Tensor(out.data(), t.shape(), DType::f32));
  return out;
}

// The parameter family a tensor belongs to, for the error report ("attention.self.query_proj.weight" etc.).
inline std::string family_of(const std::string& name) {
  const std::string layer = "deberta.encoder.layer.";
  if (name.rfind(layer, 0) == 0) return name.substr(name.find('.', layer.size()) + 1);
  return name;
}

// Largest |got - ref| and |got - ref| / max|ref| over the reference elements (full or sampled).
inline std::pair<double, double> max_errors(const Fixture& f, const std::string& full,
                                            const std::string& sample, std::span<const float> got) {
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
inline void expect_matches(const Fixture& f, const std::string& full, const std::string& sample,
                           const std::string& stats, const Tensor& got, test::Tolerance tol) {
  const std::vector<float> g = host_values(got);
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

// Runs forward + backward and compares logits, loss, every hidden state and every gradient with the fixture
// (f32 tolerance), then prints the worst error per gradient family and the step time.
inline void check_step_against_fixture(GoldenCase& c, const std::string& label) {
  const auto start = std::chrono::steady_clock::now();
  c.run();
  const double step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const test::Tolerance tol = test::tolerance_for(DType::f32);
  const Fixture& f = c.fixture;
  EXPECT_TRUE(test::all_close("logits", host_values(c.model.logits()), f.read_f32("logits"), tol));
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
        max_errors(f, "grad/" + p.name, "grad_sample/" + p.name, host_values(c.grads.tensor(p.name)));
    auto& worst = families[family_of(p.name)];
    worst = {std::max(worst.first, abs_err), std::max(worst.second, rel_err)};
  }
  const auto [logit_abs, logit_rel] = max_errors(f, "logits", "", host_values(c.model.logits()));
  std::printf("%s: forward+backward %.1f ms; logits max abs err %.3g (%.3g of max |logit|)\n", label.c_str(),
              step_ms, logit_abs, logit_rel);
  for (const auto& [family, err] : families) {
    std::printf("  grad %-45s max abs err %.3g  (%.3g of max |grad|)\n", family.c_str(), err.first,
                err.second);
  }
}

}  // namespace zt::golden
