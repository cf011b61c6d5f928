// An execution plan: how a step of a fixed global batch is computed (ZeRO stage, where the optimizer state
// and parameters live, gradient checkpointing, micro-batch x accumulation), never what — every plan trains on
// the same samples with the same math (the delayed update, which changes the math, is never a plan).
//
//   PlanRequest request{.global_batch = 128, .world_size = 1, .device_cap = 24_GiB};
//   for (const Plan& p : enumerate_plans(request)) ...   // every valid combination, executable or not
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt::plan {

enum class OptimizerOffload { none, cpu, nvme };
std::string_view optimizer_offload_name(OptimizerOffload offload);

struct Plan {
  int stage = 0;  // ZeRO stage 0-3
  OptimizerOffload optimizer_offload = OptimizerOffload::none;
  // The fraction of the optimizer state kept and updated on the host (DeepSpeed's offload_optimizer.ratio,
  // ZeroOffload::ratio); 1 with cpu/nvme offload, below 1 a partial offload (cpu, stages 1-3, no parameter
  // offload): the rest of the state on the device, both updates at once.
  double offload_ratio = 1.0;
  bool param_offload = false;  // stage 3 with the optimizer offloaded: the parameter shard on the host
  bool gradient_checkpointing = false;
  int64_t micro_batch = 1;   // per rank
  int64_t accumulation = 1;  // micro-batches per step and rank

  bool partial_offload() const { return optimizer_offload != OptimizerOffload::none && offload_ratio < 1.0; }
  // "stage 2 + offload cpu, micro 64 x 2, checkpointing"
  std::string describe() const;
};

// What the planner is asked: the global batch is micro-batch x accumulation x world size in every plan.
struct PlanRequest {
  int64_t global_batch = 1;
  int world_size = 1;
  size_t device_cap = 0;        // bytes per rank (--gpu_memory_limit or the device's free memory)
  size_t host_cap = 0;          // bytes of host memory for the offloaded state of all ranks; 0 = not checked
  size_t device_headroom = 0;   // bytes of the device cap kept free (optim::oom_headroom_bytes)
  double host_headroom = 0.05;  // of the host cap kept free
  bool gpu = true;          // false: the "device" is host memory, offload moves nothing off it (not planned)
  bool allow_nvme = false;  // an nvme_path is configured: the optimizer state may go to disk
  // Enumerate partial offload ratios too (partial_ratios; cpu at stages 1-3).
  bool include_partial_offload = false;
  // The run's --per_device_eval_batch_size: the activation arena is planned for the larger of it and the
  // micro-batch (said when nothing fits); 0 = not given.
  int64_t eval_batch = 0;
  std::vector<double> partial_ratios = {0.25, 0.5, 0.75};

  double device_budget() const {
    return static_cast<double>(device_cap - std::min(device_cap, device_headroom));
  }
  double host_budget() const { return static_cast<double>(host_cap) * (1.0 - host_headroom); }
};

// Every valid plan: stages 0-3; optimizer offload none / cpu / nvme (stages 1-3; nvme only when allowed);
// partial ratios when asked; parameter offload at stage 3 with the optimizer offloaded; checkpointing off
// and on; every micro-batch that divides global_batch / world_size. Throws zt::Error when the global batch
// is not a multiple of the world size.
std::vector<Plan> enumerate_plans(const PlanRequest& request);

}  // namespace zt::plan
