#include "app/plan/auto_plan.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "app/config/engine_options.h"
#include "model/parameters.h"
#include "optim/zero/memory_estimate.h"
#include "runtime/check.h"
#include "runtime/host_memory.h"

namespace zt::plan {

PlanRequest plan_request(const optim::TrainConfig& config, size_t device_cap, bool gpu) {
  PlanRequest r;
  r.global_batch = config.train_batch_size;
  r.world_size = config.world_size;
  r.device_cap = device_cap;
  r.device_headroom = optim::oom_headroom_bytes(device_cap);
  r.gpu = gpu;
  if (config.host_memory_limit > 0) {
    r.host_cap = config.host_memory_limit;
  } else {
    const size_t available = read_host_memory_limits().available;
    r.host_cap = available == kUnlimitedBytes ? 0 : available;
  }
  r.allow_nvme = !config.zero.offload_optimizer.nvme.nvme_path.empty();
  // A partial offload updates inside the step: not where the exact update is asked to overlap the forward.
  r.include_partial_offload = gpu && !config.offload_overlap_update;
  r.eval_batch = config.per_device_eval_batch_size;
  return r;
}

namespace {

PlanMemory estimate_at(const DebertaConfig& model, DType compute, const optim::TrainConfig& config,
                       const Plan& plan, bool gpu) {
  optim::TrainConfig c = config;
  apply_plan(plan, c);
  DebertaConfig m = model;
  m.gradient_checkpointing = plan.gradient_checkpointing;
  const int64_t max_batch = std::max(plan.micro_batch, config.per_device_eval_batch_size);
  const optim::MemoryEstimate e =
      optim::estimate_memory(m, plan.stage, c.world_size, compute, max_batch, c.max_length,
                             optim::zero_offload(c), gpu, plan.accumulation);
  return {.device = e.total(), .host = e.host() * static_cast<size_t>(c.world_size)};
}

// The model the plan was made for, as the run trains it: its size and head (the task's labels and loss) are
// in the estimate, so the report names them.
std::string describe_planned_model(const DebertaConfig& model, const CostInputs& inputs) {
  std::ostringstream out;
  out << model.name_or_path.value_or("deberta-v2") << ", " << inputs.parameters << " parameters, head "
      << model.num_labels << (model.num_labels == 1 ? " output" : " labels") << " ("
      << (model.is_regression() ? "MSE regression" : "cross-entropy") << ")";
  return out.str();
}

}  // namespace

PlanMemory plan_memory_from_estimate(const DebertaConfig& model, DType compute,
                                     const optim::TrainConfig& config, const Plan& plan, bool gpu) {
  return estimate_at(model, compute, config, plan, gpu);
}

CostInputs cost_inputs(const optim::TrainConfig& config, const DebertaConfig& model, DType compute,
                       CollectiveTransport collectives) {
  return {.model = &model,
          .max_length = config.max_length,
          .world_size = config.world_size,
          .parameters = ParameterTable(model).total_numel(),
          .collectives = collectives,
          .compute_bytes = static_cast<double>(dtype_size(compute)),
          .overlap_comm = config.zero.overlap_comm,
          .reduce_scatter = config.zero.reduce_scatter};
}

AutoPlan choose_auto_plan(const optim::TrainConfig& config, const DebertaConfig& model, DType compute,
                          size_t device_cap, bool gpu, const MachineFigures& figures,
                          CollectiveTransport collectives) {
  ZT_CHECK(
      !config.offload_delayed_update,
      "--auto_plan with --offload_delayed_update: the delayed update changes the math (one step stale), so "
      "the planner never chooses it and cannot keep it; remove one of them");
  // What the plan sets must not be set elsewhere too: the plan would override it unseen. "auto" in the JSON
  // (or nothing) leaves it to the planner; the batch sizes only state the global batch the plan splits.
  for (const char* key : {"zero_optimization.stage", "zero_optimization.offload_optimizer.device",
                          "zero_optimization.offload_optimizer.ratio",
                          "zero_optimization.offload_param.device", "gradient_checkpointing"}) {
    const optim::Origin origin = config.origin_of(key);
    ZT_CHECK(origin == optim::Origin::default_value || origin == optim::Origin::json_auto,
             "--auto_plan chooses ", key, ", which is also set [", optim::origin_name(origin),
             "]: remove it or write \"auto\"");
  }
  const PlanRequest request = plan_request(config, device_cap, gpu);
  const CostInputs inputs = cost_inputs(config, model, compute, collectives);
  AutoPlan result;
  result.choice = choose_plan(
      request, enumerate_plans(request),
      [&](const Plan& p) { return plan_memory_from_estimate(model, compute, config, p, gpu); },
      [&](const Plan& p) { return predict_step(p, inputs, figures); });
  ZT_CHECK(result.choice.chosen.has_value(), describe_no_fit(result.choice, request));
  result.plan = result.choice.ranked[*result.choice.chosen].plan;
  result.report = describe_choice(result.choice, request) +
                  "  planned for: " + describe_planned_model(model, inputs) +
                  "; machine figures: " + figures.name + "\n";
  if (config.world_size > 1) {
    const Candidate& chosen = result.choice.ranked[*result.choice.chosen];
    result.report +=
        collectives == CollectiveTransport::nccl
            ? str("  collectives: ", config.world_size, " ranks, one a GPU, over NCCL at ",
                  figures.nccl_bus_gbps, " GB/s bus bandwidth, overlap_comm ",
                  config.zero.overlap_comm ? "on" : "off")
            : str("  collectives: ", config.world_size,
                  " in-process ranks sharing one GPU (device copies at ", figures.device_group_gbps,
                  " GB/s; the group's step is about ", config.world_size, " x the per-rank one)");
    result.report += str("; the chosen plan's exposed collectives ", chosen.cost.comm_ms, " ms a step\n");
  }
  if (const std::string why = measured_layer_cost_mismatch(figures, model); !why.empty())
    result.report += "  note: " + why + "\n";
  return result;
}

void apply_plan(const Plan& plan, optim::TrainConfig& config) {
  using optim::Origin;
  config.zero.stage = plan.stage;
  auto& opt = config.zero.offload_optimizer;
  opt.enabled = plan.optimizer_offload != OptimizerOffload::none;
  opt.nvme.enabled = plan.optimizer_offload == OptimizerOffload::nvme;
  opt.ratio = opt.enabled ? plan.offload_ratio : 1.0;
  if (opt.enabled) opt.pin_memory = true;
  config.zero.offload_param.enabled = plan.param_offload;
  if (plan.param_offload) config.zero.offload_param.pin_memory = true;
  config.zero.offload_param.nvme.enabled = false;
  config.gradient_checkpointing = plan.gradient_checkpointing;
  config.per_device_train_batch_size = plan.micro_batch;
  config.gradient_accumulation_steps = plan.accumulation;
  for (const char* key :
       {"zero_optimization.stage", "zero_optimization.offload_optimizer.device",
        "zero_optimization.offload_optimizer.ratio", "zero_optimization.offload_param.device",
        "gradient_checkpointing", "per_device_train_batch_size", "gradient_accumulation_steps"}) {
    config.origins[key] = Origin::derived;
    config.origin_notes[key] = "--auto_plan";
  }
}

}  // namespace zt::plan
