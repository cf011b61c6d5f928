// The rank's parameters and optimizer state where the engine's device keeps them (the host on the CPU
// backend), allocated as the plan says (ZeroPlan): the compute copy the model reads (full below stage 3, the
// rank's shard at stage 3: on the host with offload_param, or in the parameter file with its disk tier), the
// f32 master where it is not the compute copy (mixed precision, not offloaded), or the split master (the bf16
// compute copy + low halves + rounding bits, optim/split_master.h), and Adam's m and v (not offloaded; with a
// partial offload those of the shard's part kept on the device).
#pragma once

#include <cstdint>
#include <memory>

#include "optim/zero/engine_options.h"
#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "optim/zero/zero_plan.h"
#include "runtime/arena.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/adamw.cuh"
#endif

namespace zt::optim {

struct DeviceState {
  // `device`: the options of the engine's device buffers; param_kind: the host shard's memory
  // (offload_param.pin_memory). Logs the split master's size on rank 0.
  DeviceState(const ZeroPlan& plan, const ZeroPartition& partition, const ZeroEngineOptions& options,
              int rank, const ArenaOptions& device, MemoryKind param_kind);

  // The f32 master (stages 0-2 in f32: the compute copy itself). Not offloaded, not split.
  const Arena& master() const;
  // kind: 0 master, 1 m, 2 v.
  const Arena& state(int kind) const;
#ifdef ZT_WITH_CUDA
  // The split master's elements [begin, begin + numel) as the kernels take them (begin a multiple of 32).
  gpu::SplitMaster split_master(int64_t begin, int64_t numel) const;
  gpu::SplitMaster whole_split_master() const;
#endif

  bool split = false;  // ZeroPlan::split_master
  // The whole shard's master, m, v live in the host store (ZeroPlan::offload_optimizer, not partial); a
  // partial offload keeps the part not offloaded here (ZeroPlan::device_state_numel elements).
  bool offload = false;
  // master_arena is null where the master is the compute copy (f32) or offloaded or split; with offload
  // exp_avg and exp_avg_sq are null too; compute_copy is null with the parameter file.
  std::unique_ptr<Arena> compute_copy, master_arena, exp_avg, exp_avg_sq;
  std::unique_ptr<Arena> master_low, master_up;  // split: low halves (bf16-typed raw bits), rounding bits
  std::unique_ptr<SwappedParameterShard> param_file;  // parameters on disk: one record per unit slice
};

}  // namespace zt::optim
