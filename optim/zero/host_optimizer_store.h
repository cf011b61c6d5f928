// Where a rank's offloaded optimizer state lives on the host (ZeRO CPU offload), block by block: each unit's
// slice (ZeroEngine's owned blocks) cut into sub-groups of at most zero_optimization.sub_group_size elements
// (cut_into_sub_groups), one store block each. The engine's CPU update asks for a block's
// fp32 master, Adam m and v, updates them in place and hands them back; checkpoints read and write them the
// same way. A store that keeps the state elsewhere (the NVMe tier: a swapped store) reads a block in on
// acquire and writes it back on release, so it plugs in here without the engine knowing.
//
// Contract: at most one block is acquired at a time per store (the engine's loops are sequential per
// rank); the spans stay valid until release; `modified` says whether the caller wrote them.
// release_deferred(k) is release(k, true) for a caller that is likely to change block k again next (loading
// parameters or a checkpoint one tensor at a time: a block holds many tensors): a store that writes back may
// write the block once, later — at the latest at flush(), which the engine calls when the loading is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/arena.h"

namespace zt::optim {

struct HostStateBlock {
  std::span<float> master;      // fp32 master weights of the block
  std::span<float> exp_avg;     // Adam m
  std::span<float> exp_avg_sq;  // Adam v
};

class HostOptimizerStore {
 public:
  virtual ~HostOptimizerStore() = default;
  virtual HostStateBlock acquire(size_t block) = 0;
  virtual void release(size_t block, bool modified) = 0;
  virtual void release_deferred(size_t block) { release(block, true); }
  virtual void flush() {}
  virtual size_t block_count() const = 0;
};

// One block of the shard: elements [offset, offset + numel) of the rank's shard buffer.
struct HostBlockExtent {
  int64_t offset = 0;
  int64_t numel = 0;
};

// DeepSpeed's sub_group_size: each block cut into the fewest pieces of at most `sub_group_size` elements,
// of near-equal size (the first numel % pieces one element longer), in order; an empty block stays one empty
// piece, so every block has at least one. Near-equal rather than full pieces and a remainder, because the
// disk tier's host buffers are all the size of the largest piece: equal pieces make the largest smallest.
std::vector<HostBlockExtent> cut_into_sub_groups(const std::vector<HostBlockExtent>& blocks,
                                                 int64_t sub_group_size);
// How many pieces cut_into_sub_groups makes of a block of `numel` elements.
int64_t sub_group_count(int64_t numel, int64_t sub_group_size);

// Everything resident in three host arenas of the shard's size (pinned_host: page-locked on a CUDA build),
// zero-filled (m and v start at zero; the master is loaded by the engine).
class ResidentHostOptimizerStore final : public HostOptimizerStore {
 public:
  ResidentHostOptimizerStore(std::vector<HostBlockExtent> blocks, int64_t shard_numel, MemoryKind kind);
  HostStateBlock acquire(size_t block) override;
  void release(size_t block, bool modified) override;
  size_t block_count() const override { return blocks_.size(); }
  static size_t bytes_for(int64_t shard_numel) { return 3 * static_cast<size_t>(shard_numel) * 4; }

 private:
  std::vector<HostBlockExtent> blocks_;
  Arena master_, exp_avg_, exp_avg_sq_;
  std::ptrdiff_t acquired_ = -1;
};

}  // namespace zt::optim
