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

// The offloaded state's sub-groups (store blocks) in shard elements: each unit's slice, at its shard offset,
// cut by sub_group_size. The owned blocks of stages 1-3 are these slices.
std::vector<HostBlockExtent> offloaded_sub_groups(const ZeroPartition& partition, int64_t sub_group_size);

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
