// Where one rank's optimizer state for each unit lives (OwnedBlock: element offsets into each of the
// engine's buffers, and the tensor ranges AdamW updates), and, with the optimizer offloaded, each block cut
// into the host store's sub-groups (ZeroOffload::sub_group_size). Pure functions of the partition.
//
//   stage 0     the whole unit, at its flat offset in every (full) buffer
//   stage 1-3   the rank's slice of the unit: the moments (and a separate master) at the unit's shard
//               offset; gradients at the slice's flat offset (stage 1, full buffer) or the shard offset;
//               the compute copy at the shard offset (stage 3) or the slice's flat offset
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "optim/adamw.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/partition.h"

namespace zt::optim {

struct OwnedBlock {
  size_t unit = 0;
  int64_t numel = 0;                // whole unit (stage 0) or the rank's slice
  int64_t flat = 0;                 // first element in the full flat buffer
  int64_t master = 0;               // offset in the master buffer
  int64_t moments = 0;              // offset in m and v
  int64_t grad = 0;                 // offset in the gradient buffer (full or shard accumulator)
  int64_t compute = 0;              // offset in the compute copy (full or shard)
  std::vector<TensorRange> ranges;  // relative to the block
  // Offload: the block's sub-groups, [first_sub_group, end_sub_group) of owned_sub_groups' list.
  size_t first_sub_group = 0, end_sub_group = 0;
};

// Offload: one sub-group of an owned block, one block of the host store.
struct SubGroup {
  int64_t begin = 0;  // first element, relative to the owned block
  int64_t numel = 0;
  std::vector<TensorRange> ranges;  // the block's ranges inside it, relative to the sub-group
};

// One block per unit, in unit order. separate_master: the master is not the compute copy (mixed precision
// or offload), so at stages 1-3 it sits at the shard offset.
std::vector<OwnedBlock> owned_blocks(const ZeroPartition& partition, int stage, int rank,
                                     bool separate_master);

// Partial offload (ZeroOffload::ratio): the host part of a rank's shard is its first H elements, H = ratio x
// shard rounded to the nearest multiple of 32 (the units' slices are multiples of 32, so the device part of a
// unit split by H starts 128-byte aligned), at least 32 and at most the shard; ratio 1 gives the shard. A
// prefix, because the shard's offsets then stay the host buffers' offsets (the host arenas are H long) and
// the device buffers' are shifted by -H (S - H long); every rank cuts its own shard (the same S) alike.
int64_t offloaded_shard_numel(int64_t shard, double ratio);

// The offloaded state's sub-groups (store blocks) in shard elements: each unit's slice, at its shard offset,
// clipped to the shard's first `host_numel` elements (offloaded_shard_numel; an empty clip keeps one empty
// block) and cut by sub_group_size. With the whole shard offloaded the owned blocks of stages 1-3 are these
// slices.
std::vector<HostBlockExtent> offloaded_sub_groups(const ZeroPartition& partition, int64_t sub_group_size,
                                                  int64_t host_numel);

// Partial offload: each owned block (stages 1-3) cut at shard element `host_numel` into the part whose state
// lives on the host (`host`: the block's first elements, the same offsets; empty past host_numel) and the
// part on the device (`device`: the rest, its master and moments at shard offset - host_numel in the device's
// buffers of S - host_numel elements, or in f32 the compute copy itself as without offload). Both one block
// per unit, in unit order.
struct SplitOwnedBlocks {
  std::vector<OwnedBlock> host, device;
};
SplitOwnedBlocks split_owned_blocks(const std::vector<OwnedBlock>& blocks, int64_t host_numel, bool mixed);

// Sets each block's [first_sub_group, end_sub_group) and returns the sub-groups, block by block, checking
// that `extents` (offloaded_sub_groups) cut exactly the blocks' elements. An empty block keeps one empty
// sub-group.
std::vector<SubGroup> owned_sub_groups(std::vector<OwnedBlock>& blocks,
                                       const std::vector<HostBlockExtent>& extents);

std::vector<int64_t> numel_of(const std::vector<HostBlockExtent>& extents);

// The parts of `ranges` (relative to a block) inside the block's elements [begin, begin + numel), relative
// to `begin`: what AdamW updates in that sub-group.
std::vector<TensorRange> ranges_within(const std::vector<TensorRange>& ranges, int64_t begin, int64_t numel);

// The rank's slice of each unit, in unit order: the records of the parameter file (parameters on disk).
std::vector<int64_t> unit_slices(const ZeroPartition& partition);

// The largest slice of any unit: the offload_param upload buffer.
int64_t largest_slice(const ZeroPartition& partition);

}  // namespace zt::optim
