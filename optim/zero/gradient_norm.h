// The global gradient norm's parts of the step (optim/zero/engine.h, steps 2 and 3), identical in every
// stage on the values it sees:
//   2. CPU backend, world > 1: g /= W on the owned elements (a true division, as torch's DDP averaging), the
//      gradients already downloaded to the host too (the same float operation);
//   3. the sum of squares per (rank, unit) slice in double, added rank by rank, unit by unit — stage 0 takes
//      every rank's slices itself, the others all-gather their sums (as 64-bit patterns) — so every stage
//      and every rank sees the same norm; on the GPU one kernel per slice into one array read back once,
//      or the statistics taken earlier (the streamed slices', the early norm's).
#pragma once

#include <vector>

#include "optim/zero/gradient_reducer.h"
#include "optim/zero/offloaded_optimizer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/zero_plan.h"
#include "optim/zero/zero_streams.h"
#include "runtime/communicator.h"

namespace zt::optim {

struct GradientSums {
  double total = 0;       // the sum of squares of every gradient element (f64)
  double non_finite = 0;  // how many were not finite (fp16 overflow)
};

class GradientNorm {
 public:
  GradientNorm(const ZeroPlan& plan, const ZeroPartition& partition, Communicator& comm,
               const std::vector<OwnedBlock>& blocks, GradientReducer& reducer, OffloadedOptimizer* offloaded,
               ZeroStreams& streams, DeviceKind device)
      : plan_(plan),
        partition_(partition),
        comm_(comm),
        blocks_(blocks),
        reducer_(reducer),
        offloaded_(offloaded),
        streams_(streams),
        device_(device) {}

  void average_over_ranks() const;  // step 2 (the CPU backend)
  GradientSums sums() const;        // step 3 (collective at stages 1-3)

 private:
  const ZeroPlan& plan_;
  const ZeroPartition& partition_;
  Communicator& comm_;
  const std::vector<OwnedBlock>& blocks_;
  GradientReducer& reducer_;
  OffloadedOptimizer* offloaded_;
  ZeroStreams& streams_;
  DeviceKind device_;
};

}  // namespace zt::optim
