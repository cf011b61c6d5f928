// The planner's choice (app/plan/planner.h) on synthetic memory and cost tables: the fastest plan that fits
// wins, ties go to the smaller then the earlier plan, a partial offload is chosen where fastest, the host cap
// counts, and nothing fitting names the closest plans with the cap that would fit them.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "app/config/engine_options.h"
#include "app/plan/auto_plan.h"
#include "app/plan/plan.h"
#include "app/plan/planner.h"
#include "model/config.h"
#include "optim/zero/memory_estimate.h"
#include "runtime/check.h"
#include "tests/app/config_test_support.h"

namespace zt::plan {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

PlanRequest request_with(int64_t global_batch, size_t cap_gib) {
  PlanRequest r;
  r.global_batch = global_batch;
  r.device_cap = cap_gib * kGiB;
  r.device_headroom = cap_gib * kGiB / 20;  // 5 %: the budgets the tests state
  return r;
}

StepCost ms(double v) {
  StepCost c;
  c.compute_ms = v;
  return c;
}

TEST(PlanEnumeration, EveryPlanKeepsTheGlobalBatchAndValidCombinations) {
  PlanRequest r = request_with(12, 24);
  r.world_size = 2;
  const std::vector<Plan> plans = enumerate_plans(r);
  std::set<int64_t> micros;
  int param_offload = 0;
  for (const Plan& p : plans) {
    EXPECT_EQ(p.micro_batch * p.accumulation * r.world_size, 12) << p.describe();
    if (p.stage == 0) {
      EXPECT_EQ(p.optimizer_offload, OptimizerOffload::none) << p.describe();
    }
    if (p.param_offload) {
      ++param_offload;
      EXPECT_EQ(p.stage, 3);
      EXPECT_NE(p.optimizer_offload, OptimizerOffload::none);
    }
    EXPECT_NE(p.optimizer_offload, OptimizerOffload::nvme) << "nvme without an nvme_path";
    EXPECT_FALSE(p.partial_offload()) << "partial offload without include_partial_offload";
    micros.insert(p.micro_batch);
  }
  EXPECT_EQ(micros, (std::set<int64_t>{1, 2, 3, 6}));
  // Stages 0-3 with none, cpu at 1-3, cpu both at 3: 8 placements x 2 checkpointing x 4 micro-batches.
  EXPECT_EQ(plans.size(), 8u * 2 * 4);
  EXPECT_EQ(param_offload, 2 * 4);

  r.allow_nvme = true;
  r.include_partial_offload = true;
  int nvme = 0, partial = 0;
  for (const Plan& p : enumerate_plans(r)) {
    nvme += p.optimizer_offload == OptimizerOffload::nvme;
    partial += p.partial_offload();
    if (p.partial_offload()) {
      EXPECT_EQ(p.optimizer_offload, OptimizerOffload::cpu) << p.describe();
      EXPECT_FALSE(p.param_offload) << p.describe();
    }
  }
  EXPECT_EQ(nvme, (3 + 1) * 2 * 4);   // stages 1-3, and stage 3 with parameters too
  EXPECT_EQ(partial, 3 * 3 * 2 * 4);  // three ratios at stages 1-3

  PlanRequest cpu = request_with(4, 1);
  cpu.gpu = false;
  for (const Plan& p : enumerate_plans(cpu)) EXPECT_EQ(p.optimizer_offload, OptimizerOffload::none);
}

TEST(PlanEnumeration, GlobalBatchNotAMultipleOfTheWorldIsRefused) {
  PlanRequest r = request_with(7, 24);
  r.world_size = 2;
  EXPECT_THROW(enumerate_plans(r), Error);
}

// A table keyed by plan description.
struct Table {
  std::map<std::string, std::pair<double, double>> rows;  // description -> (ms, device GiB)
  MemoryOf memory() const {
    return [this](const Plan& p) {
      const auto it = rows.find(p.describe());
      return PlanMemory{.device =
                            it == rows.end() ? 1000 * kGiB : static_cast<size_t>(it->second.second * kGiB)};
    };
  }
  CostOf cost() const {
    return [this](const Plan& p) {
      const auto it = rows.find(p.describe());
      return ms(it == rows.end() ? 1e9 : it->second.first);
    };
  }
};

Plan plan(int stage, int64_t micro, int64_t accumulation, OptimizerOffload offload = OptimizerOffload::none,
          bool checkpointing = false) {
  return {.stage = stage,
          .optimizer_offload = offload,
          .gradient_checkpointing = checkpointing,
          .micro_batch = micro,
          .accumulation = accumulation};
}

TEST(Planner, FastestFittingPlanWinsAndFasterOnesSayWhy) {
  const PlanRequest r = request_with(128, 24);  // budget 22.8 GiB
  const std::vector<Plan> plans = {plan(0, 128, 1), plan(0, 64, 2), plan(2, 128, 1, OptimizerOffload::cpu),
                                   plan(0, 128, 1, OptimizerOffload::none, true)};
  Table t;
  t.rows[plans[0].describe()] = {174, 28.3};  // fastest, too large
  t.rows[plans[1].describe()] = {190, 22.6};  // fits
  t.rows[plans[2].describe()] = {359, 20.8};  // fits, slower
  t.rows[plans[3].describe()] = {230, 15.0};  // fits, slower
  const PlanChoice c = choose_plan(r, plans, t.memory(), t.cost());
  ASSERT_TRUE(c.chosen.has_value());
  EXPECT_EQ(c.ranked[*c.chosen].plan.describe(), plans[1].describe());
  const std::string text = describe_choice(c, r);
  EXPECT_NE(text.find("chosen:  stage 0, micro 64 x 2"), std::string::npos) << text;
  EXPECT_NE(text.find("next:    stage 0, micro 128 x 1, checkpointing"), std::string::npos) << text;
  EXPECT_NE(text.find("device 28.3 GiB > budget 22.8 GiB"), std::string::npos) << text;
  // The next best in order of predicted time.
  EXPECT_LT(text.find("checkpointing"), text.find("offload opt cpu")) << text;
}

TEST(Planner, TiesGoToLessMemoryThenToTheEarlierPlan) {
  const PlanRequest r = request_with(64, 40);
  const std::vector<Plan> plans = {plan(0, 64, 1), plan(1, 64, 1), plan(2, 64, 1)};
  Table t;
  t.rows[plans[0].describe()] = {100, 30};
  t.rows[plans[1].describe()] = {100, 25};  // same time, less memory: wins
  t.rows[plans[2].describe()] = {100, 25};  // same time and memory, later: loses
  PlanChoice c = choose_plan(r, plans, t.memory(), t.cost());
  ASSERT_TRUE(c.chosen.has_value());
  EXPECT_EQ(c.ranked[*c.chosen].plan.stage, 1);
  EXPECT_EQ(c.ranked[1].plan.stage, 2);
  EXPECT_EQ(c.ranked[2].plan.stage, 0);

  t.rows[plans[0].describe()] = {100, 25};  // all equal: the enumeration's order
  c = choose_plan(r, plans, t.memory(), t.cost());
  EXPECT_EQ(c.ranked[*c.chosen].plan.stage, 0);
}

TEST(Planner, AccumulationAgainstOffload) {
  // Under a cap where one micro-batch of 128 fits only with the optimizer offloaded, the planner takes
  // accumulation when the CPU update is slow, and the offload when it is fast.
  const PlanRequest r = request_with(128, 24);
  const Plan accumulate = plan(0, 64, 2);
  const Plan offload = plan(2, 128, 1, OptimizerOffload::cpu);
  const Plan whole = plan(0, 128, 1);
  for (const bool fast_cpu : {false, true}) {
    Table t;
    t.rows[accumulate.describe()] = {190, 22.6};
    t.rows[offload.describe()] = {fast_cpu ? 180.0 : 359.0, 20.8};
    t.rows[whole.describe()] = {174, 28.3};
    const PlanChoice c = choose_plan(r, {whole, accumulate, offload}, t.memory(), t.cost());
    ASSERT_TRUE(c.chosen.has_value());
    EXPECT_EQ(c.ranked[*c.chosen].plan.describe(), (fast_cpu ? offload : accumulate).describe());
  }
}

// A partial offload is a plan like any other: chosen where it is the fastest that fits (here between no
// offload, over the cap, and the full offload, slower), rejected with its bytes where it does not fit.
TEST(Planner, PartialOffloadIsChosenWhereItIsFastest) {
  const PlanRequest r = request_with(128, 24);  // budget 22.8 GiB
  const Plan none = plan(2, 128, 1);
  Plan partial = plan(2, 128, 1, OptimizerOffload::cpu);
  partial.offload_ratio = 0.5;
  const Plan full = plan(2, 128, 1, OptimizerOffload::cpu);
  Table t;
  t.rows[none.describe()] = {120, 28};
  t.rows[partial.describe()] = {200, 22};
  t.rows[full.describe()] = {359, 20.8};
  const PlanChoice c = choose_plan(r, {none, partial, full}, t.memory(), t.cost());
  ASSERT_TRUE(c.chosen.has_value());
  EXPECT_EQ(c.ranked[*c.chosen].plan.describe(), partial.describe());
  const std::string text = describe_choice(c, r);
  EXPECT_NE(text.find("chosen:  " + partial.describe()), std::string::npos) << text;
  EXPECT_NE(text.find("ratio 0.5"), std::string::npos) << text;

  // Over the cap: rejected with its bytes, the full offload chosen.
  t.rows[partial.describe()] = {200, 23.5};
  const PlanChoice over = choose_plan(r, {none, partial, full}, t.memory(), t.cost());
  ASSERT_TRUE(over.chosen.has_value());
  EXPECT_EQ(over.ranked[*over.chosen].plan.describe(), full.describe());
  const std::string rejected = describe_choice(over, r);
  EXPECT_NE(rejected.find(partial.describe() + " "), std::string::npos) << rejected;
  EXPECT_NE(rejected.find("device 23.5 GiB > budget"), std::string::npos) << rejected;
}

TEST(Planner, HostCapRejectsOffload) {
  PlanRequest r = request_with(128, 24);
  r.host_cap = 16 * kGiB;  // budget 15.2 GiB
  const Plan offload = plan(2, 128, 1, OptimizerOffload::cpu);
  const Plan accumulate = plan(0, 32, 4);
  const MemoryOf memory = [&](const Plan& p) {
    return p.optimizer_offload == OptimizerOffload::none ? PlanMemory{.device = 20 * kGiB}
                                                         : PlanMemory{.device = 10 * kGiB, .host = 15 * kGiB};
  };
  const CostOf cost = [&](const Plan& p) {
    return ms(p.optimizer_offload == OptimizerOffload::none ? 400 : 300);
  };
  PlanChoice c = choose_plan(r, {offload, accumulate}, memory, cost);
  EXPECT_EQ(c.ranked[*c.chosen].plan.describe(), offload.describe());  // 15 GiB <= 15.2

  r.host_cap = 15 * kGiB;  // budget 14.25 GiB
  c = choose_plan(r, {offload, accumulate}, memory, cost);
  ASSERT_TRUE(c.chosen.has_value());
  EXPECT_EQ(c.ranked[*c.chosen].plan.describe(), accumulate.describe());
  EXPECT_NE(describe_choice(c, r).find("host 15 GiB > budget 14.25 GiB"), std::string::npos)
      << describe_choice(c, r);
}

TEST(Planner, NothingFitsNamesTheClosestPlansAndTheCapThatFitsThem) {
  const PlanRequest r = request_with(128, 8);  // budget 7.6 GiB
  const std::vector<Plan> plans = {plan(0, 128, 1), plan(0, 32, 4), plan(3, 32, 4, OptimizerOffload::cpu)};
  Table t;
  t.rows[plans[0].describe()] = {170, 28.5};
  t.rows[plans[1].describe()] = {200, 19.0};
  t.rows[plans[2].describe()] = {400, 9.5};  // the closest: 9.5 / 0.95 = 10 GiB would fit it
  const PlanChoice c = choose_plan(r, plans, t.memory(), t.cost());
  EXPECT_FALSE(c.chosen.has_value());
  EXPECT_THROW(describe_choice(c, r), Error);
  const std::string text = describe_no_fit(c, r, 2);
  EXPECT_NE(text.find("no plan fits"), std::string::npos) << text;
  const size_t closest = text.find("stage 3 + offload opt cpu, micro 32 x 4");
  const size_t second = text.find("stage 0, micro 32 x 4");
  ASSERT_NE(closest, std::string::npos) << text;
  ASSERT_NE(second, std::string::npos) << text;
  EXPECT_LT(closest, second);
  EXPECT_EQ(text.find("micro 128 x 1"), std::string::npos) << "only the 2 closest: " << text;
  EXPECT_NE(text.find("fits a device cap of 10 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("fits a device cap of 20 GiB"), std::string::npos) << text;
}

// A partial plan applied to a configuration is the engine's partial offload (the ratio handed to
// ZeroOffload), and its memory is the estimator's for that ratio (the engine's ZeroPlan): between no offload
// and the full one, on the device and on the host.
TEST(AutoPlan, PartialPlanIsTheEnginesPartialOffload) {
  const optim::TrainConfig base = optim::config_test::resolved({"--per_device_train_batch_size", "8"}, "{}");
  const DebertaConfig model = deberta_v2_xlarge_config();
  Plan partial{
      .stage = 2, .optimizer_offload = OptimizerOffload::cpu, .offload_ratio = 0.25, .micro_batch = 8};
  optim::TrainConfig c = base;
  apply_plan(partial, c);
  EXPECT_TRUE(c.zero.offload_optimizer.enabled);
  EXPECT_EQ(optim::zero_offload(c).ratio, 0.25);
  EXPECT_FALSE(optim::zero_offload(c).stream_gradients);
  EXPECT_EQ(c.origin_of("zero_optimization.offload_optimizer.ratio"), optim::Origin::derived);
  const PlanMemory mem = plan_memory_from_estimate(model, DType::bf16, base, partial, true);
  const optim::MemoryEstimate e =
      optim::estimate_memory(model, 2, 1, DType::bf16, std::max<int64_t>(8, base.per_device_eval_batch_size),
                             base.max_length, optim::zero_offload(c), true, 1);
  EXPECT_EQ(mem.device, e.total());
  EXPECT_EQ(mem.host, e.host());
  Plan none = partial, full = partial;
  none.optimizer_offload = OptimizerOffload::none;
  full.offload_ratio = 1.0;
  const PlanMemory on_device = plan_memory_from_estimate(model, DType::bf16, base, none, true);
  const PlanMemory on_host = plan_memory_from_estimate(model, DType::bf16, base, full, true);
  EXPECT_LT(mem.device, on_device.device);
  EXPECT_GT(mem.device, on_host.device);
  EXPECT_GT(mem.host, 0u);
  EXPECT_LT(mem.host, on_host.host);
  // Applying a plan without offload leaves the ratio at 1.
  apply_plan(none, c);
  EXPECT_EQ(optim::zero_offload(c).ratio, 1.0);
}

}  // namespace
}  // namespace zt::plan
