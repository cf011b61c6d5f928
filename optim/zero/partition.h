// ZeRO partitioner: which parameter elements each rank owns, unit by unit.
//
// A *unit* is a group of tensors whose gradients become final together in backward and whose parameters
// are used together in forward, so it is reduced (reduce-scatter / all-reduce) and, under stage 3,
// gathered (all-gather) by one collective:
//   unit 0          "embeddings": deberta.embeddings.* (word embeddings and their LayerNorm)
//   unit 1 + l      "layer.l": every tensor of encoder layer l
//   unit n + 1      "shared": the rest (relative embeddings, encoder LayerNorm, conv, pooler, classifier),
//                   read at several points of forward and backward
// These are contiguous in state-dict order, so the flat buffer is the state-dict layout of
// ParameterTable::layout with each unit's end padded to a multiple of world * 32 elements. With
//   U = unit numel (padded),  s = U / world,
// rank r owns elements [begin + r * s, begin + (r + 1) * s) of each unit, and its *shard buffer* is the
// concatenation of those slices in unit order ([shard_numel] = total / world elements). Per-unit slicing is
// what makes every unit's gradient reduction a true reduce-scatter and every stage-3 gather an all-gather
// over all ranks — a flat cut of the whole buffer would put a layer on one or two ranks and turn its
// gather into a broadcast (FSDP and llm.c shard per layer for the same reason). A tensor lies inside one
// unit, so a rank holds at most one piece of it. With world 1 the layout equals table.layout(f32): the
// tensors are already 32-aligned, so the per-unit padding adds nothing.
//
// A piece records its position three ways, because each consumer needs a different one:
//   flat_offset   element offset in the full flat buffer [total] (gathers, the model's view),
//   shard_offset  element offset inside the rank's shard buffer [shard] (its master / m / v),
//   tensor_offset first element of the tensor that the piece holds (row-major; checkpoints).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/parameters.h"
#include "optim/adamw.h"
#include "runtime/arena.h"

namespace zt::optim {

struct ZeroUnit {
  std::string name;          // "embeddings", "layer.3", "shared"
  int layer = -1;            // encoder layer of a layer unit, else -1
  size_t first_tensor = 0;   // [first_tensor, end_tensor): indices into ParameterTable::entries()
  size_t end_tensor = 0;     //
  int64_t flat_begin = 0;    // first element in the full flat buffer
  int64_t numel = 0;         // padded: a multiple of world * 32
  int64_t slice_numel = 0;   // numel / world: each rank's slice of the unit
  int64_t shard_begin = 0;   // where the unit's slice starts inside every rank's shard buffer
  int64_t tensor_numel = 0;  // elements of real tensors in the unit (no padding)
};

// The part of one tensor that lies inside one rank's slice of its unit.
struct ShardPiece {
  size_t tensor = 0;          // index into ParameterTable::entries()
  size_t unit = 0;            // index into ZeroPartition::units()
  int64_t tensor_offset = 0;  // first element of the tensor in this piece
  int64_t flat_offset = 0;    // element offset in the full flat buffer
  int64_t shard_offset = 0;   // element offset inside the owning rank's shard buffer
  int64_t numel = 0;          // > 0
  bool weight_decay = true;
};

class ZeroPartition {
 public:
  ZeroPartition(const ParameterTable& table, int world_size);

  int world_size() const { return world_size_; }
  // The flat layout of `dtype` (every dtype shares element offsets): the model binds its views to it.
  ArenaLayout layout(DType dtype) const;
  int64_t total_numel() const { return total_numel_; }  // padded, = world * shard_numel
  int64_t shard_numel() const { return total_numel_ / world_size_; }
  int64_t tensor_flat_offset(size_t tensor) const { return tensor_offsets_[tensor]; }

  const std::vector<ZeroUnit>& units() const { return units_; }
  size_t embeddings_unit() const { return 0; }
  size_t layer_unit(int layer) const { return static_cast<size_t>(layer) + 1; }
  size_t shared_unit() const { return units_.size() - 1; }
  size_t unit_of_tensor(size_t tensor) const;
  int64_t largest_layer_unit() const;  // numel of the largest layer unit (bucket and gather sizes)

  // Rank r's slice of unit u: elements [slice_begin, slice_begin + slice_numel) of the flat buffer.
  int64_t slice_begin(size_t unit, int rank) const;

  // Pieces inside rank's shard, in flat order. Their union over all ranks is every tensor element once.
  const std::vector<ShardPiece>& pieces(int rank) const;
  // The pieces of rank inside unit u, as AdamW ranges relative to the start of the rank's slice of u.
  std::vector<TensorRange> slice_ranges(size_t unit, int rank) const;
  // Every tensor of unit u as AdamW ranges relative to the unit's flat begin (stage 0 updates whole units).
  std::vector<TensorRange> unit_ranges(size_t unit) const;

  // One line per unit and a summary per rank. For logs.
  std::string describe() const;

 private:
  void check_rank(int rank) const;

  const ParameterTable* table_;
  int world_size_;
  int64_t total_numel_ = 0;
  std::vector<int64_t> tensor_offsets_;  // flat element offset per tensor
  std::vector<size_t> tensor_units_;     // unit per tensor
  std::vector<ZeroUnit> units_;
  std::vector<std::vector<ShardPiece>> pieces_;  // [world][pieces]
};

}  // namespace zt::optim
