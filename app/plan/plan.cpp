#include "app/plan/plan.h"

#include <sstream>

#include "runtime/check.h"

namespace zt::plan {

std::string_view optimizer_offload_name(OptimizerOffload offload) {
  switch (offload) {
    case OptimizerOffload::none:
      return "none";
    case OptimizerOffload::cpu:
      return "cpu";
    case OptimizerOffload::nvme:
      return "nvme";
  }
  return "?";
}

std::string Plan::describe() const {
  std::ostringstream out;
  out << "stage " << stage;
  if (optimizer_offload != OptimizerOffload::none) {
    out << " + offload " << (param_offload ? "both " : "opt ") << optimizer_offload_name(optimizer_offload);
    if (partial_offload()) out << " ratio " << offload_ratio;
  }
  out << ", micro " << micro_batch << " x " << accumulation;
  if (gradient_checkpointing) out << ", checkpointing";
  return out.str();
}

std::vector<Plan> enumerate_plans(const PlanRequest& r) {
  ZT_CHECK(r.world_size >= 1 && r.global_batch >= 1 && r.global_batch % r.world_size == 0,
           "--auto_plan: the global batch ", r.global_batch, " is not a multiple of the world size ",
           r.world_size);
  const int64_t per_rank = r.global_batch / r.world_size;
  struct Placement {
    OptimizerOffload optimizer;
    double ratio;
    bool param;
  };
  std::vector<Plan> plans;
  for (int stage = 0; stage <= 3; ++stage) {
    std::vector<Placement> placements = {{OptimizerOffload::none, 1.0, false}};
    if (stage >= 1 && r.gpu) {
      std::vector<OptimizerOffload> devices = {OptimizerOffload::cpu};
      if (r.allow_nvme) devices.push_back(OptimizerOffload::nvme);
      for (OptimizerOffload d : devices) {
        placements.push_back({d, 1.0, false});
        if (stage == 3) placements.push_back({d, 1.0, true});
      }
      if (r.include_partial_offload)
        for (double ratio : r.partial_ratios) placements.push_back({OptimizerOffload::cpu, ratio, false});
    }
    for (const Placement& p : placements)
      for (bool checkpointing : {false, true})
        for (int64_t micro = per_rank; micro >= 1; --micro) {
          if (per_rank % micro != 0) continue;
          plans.push_back({.stage = stage,
                           .optimizer_offload = p.optimizer,
                           .offload_ratio = p.ratio,
                           .param_offload = p.param,
                           .gradient_checkpointing = checkpointing,
                           .micro_batch = micro,
                           .accumulation = per_rank / micro});
        }
  }
  return plans;
}

}  // namespace zt::plan
