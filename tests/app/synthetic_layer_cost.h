// Measured layer costs and timings made from them, for the cost model's and the layer-cost fit's tests
// (tests/app/test_plan_cost_model.cpp, test_plan_layer_cost.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "app/plan/calibrate.h"
#include "app/plan/cost_model.h"
#include "model/config.h"

namespace zt::plan {

// Measured layer costs as a calibration would fit them (per-score cost by length: stored kernel at 128-1024,
// flash at 2048, unlike each other).
inline MeasuredLayerCost synthetic_layer_cost() {
  MeasuredLayerCost c;
  c.dims = LayerDims::of(deberta_v2_xlarge_config());
  c.score_lengths = {128, 512, 1024, 2048};
  c.pair = {.fixed_us = 180, .token_ns = 410, .score_ps = {50, 39, 37, 48}};
  c.forward = {.fixed_us = 60, .token_ns = 100, .score_ps = {18, 15, 13, 8}};
  // Checkpointing's cost: a forward and more (its own fit, unlike the forward's).
  c.recompute = {.fixed_us = 75, .token_ns = 125, .score_ps = {21, 17, 14, 9}};
  c.head_fixed_us = 300;
  c.head_token_ns = 20;
  return c;
}

// Timings the way time_encoder_layers reports them, made from `c` (a model at each of `depths` = the head +
// that many layers; the forward the layers' forward plus a third of the head; checkpointed, the pair plus
// each layer's recompute), with a relative `noise` alternating in sign.
inline std::vector<LayerTiming> synthetic_timings(
    const MeasuredLayerCost& c, int64_t heads, double noise,
    const std::vector<int64_t>& depths = layer_timing_depths()) {
  std::vector<LayerTiming> out;
  int sign = 1;
  for (const int64_t layers : depths)
    for (const LayerTimingPoint& p : layer_timing_points()) {
      const double b = static_cast<double>(p.batch), l = static_cast<double>(p.length);
      const double layer_us = c.layer_us(b, l, static_cast<double>(heads)), head_us = c.head_us(b, l);
      const double pair_us = head_us + static_cast<double>(layers) * layer_us;
      const double forward_us =
          head_us / 3 + static_cast<double>(layers) * c.layer_forward_us(b, l, static_cast<double>(heads));
      const double checkpointed_us =
          pair_us + static_cast<double>(layers) * c.layer_recompute_us(b, l, static_cast<double>(heads));
      sign = -sign;
      out.push_back({.layers = layers,
                     .batch = p.batch,
                     .length = p.length,
                     .pair_ms = pair_us * 1e-3 * (1 + sign * noise),
                     .forward_ms = forward_us * 1e-3 * (1 + sign * noise),
                     .checkpointed_pair_ms = checkpointed_us * 1e-3 * (1 + sign * noise)});
    }
  return out;
}

}  // namespace zt::plan
