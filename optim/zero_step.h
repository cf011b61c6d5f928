// One ZeRO-1/2 optimizer step over flat fp32 buffers on the ranks of a Communicator (groundwork: the trainer
// does not call it yet). Each rank holds the full gradients of its own micro-batch and a full copy of the
// parameters; the Adam state m/v exists only for the rank's shard (ZeroPartition).
//
// Shapes (total = partition.total_numel(), shard = partition.shard_numel(), W = world size, r = rank):
//   grads      [total] in: this rank's local gradients. Out: elements [r*shard, (r+1)*shard) hold the mean,
//              clipped gradient of the shard's pieces; everything else is scratch (the reduce-scatter input).
//   params     [total] in/out: identical on every rank before and after; updated on the pieces only.
//   exp_avg    [shard] in/out: m of the rank's shard, zero before the first step.
//   exp_avg_sq [shard] in/out: v of the rank's shard, zero before the first step.
//
// The step:
//   1. reduce_scatter_sum(grads) in place: rank r keeps only the rank-order sum of its shard (ZeRO-2; ZeRO-1
//      all-reduces instead, but the shard it then updates holds the same numbers).
//   2. g /= W on the pieces: the mean over ranks, as DDP and DeepSpeed average data-parallel gradients.
//   3. Global norm: each rank sums g^2 over its pieces in double; the W sums are all-gathered (as raw 8-byte
//      values, so no precision is lost to an f32 all-reduce) and added in rank order on every rank, so all
//      ranks see the same norm = sqrt(sum). With max_grad_norm > 0, the pieces are scaled by
//      float(clip_coefficient(norm, max_grad_norm)) when it is < 1 (torch's clip_grad_norm_ rule).
//   4. adamw.begin_step(), then AdamW on the shard's pieces only (padding is never read or written).
//   5. all_gather the updated parameter shards in place, so every rank has the full params again.
// Returns the pre-clip global norm. If it is not finite (an overflow), nothing is clipped or updated, the
// AdamW step count does not advance and params are unchanged on every rank (all ranks see the same norm, so
// they skip together); the caller decides what to do, as with clip_grad_norm.
//
// Every rank must call it with the same partition, lr and max_grad_norm (they are collectives).
#pragma once

#include <span>

#include "optim/adamw.h"
#include "optim/zero_partition.h"
#include "runtime/communicator.h"

namespace zt::optim {

struct ZeroShardState {
  std::span<float> exp_avg;     // [shard]
  std::span<float> exp_avg_sq;  // [shard]
};

double zero2_step(Communicator& comm, std::span<float> grads, std::span<float> params, ZeroShardState state,
                  const ZeroPartition& partition, AdamW& adamw, double lr, double max_grad_norm);

}  // namespace zt::optim
