// The encoder's measured cost (app/plan/cost_model.h: fit_layer_cost, MeasuredLayerCost): the fit recovers
// the costs timings were made from and refuses timings that do not determine it; the machine-figures file
// keeps them (all the layer keys or none; an earlier calibration's refused with what to do).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/plan/calibrate.h"
#include "app/plan/cost_model.h"
#include "runtime/check.h"
#include "tests/app/h100_calibrations.h"
#include "tests/app/synthetic_layer_cost.h"
#include "tests/support/error_matchers.h"

namespace zt::plan {
namespace {

TEST(LayerCostFit, RecoversTheCoefficientsFromTimings) {
  const MeasuredLayerCost want = synthetic_layer_cost();
  const std::vector<LayerTiming> timings = synthetic_timings(want, 24, 0.0);
  const MeasuredLayerCost got = fit_layer_cost(timings, 24, layer_score_lengths());
  ASSERT_EQ(got.score_lengths, want.score_lengths);
  // Each coefficient within 1e-6 of the one the timings were made from.
  auto expect_terms = [](const LayerTerms& got_terms, const LayerTerms& want_terms, const char* which) {
    EXPECT_NEAR(got_terms.fixed_us, want_terms.fixed_us, 1e-6 * want_terms.fixed_us) << which;
    EXPECT_NEAR(got_terms.token_ns, want_terms.token_ns, 1e-6 * want_terms.token_ns) << which;
    ASSERT_EQ(got_terms.score_ps.size(), want_terms.score_ps.size()) << which;
    for (size_t i = 0; i < want_terms.score_ps.size(); ++i)
      EXPECT_NEAR(got_terms.score_ps[i], want_terms.score_ps[i], 1e-6 * want_terms.score_ps[i]) << which << i;
  };
  expect_terms(got.pair, want.pair, "forward + backward");
  expect_terms(got.forward, want.forward, "forward");
  expect_terms(got.recompute, want.recompute, "recompute");
  EXPECT_NEAR(got.head_fixed_us, want.head_fixed_us, 1e-6 * want.head_fixed_us);
  EXPECT_NEAR(got.head_token_ns, want.head_token_ns, 1e-6 * want.head_token_ns);

  // With 1 % timing noise the fitted costs still predict every timed layer within a few %.
  const MeasuredLayerCost noisy =
      fit_layer_cost(synthetic_timings(want, 24, 0.01), 24, layer_score_lengths());
  for (const LayerTimingPoint& p : layer_timing_points()) {
    const double b = static_cast<double>(p.batch), l = static_cast<double>(p.length);
    EXPECT_NEAR(noisy.layer_us(b, l, 24) / want.layer_us(b, l, 24), 1.0, 0.05)
        << p.batch << " x " << p.length;
    EXPECT_NEAR(noisy.layer_forward_us(b, l, 24) / want.layer_forward_us(b, l, 24), 1.0, 0.1)
        << p.batch << " x " << p.length;
  }
}

// An H100's timings (session 21) are not exactly linear in the tokens: fitted by absolute error, the
// 16k-token points pulled the intercept up and the 4k ones came out 3.6-5 % long; by relative error (the
// fit's rule) every timed layer is within 2.5 % of its fit.
TEST(LayerCostFit, FitsMeasuredTimingsByRelativeError) {
  const std::vector<LayerTiming> timings = test::h100_session21_timings();
  const MeasuredLayerCost got = fit_layer_cost(timings, 24, layer_score_lengths());
  for (size_t i = 0; i < timings.size(); ++i) {
    const LayerTiming& shallow = timings[i];
    if (shallow.layers != 2) continue;
    const auto deep = std::find_if(timings.begin(), timings.end(), [&](const LayerTiming& t) {
      return t.layers == 4 && t.batch == shallow.batch && t.length == shallow.length;
    });
    ASSERT_NE(deep, timings.end());
    const double measured_us = (deep->pair_ms - shallow.pair_ms) * 1e3 / 2;
    const auto b = static_cast<double>(shallow.batch), l = static_cast<double>(shallow.length);
    EXPECT_NEAR(got.layer_us(b, l, 24) / measured_us, 1.0, 0.025) << shallow.batch << " x " << shallow.length;
  }
}

// The fit takes a layer as the difference over however many layers were added: timings at 2 and 24 layers
// give back the same costs as at layer_timing_depths()'s 2 and 4.
TEST(LayerCostFit, AnyTwoDepthsFitTheSameCosts) {
  EXPECT_EQ(layer_timing_depths(), (std::vector<int64_t>{2, 4}));
  const MeasuredLayerCost want = synthetic_layer_cost();
  const MeasuredLayerCost got =
      fit_layer_cost(synthetic_timings(want, 24, 0.0, {2, 24}), 24, layer_score_lengths());
  for (const LayerTimingPoint& p : layer_timing_points()) {
    const double b = static_cast<double>(p.batch), l = static_cast<double>(p.length);
    EXPECT_NEAR(got.layer_us(b, l, 24), want.layer_us(b, l, 24), 1e-6 * want.layer_us(b, l, 24));
    EXPECT_NEAR(got.layer_recompute_us(b, l, 24), want.layer_recompute_us(b, l, 24),
                1e-6 * want.layer_recompute_us(b, l, 24));
    EXPECT_NEAR(got.head_us(b, l), want.head_us(b, l), 1e-6 * want.head_us(b, l));
  }
}

// Timings without their checkpointed pairs (recorded before it was timed): checkpointing costs the forward
// once more. Some pairs but not all: refused.
TEST(LayerCostFit, WithoutCheckpointedPairsTheRecomputeIsTheForward) {
  const MeasuredLayerCost want = synthetic_layer_cost();
  std::vector<LayerTiming> timings = synthetic_timings(want, 24, 0.0);
  std::vector<LayerTiming> some = timings;
  some.front().checkpointed_pair_ms = 0;
  EXPECT_THROW(fit_layer_cost(some, 24, layer_score_lengths()), Error);
  for (LayerTiming& t : timings) t.checkpointed_pair_ms = 0;
  const MeasuredLayerCost got = fit_layer_cost(timings, 24, layer_score_lengths());
  EXPECT_EQ(got.recompute, got.forward);  // fixed, per token and per score, exactly
  // A checkpointed pair no slower than the plain one (noise) is refused as the forward's is.
  std::vector<LayerTiming> fast = synthetic_timings(want, 24, 0.0);
  for (LayerTiming& t : fast)
    if (t.layers == 4) t.checkpointed_pair_ms = t.pair_ms;
  EXPECT_THROW(fit_layer_cost(fast, 24, layer_score_lengths()), Error);
}

TEST(LayerCostFit, RefusesTimingsThatDoNotDetermineIt) {
  const MeasuredLayerCost want = synthetic_layer_cost();
  std::vector<LayerTiming> timings = synthetic_timings(want, 24, 0.0);
  // Without the lengths below the first score length the per-token and per-score costs are not separable.
  std::vector<LayerTiming> no_short;
  for (const LayerTiming& t : timings)
    if (t.length >= 128) no_short.push_back(t);
  EXPECT_THROW(fit_layer_cost(no_short, 24, layer_score_lengths()), Error);
  // A point lacking its 2-layer timing; a 3-layer timing; a non-positive time.
  std::vector<LayerTiming> missing(timings.begin(), timings.end() - 1);
  EXPECT_THROW(fit_layer_cost(missing, 24, layer_score_lengths()), Error);
  std::vector<LayerTiming> three = timings;
  three.back().layers = 3;
  EXPECT_THROW(fit_layer_cost(three, 24, layer_score_lengths()), Error);
  std::vector<LayerTiming> zero = timings;
  zero.front().pair_ms = 0;
  EXPECT_THROW(fit_layer_cost(zero, 24, layer_score_lengths()), Error);
  // A layer whose forward alone is not shorter than its forward + backward (the 2-layer forward inflated).
  std::vector<LayerTiming> slow_forward = timings;
  for (LayerTiming& t : slow_forward)
    if (t.layers == 2 && t.batch == slow_forward.front().batch && t.length == slow_forward.front().length)
      t.forward_ms = t.pair_ms;
  EXPECT_THROW(fit_layer_cost(slow_forward, 24, layer_score_lengths()), Error);
  EXPECT_THROW(fit_layer_cost(timings, 24, {512, 128}), Error);
}

TEST(LayerCostFit, ScoreCostInterpolatesInLogLength) {
  const MeasuredLayerCost c = synthetic_layer_cost();
  EXPECT_EQ(c.score_ps_at(c.pair, 64), 50);    // below the first: its value
  EXPECT_EQ(c.score_ps_at(c.pair, 4096), 48);  // past the last: its value
  EXPECT_NEAR(c.score_ps_at(c.pair, 256), 50 + 0.5 * (39 - 50),
              1e-9);  // halfway between 128 and 512 in log L
  EXPECT_NEAR(c.score_ps_at(c.pair, 512), 39, 1e-12);
}

TEST(MachineFigures, MeasuredLayerCostRoundTripsAndPartialSetsAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / "zt_machine_figures_layer_test";
  std::filesystem::create_directories(dir);
  MachineFigures m;
  m.layer = synthetic_layer_cost();
  m.save((dir / "m.json").string());
  const MachineFigures back = MachineFigures::load((dir / "m.json").string());
  EXPECT_TRUE(back.layer == m.layer);  // every coefficient, score table and the model timed, exactly
  // Figures without them (old files) load with none: the formulas.
  MachineFigures{}.save((dir / "old.json").string());
  EXPECT_FALSE(MachineFigures::load((dir / "old.json").string()).layer.present());

  auto write = [&](const char* name, const std::string& text) {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  };
  const std::string rest =
      R"("layer_fixed_us": 1, "layer_token_ns": 2, "layer_forward_fixed_us": 0.5, "layer_forward_token_ns": 1, )"
      R"("layer_forward_score_ps": [[128, 2]], "layer_recompute_fixed_us": 0.5, "layer_recompute_token_ns": 1, )"
      R"("layer_recompute_score_ps": [[128, 2]], "head_fixed_us": 0, "head_token_ns": 1)";
  EXPECT_NO_THROW(MachineFigures::load(write("ok.json", "{" + rest + R"(, "layer_score_ps": [[128, 5]]})")));
  // Without layer_model the costs load, for no model (predict_step keeps the formulas and says so).
  EXPECT_FALSE(MachineFigures::load((dir / "ok.json").string()).layer.dims.known());
  const std::string dims =
      R"("layer_model": {"hidden_size": 32, "intermediate_size": 128, "num_attention_heads": 2, )"
      R"("relative_rows": 32, "attention_kernel": "stored"})";
  const MachineFigures named = MachineFigures::load(
      write("named.json", "{" + rest + R"(, "layer_score_ps": [[128, 5]], )" + dims + "}"));
  EXPECT_EQ(
      named.layer.dims,
      (LayerDims{
          .hidden = 32, .intermediate = 128, .heads = 2, .relative_rows = 32, .attention_kernel = "stored"}));
  EXPECT_THROW(MachineFigures::load(write("model_alone.json", "{" + dims + "}")), Error);
  EXPECT_THROW(MachineFigures::load(write("model_bad.json", "{" + rest +
                                                                R"(, "layer_score_ps": [[128, 5]], )"
                                                                R"("layer_model": {"hidden_size": 32}})")),
               Error);
  EXPECT_THROW(MachineFigures::load(write("partial.json", R"({"layer_fixed_us": 1})")), Error);
  EXPECT_THROW(MachineFigures::load(
                   write("descending.json", "{" + rest + R"(, "layer_score_ps": [[512, 5], [128, 5]]})")),
               Error);
  EXPECT_THROW(MachineFigures::load(write("row.json", "{" + rest + R"(, "layer_score_ps": [[128]]})")),
               Error);
  EXPECT_THROW(MachineFigures::load(write("zero.json", "{" + rest + R"(, "layer_score_ps": [[128, 0]]})")),
               Error);
  EXPECT_THROW(MachineFigures::load(write("empty.json", "{" + rest + R"(, "layer_score_ps": []})")), Error);
  // The forward's table at other lengths than the forward + backward's.
  EXPECT_THROW(MachineFigures::load(write("forward_lengths.json",
                                          "{" + rest + R"(, "layer_score_ps": [[128, 5], [512, 4]]})")),
               Error);
  // An earlier calibration's single forward share: refused with what to do.
  EXPECT_ERROR_HAS(
      MachineFigures::load(write(
          "share.json",
          R"({"layer_fixed_us": 1, "layer_token_ns": 2, "layer_forward_share": 0.3, "head_fixed_us": 0, )"
          R"("head_token_ns": 1, "layer_score_ps": [[128, 5]]})")),
      "run train_mrpc --calibrate again");
  // An earlier calibration without checkpointing's recompute: refused with what to do.
  EXPECT_ERROR_HAS(
      MachineFigures::load(
          write("no_recompute.json",
                R"({"layer_fixed_us": 1, "layer_token_ns": 2, "layer_forward_fixed_us": 0.5, )"
                R"("layer_forward_token_ns": 1, "layer_forward_score_ps": [[128, 2]], "head_fixed_us": 0, )"
                R"("head_token_ns": 1, "layer_score_ps": [[128, 5]]})")),
      "run train_mrpc --calibrate again");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt::plan
