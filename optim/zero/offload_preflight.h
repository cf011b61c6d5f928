// The offload's preflight, before the engine allocates anything: the host memory its buffers take (every
// rank of this process holds its own: ZeroEngineOptions::ranks_sharing_host) checked against MemAvailable and
// the locked-memory limit and charged to the run's host budget, each swap directory checked for its files'
// bytes, and the plan said on rank 0.
#pragma once

#include <cstddef>
#include <optional>

#include "optim/swap/swapped_state_store.h"
#include "optim/zero/engine_options.h"
#include "optim/zero/partition.h"
#include "runtime/host_memory_budget.h"

namespace zt::optim {

// What the offload holds of ZeroEngineOptions::host_budget for the engine's lifetime (empty without one).
struct OffloadHostCharges {
  HostMemoryBudget::Charge pinned, pageable;
};

// `options` with offload.disk_buffers and param_disk_buffers set from the disk tiers; `disk_state`: the
// optimizer state's swap file (with options.disk); sub_group_count: the host store's blocks.
OffloadHostCharges preflight_offload(const ZeroPartition& partition, const ZeroEngineOptions& options,
                                     int rank, const std::optional<swap::SwappedStateOptions>& disk_state,
                                     size_t sub_group_count);

}  // namespace zt::optim
