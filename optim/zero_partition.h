// ZeRO partitioner: which elements of the flat fp32 parameter buffer each rank owns (ZeRO-1/2 shard the
// optimizer state and the gradients this way; ZeRO-3 the parameters too).
//
// The flat buffer is ParameterTable::layout(DType::f32, world): every tensor at a 128-byte (32-float)
// aligned offset, in state-dict order, the total padded to a multiple of world * 32 floats. So with
//   total = layout.total_bytes() / 4 elements,  shard = total / world,
// rank r owns elements [r * shard, (r + 1) * shard) — equal, aligned shards for every world size. A tensor
// may straddle a shard boundary; it is then cut into one piece per rank it touches. Padding (between
// tensors and at the end) belongs to no piece: nothing ever reads or updates it.
//
// A piece records its position three ways, because each consumer needs a different one:
//   flat_offset  - element offset in the full flat buffer [total] (gather/scatter, checkpoints),
//   shard_offset - element offset inside the rank's shard [shard] = flat_offset - shard_begin(rank); this is
//                  what AdamW ranges use, since m/v exist only as [shard] buffers on each rank,
//   tensor_offset - first element of the tensor that the piece holds (its row-major index in the tensor).
//
//   ZeroPartition part(table, world);
//   std::vector<optim::TensorRange> ranges = part.shard_ranges(rank);   // offsets relative to the shard
//   std::span<float> my_params = flat_params.subspan(part.shard_begin(rank), part.shard_numel());
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/parameters.h"
#include "optim/adamw.h"
#include "runtime/arena.h"

namespace zt::optim {

// The part of one tensor that lies inside one rank's shard.
struct ShardPiece {
  size_t tensor = 0;          // index into the layout's slots (= ParameterTable::entries() order)
  int64_t tensor_offset = 0;  // first element of the tensor in this piece
  int64_t flat_offset = 0;    // element offset in the full flat buffer
  int64_t shard_offset = 0;   // element offset inside the owning rank's shard
  int64_t numel = 0;          // > 0
  bool weight_decay = true;
};

class ZeroPartition {
 public:
  // The flat f32 layout of `table` for `world_size` ranks (world_size >= 1).
  ZeroPartition(const ParameterTable& table, int world_size);
  // Any f32 layout (its shard count must equal world_size) with one weight-decay flag per slot.
  ZeroPartition(ArenaLayout layout, const std::vector<bool>& weight_decay, int world_size);

  int world_size() const { return world_size_; }
  const ArenaLayout& layout() const { return layout_; }
  int64_t total_numel() const { return total_numel_; }  // padded flat length, = world * shard_numel
  int64_t shard_numel() const { return shard_numel_; }  // a multiple of 32 (128 bytes of f32)
  int64_t shard_begin(int rank) const;                  // rank * shard_numel
  int64_t shard_end(int rank) const;                    // (rank + 1) * shard_numel

  // Pieces inside rank's shard, in flat order. Their union over all ranks is every tensor element once.
  const std::vector<ShardPiece>& pieces(int rank) const;
  // The same pieces as AdamW ranges with offsets relative to the shard (for [shard] buffers).
  std::vector<TensorRange> shard_ranges(int rank) const;

  // Ranks whose shard holds part of the tensor, ascending (one rank, or several when it straddles).
  std::vector<int> owners(size_t tensor) const;
  std::vector<int> owners(std::string_view name) const;  // throws for an unknown name

  // One line per rank: shard range, piece count, elements owned. For logs.
  std::string describe() const;

 private:
  void check_rank(int rank) const;

  ArenaLayout layout_;
  int world_size_;
  int64_t total_numel_ = 0;
  int64_t shard_numel_ = 0;
  std::vector<std::vector<ShardPiece>> pieces_;  // [world][pieces]
};

}  // namespace zt::optim
