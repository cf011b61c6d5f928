// The planner: of the plans that fit the caps, the fastest by the predicted step (app/plan/cost_model.h).
// Memory and cost come in as functions, so the choice is tested on synthetic tables
// (tests/app/test_planner.cpp) and the run passes the estimator's and the cost model's (auto_plan.h).
//
//   PlanChoice c = choose_plan(request, enumerate_plans(request), memory_of, cost_of);
//   if (!c.chosen) ZT_FAIL(describe_no_fit(c, request));
//   std::fputs(describe_choice(c, request).c_str(), stdout);
//
// Ranking: the predicted step, then the device bytes, then the enumeration's order (lower stage, no offload,
// no checkpointing, larger micro-batch first), so ties go to the plan that changes the least.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "app/plan/cost_model.h"
#include "app/plan/plan.h"

namespace zt::plan {

struct PlanMemory {
  size_t device = 0;  // per rank
  size_t host = 0;    // the host tier of all ranks of the process (pinned + pageable)
};

struct Candidate {
  Plan plan;
  PlanMemory memory;
  StepCost cost;
  bool fits_device = false;
  bool fits_host = false;
  bool fits() const { return fits_device && fits_host; }
  double predicted_ms() const { return cost.total(); }
};

struct PlanChoice {
  std::vector<Candidate> ranked;  // every plan, fastest first
  std::optional<size_t> chosen;   // index into ranked: the first plan that fits
};

using MemoryOf = std::function<PlanMemory(const Plan&)>;
using CostOf = std::function<StepCost(const Plan&)>;

PlanChoice choose_plan(const PlanRequest& request, const std::vector<Plan>& plans, const MemoryOf& memory_of,
                       const CostOf& cost_of);

// Why a plan was not chosen: "device 36.1 GiB > budget 22.8 GiB", "host 40 GiB > budget 30.4 GiB".
std::string rejection_reason(const Candidate& c, const PlanRequest& request);

// The chosen plan, the next `next_best` fitting plans with their predicted ms and GiB, and every faster plan
// with why it was rejected (at most `max_rejected`, then a count).
std::string describe_choice(const PlanChoice& choice, const PlanRequest& request, int next_best = 4,
                            int max_rejected = 8);

// Nothing fits: the `closest` plans (least over their budget) and the device cap or host memory that would
// make each fit.
std::string describe_no_fit(const PlanChoice& choice, const PlanRequest& request, int closest = 3);

}  // namespace zt::plan
