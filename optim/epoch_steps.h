// How many optimizer steps an epoch has, and how many micro-batches each of them takes: the one rule that
// the resolved configuration (num_update_steps_per_epoch, num_training_steps, the schedule's total), the
// start-up plan, the resume check and the training loop all use.
//
// Note [Optimizer steps of an epoch]
// The epoch is one order of the N training rows cut into M = ceil(N/B) micro-batches of B rows (the last may
// be shorter), read in that order by every world size. A step's window is W·k of them (W ranks,
// k = gradient_accumulation_steps); micro-batch i of the window goes to rank i % W, so world W with
// accumulation k sees the micro-batches of world 1 with accumulation W·k, in the same order. The epoch's
// last window takes what is left, cut to a multiple of W so that every rank runs as many micro-batches as the
// others (the collectives stay in step); the M mod W micro-batches cut off are not trained on that epoch
// (at W = 1 nothing is cut). So each rank runs floor(M/W) micro-batches an epoch, in ceil(floor(M/W)/k)
// steps. A world size with floor(M/W) = 0 leaves a rank without a micro-batch: refused.
#pragma once

#include <cstdint>

namespace zt::optim {

struct EpochSteps {
  int64_t micro_batches = 0;           // M = ceil(N / B): the epoch's micro-batches over all ranks
  int64_t micro_batches_per_rank = 0;  // floor(M / W): what each rank runs
  int64_t steps = 0;                   // ceil(floor(M / W) / k): optimizer steps of the epoch
  int64_t world_size = 1;              // W
  int64_t accumulation = 1;            // k

  // Micro-batches (over all ranks) that the epoch trains on: W · floor(M / W).
  int64_t used_micro_batches() const { return micro_batches_per_rank * world_size; }
  // Micro-batches (over all ranks) of the epoch's step `step` (0-based): W·k, and the rest for the last.
  int64_t window(int64_t step) const;
};

// Throws zt::Error (naming the rows, the micro-batches and the world size) when a rank would get no
// micro-batch; every argument must be positive.
EpochSteps epoch_steps(int64_t examples, int64_t micro_batch_size, int64_t accumulation, int64_t world_size);

}  // namespace zt::optim
