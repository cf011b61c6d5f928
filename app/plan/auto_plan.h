// --auto_plan for a resolved TrainConfig: the request from the run's settings, the memory of each plan from
// the estimator (the one call into optim/zero/memory_estimate.h is plan_memory_from_estimate), the cost
// model, and the chosen plan applied back to the configuration.
//
//   const AutoPlan p = choose_auto_plan(config, model, compute, cap, gpu, figures);  // throws: no fit
//   std::fputs(p.report.c_str(), stdout);
//   apply_plan(p.plan, config);   // then the model config again (gradient checkpointing)
#pragma once

#include <string>

#include "app/config/train_config.h"
#include "app/plan/cost_model.h"
#include "app/plan/planner.h"
#include "model/config.h"
#include "runtime/dtype.h"

namespace zt::plan {

struct AutoPlan {
  Plan plan;
  PlanChoice choice;
  std::string report;  // describe_choice
};

// The request for a resolved config: the global batch train_batch_size (micro x accumulation x world), the
// device cap given (--gpu_memory_limit or the device's free memory), the host cap --host_memory_limit or the
// host's available memory, nvme when an nvme_path is configured.
PlanRequest plan_request(const optim::TrainConfig& config, size_t device_cap, bool gpu);

// The estimator's device and host bytes for `plan` applied to `config` (the eval batch counts where larger:
// the run plans its activations for both); a partial offload as the engine sizes it (ZeroPlan).
PlanMemory plan_memory_from_estimate(const DebertaConfig& model, DType compute,
                                     const optim::TrainConfig& config, const Plan& plan, bool gpu);

// The cost model's inputs for a run: the world size, the compute dtype's bytes (the all-gathers'),
// zero_optimization.overlap_comm and reduce_scatter as configured, and how its collectives run.
CostInputs cost_inputs(const optim::TrainConfig& config, const DebertaConfig& model, DType compute,
                       CollectiveTransport collectives);

// Throws zt::Error with describe_no_fit when nothing fits.
// gpu: the run's device is a GPU (false: the cap is host memory, and offload is not planned).
// collectives: nccl for one process per GPU (mpirun), shared_device for --world_size in-process ranks.
AutoPlan choose_auto_plan(const optim::TrainConfig& config, const DebertaConfig& model, DType compute,
                          size_t device_cap, bool gpu, const MachineFigures& figures,
                          CollectiveTransport collectives);

// Sets the stage, the offload sections (cpu offload pinned, its ratio), gradient checkpointing, micro-batch
// and accumulation of a resolved config; origins "derived", noted "--auto_plan". train_batch_size is
// unchanged.
void apply_plan(const Plan& plan, optim::TrainConfig& config);

}  // namespace zt::plan
