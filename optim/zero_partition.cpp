#include "optim/zero_partition.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "runtime/check.h"

namespace zt::optim {
namespace {

constexpr int64_t kF32 = static_cast<int64_t>(sizeof(float));

std::vector<bool> decay_flags(const ParameterTable& table) {
  std::vector<bool> flags;
  flags.reserve(table.size());
  for (const ParameterInfo& p : table.entries()) flags.push_back(p.weight_decay);
  return flags;
}

}  // namespace

ZeroPartition::ZeroPartition(const ParameterTable& table, int world_size)
    : ZeroPartition(table.layout(DType::f32, world_size), decay_flags(table), world_size) {}

ZeroPartition::ZeroPartition(ArenaLayout layout, const std::vector<bool>& weight_decay, int world_size)
    : layout_(std::move(layout)), world_size_(world_size) {
  ZT_CHECK(world_size >= 1, "ZeroPartition: world size must be at least 1, got ", world_size);
  ZT_CHECK(layout_.shard_count() == world_size, "ZeroPartition: layout is padded for ", layout_.shard_count(),
           " shards, world size is ", world_size);
  ZT_CHECK(weight_decay.size() == layout_.slots().size(), "ZeroPartition: ", weight_decay.size(),
           " weight-decay flags for ", layout_.slots().size(), " tensors");
  for (const ArenaSlot& s : layout_.slots())
    ZT_CHECK(s.dtype == DType::f32, "ZeroPartition: tensor '", s.name, "' is ", dtype_name(s.dtype),
             "; the partition is over the fp32 master buffer");
  total_numel_ = static_cast<int64_t>(layout_.total_bytes()) / kF32;
  shard_numel_ = static_cast<int64_t>(layout_.shard_bytes()) / kF32;

  // Walk tensors in flat order and cut each at the shard boundaries it crosses: piece k of tensor t covers
  // [max(tensor begin, shard begin), min(tensor end, shard end)) for every shard it overlaps.
  pieces_.assign(static_cast<size_t>(world_size), {});
  for (size_t t = 0; t < layout_.slots().size(); ++t) {
    const ArenaSlot& s = layout_.slots()[t];
    const int64_t begin = static_cast<int64_t>(s.offset) / kF32;
    const int64_t end = static_cast<int64_t>(s.end()) / kF32;
    for (int64_t pos = begin; pos < end;) {
      const int rank = static_cast<int>(pos / shard_numel_);
      const int64_t piece_end = std::min(end, shard_end(rank));
      pieces_[static_cast<size_t>(rank)].push_back({.tensor = t,
                                                    .tensor_offset = pos - begin,
                                                    .flat_offset = pos,
                                                    .shard_offset = pos - shard_begin(rank),
                                                    .numel = piece_end - pos,
                                                    .weight_decay = static_cast<bool>(weight_decay[t])});
      pos = piece_end;
    }
  }
}

void ZeroPartition::check_rank(int rank) const {
  ZT_CHECK(rank >= 0 && rank < world_size_, "ZeroPartition: rank ", rank, " outside world of ", world_size_);
}

int64_t ZeroPartition::shard_begin(int rank) const {
  check_rank(rank);
  return static_cast<int64_t>(rank) * shard_numel_;
}

int64_t ZeroPartition::shard_end(int rank) const {
  return shard_begin(rank) + shard_numel_;
}

const std::vector<ShardPiece>& ZeroPartition::pieces(int rank) const {
  check_rank(rank);
  return pieces_[static_cast<size_t>(rank)];
}

std::vector<TensorRange> ZeroPartition::shard_ranges(int rank) const {
  std::vector<TensorRange> ranges;
  for (const ShardPiece& p : pieces(rank))
    ranges.push_back({.offset = p.shard_offset, .numel = p.numel, .weight_decay = p.weight_decay});
  return ranges;
}

std::vector<int> ZeroPartition::owners(size_t tensor) const {
  ZT_CHECK(tensor < layout_.slots().size(), "ZeroPartition: tensor index ", tensor, " out of ",
           layout_.slots().size());
  const ArenaSlot& s = layout_.slots()[tensor];
  const int64_t first = static_cast<int64_t>(s.offset) / kF32;
  const int64_t last = static_cast<int64_t>(s.end()) / kF32 - 1;
  std::vector<int> ranks;
  if (last < first) return ranks;  // an empty tensor lives nowhere
  for (int64_t r = first / shard_numel_; r <= last / shard_numel_; ++r) ranks.push_back(static_cast<int>(r));
  return ranks;
}

std::vector<int> ZeroPartition::owners(std::string_view name) const {
  const ArenaSlot& slot = layout_.slot(name);
  return owners(static_cast<size_t>(&slot - layout_.slots().data()));
}

std::string ZeroPartition::describe() const {
  std::ostringstream out;
  out << "ZeRO partition: " << total_numel_ << " f32 elements (padded) over " << world_size_ << " ranks, "
      << shard_numel_ << " per shard\n";
  for (int r = 0; r < world_size_; ++r) {
    int64_t owned = 0;
    for (const ShardPiece& p : pieces(r)) owned += p.numel;
    out << "  rank " << r << ": [" << shard_begin(r) << ", " << shard_end(r) << ")  " << pieces(r).size()
        << " pieces, " << owned << " elements, " << (shard_numel_ - owned) << " padding\n";
  }
  return out.str();
}

}  // namespace zt::optim
