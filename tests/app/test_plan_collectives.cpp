// The cost model's collectives between ranks (app/plan/cost_model.h, predict_collectives) on synthetic
// figures: nothing at world size 1, the ring and in-process formulas, each stage's terms as they grow with
// the world size, the bytes and the micro-batches, the part hidden under backward with overlap_comm, and the
// planner's choice between stages 2 and 3 at world size 4.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "app/plan/auto_plan.h"
#include "app/plan/calibrate.h"
#include "app/plan/cost_model.h"
#include "app/plan/plan.h"
#include "app/plan/planner.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/zero/partition.h"
#include "runtime/check.h"
#include "runtime/device.h"

namespace zt::plan {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

Plan plan_of(int stage, int64_t micro, int64_t accumulation) {
  return {.stage = stage, .micro_batch = micro, .accumulation = accumulation};
}

class Collectives : public ::testing::Test {
 protected:
  DebertaConfig model = deberta_v2_xlarge_config();
  MachineFigures figures;
  void SetUp() override {
    figures.nccl_bus_gbps = 100;
    figures.device_group_gbps = 1000;
  }
  CostInputs inputs(int world, CollectiveTransport transport = CollectiveTransport::nccl,
                    bool overlap = false) const {
    return {.model = &model,
            .max_length = 128,
            .world_size = world,
            .parameters = ParameterTable(model).total_numel(),
            .collectives = transport,
            .compute_bytes = 2,
            .overlap_comm = overlap};
  }
  // The padded model the engine reduces at `world` (the sum of its units).
  double padded(int world) const {
    double n = 0;
    const optim::ZeroPartition partition(ParameterTable(model), world);
    for (const optim::ZeroUnit& u : partition.units()) n += static_cast<double>(u.numel);
    return n;
  }
};

TEST_F(Collectives, RingAndDeviceGroupFormulas) {
  const double bytes = 1e9;
  using K = CollectiveKind;
  const auto nccl = CollectiveTransport::nccl, shared = CollectiveTransport::shared_device;
  // NCCL at 100 GB/s bus, W = 4: all-reduce 2 x 3/4 of the bytes, the others 3/4.
  EXPECT_DOUBLE_EQ(collective_ms(K::all_reduce_sum, bytes, 4, nccl, figures), 15.0);
  EXPECT_DOUBLE_EQ(collective_ms(K::reduce_scatter_sum, bytes, 4, nccl, figures), 7.5);
  EXPECT_DOUBLE_EQ(collective_ms(K::all_gather, bytes, 4, nccl, figures), 7.5);
  // One device at 1000 GB/s: the rank's kernels move (W + 3), (1 + 1/W), 2 (W-1)/W of the bytes.
  EXPECT_DOUBLE_EQ(collective_ms(K::all_reduce_sum, bytes, 4, shared, figures), 7.0);
  EXPECT_DOUBLE_EQ(collective_ms(K::reduce_scatter_sum, bytes, 4, shared, figures), 1.25);
  EXPECT_DOUBLE_EQ(collective_ms(K::all_gather, bytes, 4, shared, figures), 1.5);
  for (const K kind : {K::all_reduce_sum, K::reduce_scatter_sum, K::all_gather}) {
    EXPECT_EQ(collective_ms(kind, bytes, 1, nccl, figures), 0.0);
    EXPECT_EQ(collective_ms(kind, bytes, 1, shared, figures), 0.0);
    // Linear in the bytes; over NCCL growing with W towards 2x or 1x the bytes.
    EXPECT_DOUBLE_EQ(collective_ms(kind, 2 * bytes, 4, nccl, figures),
                     2 * collective_ms(kind, bytes, 4, nccl, figures));
    EXPECT_LT(collective_ms(kind, bytes, 2, nccl, figures), collective_ms(kind, bytes, 4, nccl, figures));
    EXPECT_LT(collective_ms(kind, bytes, 4, nccl, figures), collective_ms(kind, bytes, 8, nccl, figures));
  }
  EXPECT_THROW(collective_ms(K::broadcast, bytes, 4, nccl, figures), Error);
}

// World size 1: no collective term, whatever the transport or overlap, so every plan's step is the one
// before collectives were modelled (the measured-step tests of test_plan_cost_model.cpp hold it to them).
TEST_F(Collectives, WorldOneHasNone) {
  PlanRequest r;
  r.global_batch = 64;
  r.include_partial_offload = true;
  for (const Plan& p : enumerate_plans(r)) {
    const StepCost base = predict_step(p, inputs(1), figures);
    EXPECT_EQ(base.comm_ms, 0.0) << p.describe();
    for (const auto transport : {CollectiveTransport::nccl, CollectiveTransport::shared_device}) {
      CostInputs other = inputs(1, transport, true);
      other.compute_bytes = 4;
      other.reduce_scatter = false;
      const StepCost c = predict_step(p, other, figures);
      EXPECT_EQ(c.total(), base.total()) << p.describe();
      EXPECT_EQ(predict_collectives(p, other, figures, 50).exposed_ms(), 0.0) << p.describe();
    }
  }
}

// Each stage's collectives, as the engine runs them (f32 gradients, bf16 parameters, P the padded model):
// stage 0 one all-reduce of 4P; 1 a reduce-scatter of 4P and the all-gather of 2P; 2 the reduce-scatter
// every micro-batch; 3 the reduce-scatter and two all-gathers every micro-batch.
TEST_F(Collectives, StageTermsFollowTheEngine) {
  for (const int w : {2, 4, 8}) {
    const double p = padded(w), ring = (w - 1.0) / w, bus = figures.nccl_bus_gbps * 1e9;
    const CostInputs in = inputs(w);
    auto at = [&](int stage, int64_t accumulation) {
      return predict_collectives(plan_of(stage, 8, accumulation), in, figures, 50);
    };
    const double reduce_scatter_ms = ring * 4 * p / bus * 1e3, gather_ms = ring * 2 * p / bus * 1e3;
    EXPECT_NEAR(at(0, 1).gradient_ms, 2 * reduce_scatter_ms, 1e-9);
    EXPECT_EQ(at(0, 1).gather_ms, 0.0);
    EXPECT_NEAR(at(1, 1).gradient_ms, reduce_scatter_ms, 1e-9);
    EXPECT_NEAR(at(1, 1).gather_ms, gather_ms, 1e-9);
    EXPECT_NEAR(at(2, 1).gradient_ms, reduce_scatter_ms, 1e-9);
    EXPECT_NEAR(at(2, 1).gather_ms, gather_ms, 1e-9);
    EXPECT_NEAR(at(3, 1).gradient_ms, reduce_scatter_ms, 1e-9);
    EXPECT_NEAR(at(3, 1).gather_ms, 2 * gather_ms, 1e-9);
    // Accumulation: stages 0/1 reduce once a step, 2/3 every micro-batch (3: its gathers too).
    EXPECT_EQ(at(0, 4).exposed_ms(), at(0, 1).exposed_ms());
    EXPECT_EQ(at(1, 4).exposed_ms(), at(1, 1).exposed_ms());
    EXPECT_NEAR(at(2, 4).gradient_ms, 4 * at(2, 1).gradient_ms, 1e-9);
    EXPECT_EQ(at(2, 4).gather_ms, at(2, 1).gather_ms);
    EXPECT_NEAR(at(3, 4).exposed_ms(), 4 * at(3, 1).exposed_ms(), 1e-9);
    // Stage 3 moves more than stage 2, which moves less than stage 0's all-reduce.
    EXPECT_GT(at(3, 1).exposed_ms(), at(2, 1).exposed_ms());
    EXPECT_LT(at(2, 1).exposed_ms(), at(0, 1).exposed_ms());
    // f32 parameters double the gathers; reduce_scatter false all-reduces at stages 1-3.
    CostInputs f32 = in;
    f32.compute_bytes = 4;
    EXPECT_NEAR(predict_collectives(plan_of(3, 8, 1), f32, figures, 50).gather_ms, 2 * at(3, 1).gather_ms,
                1e-9);
    CostInputs all_reduce = in;
    all_reduce.reduce_scatter = false;
    EXPECT_NEAR(predict_collectives(plan_of(2, 8, 1), all_reduce, figures, 50).gradient_ms,
                2 * reduce_scatter_ms, 1e-9);
    // The step carries them.
    for (const int stage : {0, 1, 2, 3}) {
      const StepCost c = predict_step(plan_of(stage, 8, 2), in, figures);
      EXPECT_NEAR(c.comm_ms, at(stage, 2).exposed_ms(), 1e-9);
      EXPECT_GT(c.total(), predict_step(plan_of(stage, 8, 2), inputs(1), figures).total());
    }
  }
  // Growing with W at every stage (over NCCL).
  for (const int stage : {0, 1, 2, 3})
    EXPECT_LT(predict_collectives(plan_of(stage, 8, 1), inputs(2), figures, 50).exposed_ms(),
              predict_collectives(plan_of(stage, 8, 1), inputs(8), figures, 50).exposed_ms());
}

// overlap_comm over NCCL hides the reductions under backward, all but the units reduced after the last layer
// (the embeddings and the shared unit); the gathers stay exposed. On a shared device nothing hides.
TEST_F(Collectives, OverlapHidesReductionsUnderBackward) {
  const Plan p = plan_of(3, 8, 2);
  const CollectiveCost in_order = predict_collectives(p, inputs(4), figures, 1000);
  EXPECT_EQ(in_order.hidden_ms, 0.0);
  const CollectiveCost overlapped =
      predict_collectives(p, inputs(4, CollectiveTransport::nccl, true), figures, /*backward_ms=*/1000);
  double tail = 0, all = 0;
  const optim::ZeroPartition partition(ParameterTable(model), 4);
  for (const optim::ZeroUnit& u : partition.units()) {
    all += static_cast<double>(u.numel);
    if (u.layer < 0) tail += static_cast<double>(u.numel);
  }
  // A long backward hides all but the tail's share of each micro-batch's reduction.
  EXPECT_NEAR(overlapped.hidden_ms, in_order.gradient_ms * (1 - tail / all), 1e-9);
  EXPECT_EQ(overlapped.gather_ms, in_order.gather_ms);
  // A short one hides only what fits under it.
  const CollectiveCost short_backward =
      predict_collectives(p, inputs(4, CollectiveTransport::nccl, true), figures, /*backward_ms=*/1);
  EXPECT_NEAR(short_backward.hidden_ms, 2 * 1.0, 1e-9);
  EXPECT_EQ(
      predict_collectives(p, inputs(4, CollectiveTransport::shared_device, true), figures, 1000).hidden_ms,
      0.0);
}

// At world size 4 over NCCL the planner ranks stage 3 below stage 2 where both fit (stage 3's gathers), and
// takes stage 3 where only it fits.
TEST_F(Collectives, PlannerWeighsStageThreesGathersAtWorldFour) {
  PlanRequest r;
  r.global_batch = 160;
  r.world_size = 4;
  r.device_headroom = 12 * kGiB / 20;  // the budgets below: 11.4 GiB of 12, 39.4 of 40
  const Plan two = plan_of(2, 40, 1), three = plan_of(3, 40, 1);
  const CostInputs in = inputs(4);
  const CostOf cost = [&](const Plan& p) { return predict_step(p, in, figures); };
  const MemoryOf memory = [](const Plan& p) {
    return PlanMemory{.device = p.stage == 3 ? 11 * kGiB : 12 * kGiB, .host = 0};
  };
  const StepCost c2 = cost(two), c3 = cost(three);
  // The gap includes the collectives' difference (the extra all-gather of the parameters a micro-batch).
  EXPECT_GT(c3.comm_ms - c2.comm_ms, 0.9 * collective_ms(CollectiveKind::all_gather, 2 * padded(4), 4,
                                                         CollectiveTransport::nccl, figures));
  EXPECT_GT(c3.total() - c2.total(), c3.comm_ms - c2.comm_ms);

  r.device_cap = 40 * kGiB;  // both fit
  PlanChoice choice = choose_plan(r, {three, two}, memory, cost);
  ASSERT_TRUE(choice.chosen.has_value());
  EXPECT_EQ(choice.ranked[*choice.chosen].plan.stage, 2);
  EXPECT_EQ(choice.ranked[1].plan.stage, 3);

  r.device_cap = 12 * kGiB;  // stage 3 alone fits
  choice = choose_plan(r, {three, two}, memory, cost);
  ASSERT_TRUE(choice.chosen.has_value());
  EXPECT_EQ(choice.ranked[*choice.chosen].plan.stage, 3);
}

// The run's inputs: the compute dtype's bytes, overlap_comm and reduce_scatter as configured.
TEST_F(Collectives, CostInputsFollowTheConfig) {
  optim::TrainConfig config;
  config.world_size = 4;
  config.zero.overlap_comm = true;
  config.zero.reduce_scatter = false;
  const CostInputs bf16 = cost_inputs(config, model, DType::bf16, CollectiveTransport::nccl);
  EXPECT_EQ(bf16.world_size, 4);
  EXPECT_EQ(bf16.compute_bytes, 2);
  EXPECT_TRUE(bf16.overlap_comm);
  EXPECT_FALSE(bf16.reduce_scatter);
  EXPECT_EQ(bf16.collectives, CollectiveTransport::nccl);
  const CostInputs f32 = cost_inputs(config, model, DType::f32, CollectiveTransport::shared_device);
  EXPECT_EQ(f32.compute_bytes, 4);
  EXPECT_EQ(f32.collectives, CollectiveTransport::shared_device);
}

// The calibration's collective rates: the device group's always, NCCL's only where measured.
TEST(CollectiveCalibration, MeasuredRatesReplaceTheDefaults) {
  const MachineFigures base;
  CollectiveFigures c{
      .nccl_bus_gbps = 0, .nccl_gpus = 0, .nccl_note = "1 GPU visible", .device_group_gbps = 2500};
  MachineFigures m = with_collective_figures(base, c);
  EXPECT_EQ(m.device_group_gbps, 2500);
  EXPECT_EQ(m.nccl_bus_gbps, base.nccl_bus_gbps);
  EXPECT_NE(c.describe().find("NCCL not measured (1 GPU visible)"), std::string::npos) << c.describe();
  c.nccl_bus_gbps = 380;
  c.nccl_gpus = 8;
  m = with_collective_figures(base, c);
  EXPECT_EQ(m.nccl_bus_gbps, 380);
  EXPECT_NE(m.name.find("NCCL across 8 GPUs"), std::string::npos) << m.name;
  EXPECT_EQ(with_collective_figures(m, c).name, m.name);
  c.device_group_gbps = 0;
  EXPECT_THROW(with_collective_figures(base, c), Error);
  if (!cuda_available()) {
    EXPECT_THROW(measure_collective_figures(), Error);
  }
}

}  // namespace
}  // namespace zt::plan
