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
//                    (stage 0 with one micro-batch per step: the arena holds the
//                    gradients too, on the slots backward has finished with, and
//                    `gradients` is 0; model/deberta_tensors.h, GradientLayout)
//   comm scratch     in-process GPU ranks, stage 0, world > 1: all_reduce         largest unit x 4 bytes
//                    goes through a per-rank scratch as large as the largest
//                    unit's f32 gradients (runtime/communicator.h); NCCL reduces
//                    in place and needs none
//   scratch          the GEMM workspace (32 MiB per stream) + the largest        kernels/cuda/gemm.cu,
//                    per-call scratch, the attention's (f32 positional scores     kernels/disentangled_
//                    and dP, P~ and Gc/Gp in T: 6.6 MiB per sample at xlarge)     attention.h
// On the GPU every buffer is counted at the caching allocator's size class (what it really holds). Measured
// on the H200 (docs/bench/2026-12-03-h200-acceptance, xlarge bf16, batch 40-128): every category and the
// total equal to the MiB (tests/optim/test_memory_estimate.cpp keeps those figures).
// Those are device bytes. With CPU offload (ZeroOffload) the master, m and v move to host memory, with the
// gradient shard copied down and a compute-dtype staging shard (offload_param: the stage-3 shard itself):
//   host             master + m + v + gradient shard + parameter shard              zero_state_bytes
// reported in its own column, since it is checked against the host's RAM, not the GPU's. With the disk tier
// (ZeroOffload::disk_buffers) master + m + v become buffer_count records of the largest sub-group
// (ZeroOffload::sub_group_size): buffer_count x sub-group x 12 bytes at most; the swap file
// (state.disk_file, on disk, in neither total) is every sub-group's record, 12 bytes an element of the shard.
// With parameters on disk (ZeroOffload::param_disk_buffers) the parameter shard becomes buffer_count records
// of the largest unit slice in the compute dtype (plus the staging shard with a delayed update), and
// disk_file adds the parameter file (the shard in the compute dtype).
#pragma once

#include <algorithm>
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
  size_t comm_scratch = 0;
  size_t scratch = 0;  // the GEMM workspace (GPU)
  size_t total() const { return state.total() + activations + comm_scratch + scratch; }  // device
  size_t host() const { return state.host_total(); }
};

// device: the buffers live on the GPU, where the caching allocator rounds each to its size class.
// micro_batches_per_step: per rank (gradient accumulation); 1 lets stage 0 put its gradients on the
// activations (gradients_on_activations).
MemoryEstimate estimate_memory(const DebertaConfig& model, int stage, int world_size, DType compute,
                               int64_t max_batch, int64_t max_length, ZeroOffload offload = {},
                               bool device = true, int64_t micro_batches_per_step = 1);

// What fits `cap_bytes` per rank according to the estimator, for an out-of-memory message: the largest
// per-rank batch at `stage` (and at each higher stage, where larger), and the lowest stage that fits `batch`.
// The estimate leaves out small transients (LayerNorm partials, pointer arrays), so a setting at the edge may
// still fail: the suggestions (and --auto_plan's plans) keep oom_headroom_bytes of the cap free: 1 % of it,
// at least 256 MiB, never over 5 % (the small CPU model's caps of a few hundred MiB). On one H100
// (docs/bench/2026-12-06-h100-plan and -goals: 71 runs at 8-34 GiB) the live peak was at most 0.015 GiB above
// the estimate, and the device allocator returns its cache before an allocation fails.
inline constexpr size_t kOomHeadroomMinBytes = size_t{256} << 20;
inline constexpr double kOomHeadroomShare = 0.01, kOomHeadroomMaxShare = 0.05;
inline size_t oom_headroom_bytes(size_t cap_bytes) {
  const auto cap = static_cast<double>(cap_bytes);
  return static_cast<size_t>(
      std::min(kOomHeadroomMaxShare * cap,
               std::max(static_cast<double>(kOomHeadroomMinBytes), kOomHeadroomShare * cap)));
}
// The bytes a setting may plan under `cap_bytes`.
inline double oom_budget_bytes(size_t cap_bytes) {
  return static_cast<double>(cap_bytes - std::min(cap_bytes, oom_headroom_bytes(cap_bytes)));
}
// With offload the optimizer state is not on the device: the stages are compared with the run's offload.
std::string fitting_settings_hint(const DebertaConfig& model, int stage, int world_size, DType compute,
                                  int64_t batch, int64_t max_length, size_t cap_bytes,
                                  ZeroOffload offload = {}, int64_t micro_batches_per_step = 1);

// A table per rank, columns by category (device) and host: one row per stage 0-3, then stages 1-3 with the
// optimizer offloaded and stage 3 with parameters offloaded too (and the run's partial offload, ratio < 1:
// 1 - ratio of the optimizer state on the device, ratio on the host); the run's row marked.
std::string describe_memory_estimates(const DebertaConfig& model, int run_stage, int world_size,
                                      DType compute, int64_t max_batch, int64_t max_length,
                                      ZeroOffload run_offload = {}, bool device = true,
                                      int64_t micro_batches_per_step = 1);

}  // namespace zt::optim
