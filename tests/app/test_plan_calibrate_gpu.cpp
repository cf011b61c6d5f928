// The encoder's calibration on a GPU (app/plan/calibrate.h, time_encoder_layers): the model's own forward +
// backward at the xlarge dims at layer_timing_depths() (2 and 4 layers), fitted by fit_layer_cost. The
// timings are ordered as work is (a second layer costs time, the forward is part of the pair, a longer
// sequence at the same tokens costs more: the attention's L^2; checkpointing adds about a forward), and the
// fit reproduces every timed layer within 15 %. The collectives' rates (measure_collective_figures): the
// in-process device group's always, NCCL's where >= 2 GPUs are visible.
#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "app/plan/calibrate.h"
#include "app/plan/cost_model.h"
#include "model/config.h"
#include "runtime/device.h"
#include "tests/support/gpu.h"

namespace zt::plan {
namespace {

TEST(CalibrateGpu, TimesTheEncoderLayersAndFitsThem) {
  ZT_SKIP_WITHOUT_GPU();
  const DebertaConfig model = deberta_v2_xlarge_config();
  const std::vector<LayerTimingPoint> points = layer_timing_points();
  const std::vector<LayerTiming> timings = time_encoder_layers(model, points);
  ASSERT_EQ(timings.size(), 2 * points.size());
  const std::vector<int64_t> depths = layer_timing_depths();
  std::map<std::pair<int64_t, int64_t>, std::pair<double, double>> pair_by_point;  // (shallow, deep)
  for (const LayerTiming& t : timings) {
    EXPECT_GT(t.forward_ms, 0) << t.batch << "x" << t.length;
    EXPECT_LT(t.forward_ms, t.pair_ms) << t.batch << "x" << t.length;
    // Checkpointing adds a forward's work to the pair, never as much again as the pair.
    EXPECT_GT(t.checkpointed_pair_ms, t.pair_ms) << t.batch << "x" << t.length;
    EXPECT_LT(t.checkpointed_pair_ms, 2 * t.pair_ms) << t.batch << "x" << t.length;
    auto& slot = pair_by_point[{t.batch, t.length}];
    (t.layers == depths.front() ? slot.first : slot.second) = t.pair_ms;
  }
  for (const auto& [point, ms] : pair_by_point)
    EXPECT_GT(ms.second, ms.first) << point.first << "x" << point.second << ": the second layer costs time";
  // 16384 tokens: 8 x 2048 (flash) and 16 x 1024 costlier than 256 x 64.
  EXPECT_GT(pair_by_point.at({8, 2048}).second, pair_by_point.at({256, 64}).second);
  EXPECT_GT(pair_by_point.at({16, 1024}).second, pair_by_point.at({256, 64}).second);

  const MeasuredLayerCost fit = fit_layer_cost(timings, model.num_attention_heads, layer_score_lengths());
  const auto heads = static_cast<double>(model.num_attention_heads);
  for (const auto& [point, ms] : pair_by_point) {
    const double b = static_cast<double>(point.first), l = static_cast<double>(point.second);
    const double measured_us =
        (ms.second - ms.first) * 1e3 / static_cast<double>(depths.back() - depths.front());
    EXPECT_NEAR(fit.layer_us(b, l, heads) / measured_us, 1.0, 0.15)
        << point.first << "x" << point.second << ": measured " << measured_us << " us";
    // A layer's forward alone: a part of its forward + backward (0.16-0.43 on an H100 at these shapes).
    const double forward_share = fit.layer_forward_us(b, l, heads) / fit.layer_us(b, l, heads);
    EXPECT_GT(forward_share, 0.08) << point.first << "x" << point.second;
    EXPECT_LT(forward_share, 0.7) << point.first << "x" << point.second;
    // Checkpointing's cost a layer: about its forward again (0.5-2x of the forward's fit).
    const double recompute_per_forward =
        fit.layer_recompute_us(b, l, heads) / fit.layer_forward_us(b, l, heads);
    EXPECT_GT(recompute_per_forward, 0.5) << point.first << "x" << point.second;
    EXPECT_LT(recompute_per_forward, 2.0) << point.first << "x" << point.second;
  }
}

TEST(CalibrateGpu, MeasuresTheCollectiveRates) {
  ZT_SKIP_WITHOUT_GPU();
  const CollectiveFigures c = measure_collective_figures(int64_t{64} << 20, 3);
  // Memory traffic of a device's copies and sums: above PCIe's, below any HBM's.
  EXPECT_GT(c.device_group_gbps, 100) << c.describe();
  EXPECT_LT(c.device_group_gbps, 20000) << c.describe();
#ifdef ZT_WITH_NCCL
  if (cuda_device_count() >= 2) {
    EXPECT_EQ(c.nccl_gpus, cuda_device_count());
    EXPECT_GT(c.nccl_bus_gbps, 1) << c.describe();
    EXPECT_LT(c.nccl_bus_gbps, 2000) << c.describe();
    return;
  }
#endif
  EXPECT_EQ(c.nccl_bus_gbps, 0);
  EXPECT_FALSE(c.nccl_note.empty());
}

}  // namespace
}  // namespace zt::plan
