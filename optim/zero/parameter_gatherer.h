// Stage 3's parameter gatherer: before a unit's forward or backward, the unit's full compute-dtype values
// into its gather buffer (UnitBuffers) from every rank's slice (all_gather on the current stream). The
// rank's slice comes from the device shard, or with offload_param from the host shard or its record in the
// parameter file (parameters on disk), uploaded first into one slice-sized buffer (world > 1; at world
// size 1 straight into the gather buffer). Records are read ahead in the order the units are used
// (UnitOrder::upcoming), as many as the file's free buffers take.
#pragma once

#include <cstddef>
#include <memory>

#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "optim/zero/unit_buffers.h"
#include "optim/zero/unit_order.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"

namespace zt::optim {

class ParameterGatherer {
 public:
  // The slice's source: `shard` (the compute copy's shard, on the device or, with `on_host`, the host), or
  // `file` (parameters on disk). `upload`: the slice buffer (offload_param at world > 1), else null.
  struct Source {
    const Arena* shard = nullptr;
    bool on_host = false;
    SwappedParameterShard* file = nullptr;
  };
  ParameterGatherer(const ZeroPartition& partition, Communicator& comm, DType compute, UnitBuffers buffers,
                    std::unique_ptr<Arena> upload, Source source);

  const Arena& buffer(size_t unit) const { return buffers_.at(partition_, unit); }
  // Unit `unit`'s parameters into its buffer for `phase` (forward or backward; last_micro: the window's last
  // micro-batch, after which the update reads the records next).
  void gather(size_t unit, UnitPhase phase, bool last_micro);
  // Parameters on disk: reads of the records used after `unit` in `phase`.
  void prefetch(size_t unit, UnitPhase phase, bool last_micro);

 private:
  const ZeroPartition& partition_;
  Communicator& comm_;
  DType compute_;
  UnitOrder order_;
  UnitBuffers buffers_;
  std::unique_ptr<Arena> upload_;
  Source source_;
};

}  // namespace zt::optim
