// The memory estimator: per-rank bytes by category for a run's ZeRO stage and world size, computed from the
// same partition and activation plan the run allocates (nothing is allocated here), so it is printed before
// the first step (train_mrpc prints the run's plan at start; --estimate_memory prints every stage and exits).
//
//   category         what                                                       from
//   compute copy     the 16-bit parameters the model reads (f32: the master)    zero_state_bytes
//   gradients        f32 gradients (full, or the shard accumulator)             zero_state_bytes
//   master           f32 master weights (mixed precision only)                  zero_state_bytes
//   optimizer        Adam m and v                                               zero_state_bytes
//   buffers          gradient buckets, stage-3 gather buffers                   zero_state_bytes
//   activations      the model's planned activation arena + the batch           plan_activations
// Those are device bytes. With CPU offload (ZeroOffload) the master, m and v move to host memory, with the
// gradient shard copied down and a compute-dtype staging shard (offload_param: the stage-3 shard itself):
//   host             master + m + v + gradient shard + parameter shard              zero_state_bytes
// reported in its own column, since it is checked against the host's RAM, not the GPU's.
#pragma once

#include <cstddef>
#include <string>

#include "model/config.h"
#include "optim/zero/engine.h"

namespace zt::optim {

struct MemoryEstimate {
  int stage = 0;
  int world_size = 1;
  ZeroOffload offload;
  ZeroStateBytes state;
  size_t activations = 0;
  size_t total() const { return state.total() + activations; }  // device
  size_t host() const { return state.host_total(); }
};

MemoryEstimate estimate_memory(const DebertaConfig& model, int stage, int world_size, DType compute,
                               int64_t max_batch, int64_t max_length, ZeroOffload offload = {});

// A table per rank, columns by category (device) and host: one row per stage 0-3, then stages 1-3 with the
// optimizer offloaded and stage 3 with parameters offloaded too; the run's row marked.
std::string describe_memory_estimates(const DebertaConfig& model, int run_stage, int world_size,
                                      DType compute, int64_t max_batch, int64_t max_length,
                                      ZeroOffload run_offload = {});

}  // namespace zt::optim
