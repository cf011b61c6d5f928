// The disk tier behind the engine's host-state seam: a HostOptimizerStore whose blocks live in a swap file
// (optim/swap/swapped_state_store.h, Note [Swapped optimizer state]) instead of host arenas. The resolved
// configuration's ZeroEngineOptions::disk / ::offload are filled in app/config/engine_options.h.
#pragma once

#include <vector>

#include "optim/swap/swapped_state_store.h"
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

}  // namespace zt::optim
