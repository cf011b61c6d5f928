// The disk tier behind the engine's host-state seam: a HostOptimizerStore whose blocks live in a swap file
// (optim/swap/swapped_state_store.h, Note [Swapped optimizer state]) instead of host arenas, and the mapping
// from the resolved configuration (offload_optimizer device nvme, the aio block) to ZeroEngineOptions::disk
// (and to ZeroEngineOptions::offload).
#pragma once

#include <optional>
#include <vector>

#include "optim/swap/swapped_state_store.h"
#include "optim/train_config.h"
#include "optim/zero/engine.h"
#include "optim/zero/host_optimizer_store.h"

namespace zt::optim {

class SwappedHostOptimizerStore final : public HostOptimizerStore {
 public:
  SwappedHostOptimizerStore(const swap::SwappedStateOptions& options, const IoOptions& io)
      : store_(options, io) {}
  HostStateBlock acquire(size_t block) override {
    const swap::SwappedStateBlock b = store_.acquire(block);
    return {b.master, b.exp_avg, b.exp_avg_sq};
  }
  void release(size_t block, bool modified) override { store_.release(block, modified); }
  void release_deferred(size_t block) override { store_.release(block, true, swap::WriteBack::later); }
  void flush() override { store_.flush(); }
  size_t block_count() const override { return store_.block_count(); }
  const swap::SwappedStateStore& store() const { return store_; }

 private:
  swap::SwappedStateStore store_;
};

// The swapped store's options for rank `rank` with one block (record) per sub-group of `block_numel`
// elements (the engine's cut_into_sub_groups of its unit slices).
swap::SwappedStateOptions swapped_state_options(const ZeroDiskTier& disk, int rank,
                                                std::vector<int64_t> block_numel);

// ZeroEngineOptions::disk for a resolved configuration: set for offload_optimizer device nvme.
std::optional<ZeroDiskTier> zero_disk_tier(const TrainConfig& config);
// ZeroEngineOptions::param_disk for a resolved configuration: set for offload_param device nvme.
std::optional<ZeroParamDiskTier> zero_param_disk_tier(const TrainConfig& config);

// ZeroEngineOptions::offload for a resolved configuration (the engine, the estimate printed at start and the
// out-of-memory advice all take this one): the gradients stream to the host at stages 2/3 with
// offload_optimizer unless gradient_accumulation_steps > 1 (the shard then sums micro-batches on the device).
ZeroOffload zero_offload(const TrainConfig& config);

}  // namespace zt::optim
