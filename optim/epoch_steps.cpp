#include "optim/epoch_steps.h"

#include "runtime/check.h"

namespace zt::optim {

int64_t EpochSteps::window(int64_t step) const {
  ZT_CHECK(step >= 0 && step < steps, "step ", step, " of an epoch of ", steps, " optimizer steps");
  const int64_t full = world_size * accumulation;
  return step + 1 < steps ? full : used_micro_batches() - (steps - 1) * full;
}

EpochSteps epoch_steps(int64_t examples, int64_t micro_batch_size, int64_t accumulation, int64_t world_size) {
  ZT_CHECK(examples > 0 && micro_batch_size > 0 && accumulation > 0 && world_size > 0,
           "epoch_steps needs positive sizes, got ", examples, " rows, micro-batch ", micro_batch_size,
           ", accumulation ", accumulation, ", world size ", world_size);
  EpochSteps e;
  e.world_size = world_size;
  e.accumulation = accumulation;
  e.micro_batches = examples / micro_batch_size + (examples % micro_batch_size != 0 ? 1 : 0);
  e.micro_batches_per_rank = e.micro_batches / world_size;
  ZT_CHECK(e.micro_batches_per_rank > 0, "--world_size ", world_size,
           " leaves ranks without data: ", examples, " training rows make ", e.micro_batches, " micro-batch",
           e.micro_batches == 1 ? "" : "es", " of ", micro_batch_size, ", fewer than the ", world_size,
           " ranks, so some rank would never take a step (use at most ", e.micro_batches,
           " ranks, a smaller --per_device_train_batch_size, or more rows)");
  e.steps = e.micro_batches_per_rank / accumulation + (e.micro_batches_per_rank % accumulation != 0 ? 1 : 0);
  return e;
}

}  // namespace zt::optim
