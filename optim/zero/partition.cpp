#include "optim/zero/partition.h"

#include <algorithm>
#include <sstream>

#include "runtime/check.h"

namespace zt::optim {
namespace {

constexpr int64_t kAlign = ParameterTable::kLayoutAlignElements;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

bool is_embedding_tensor(const ParameterInfo& info) {
  return info.name.starts_with("deberta.embeddings.");
}

}  // namespace

ZeroPartition::ZeroPartition(const ParameterTable& table, int world_size)
    : table_(&table), world_size_(world_size) {
  ZT_CHECK(world_size >= 1, "ZeroPartition: world size must be at least 1, got ", world_size);
  const auto& entries = table.entries();
  // Unit of each tensor: 0 embeddings, 1 + l layer l, n + 1 shared. State-dict order puts them in this
  // order; a table that does not is a bug in the parameter table, not a user error.
  int layers = 0;
  for (const ParameterInfo& info : entries) layers = std::max(layers, info.layer + 1);
  const size_t shared = static_cast<size_t>(layers) + 1;
  tensor_units_.reserve(entries.size());
  for (const ParameterInfo& info : entries) {
    const size_t unit =
        info.layer >= 0 ? static_cast<size_t>(info.layer) + 1 : (is_embedding_tensor(info) ? 0 : shared);
    ZT_CHECK(tensor_units_.empty() || unit >= tensor_units_.back(), "ZeroPartition: tensor ", info.name,
             " is out of unit order (embeddings, layers, shared tensors)");
    tensor_units_.push_back(unit);
  }
  units_.resize(shared + 1);
  units_[0].name = "embeddings";
  for (int l = 0; l < layers; ++l) {
    units_[static_cast<size_t>(l) + 1].name = str("layer.", l);
    units_[static_cast<size_t>(l) + 1].layer = l;
  }
  units_[shared].name = "shared";

  // Lay the tensors out unit by unit: 32-element aligned tensors, each unit padded to world * 32.
  const int64_t unit_multiple = kAlign * world_size;
  int64_t cursor = 0;
  size_t t = 0;
  for (size_t u = 0; u < units_.size(); ++u) {
    ZeroUnit& unit = units_[u];
    unit.flat_begin = cursor;
    unit.first_tensor = t;
    for (; t < entries.size() && tensor_units_[t] == u; ++t) {
      cursor = round_up(cursor, kAlign);
      tensor_offsets_.push_back(cursor);
      cursor += entries[t].numel();
      unit.tensor_numel += entries[t].numel();
    }
    unit.end_tensor = t;
    cursor = round_up(cursor, unit_multiple);
    unit.numel = cursor - unit.flat_begin;
    unit.slice_numel = unit.numel / world_size;
  }
  total_numel_ = cursor;
  int64_t shard_cursor = 0;
  for (ZeroUnit& unit : units_) {
    unit.shard_begin = shard_cursor;
    shard_cursor += unit.slice_numel;
  }

  // Cut each tensor at the slice boundaries of its unit.
  pieces_.assign(static_cast<size_t>(world_size), {});
  for (size_t k = 0; k < entries.size(); ++k) {
    const ZeroUnit& unit = units_[tensor_units_[k]];
    const int64_t begin = tensor_offsets_[k];
    const int64_t end = begin + entries[k].numel();
    for (int64_t pos = begin; pos < end;) {
      const int rank = static_cast<int>((pos - unit.flat_begin) / unit.slice_numel);
      const int64_t slice = unit.flat_begin + rank * unit.slice_numel;
      const int64_t piece_end = std::min(end, slice + unit.slice_numel);
      pieces_[static_cast<size_t>(rank)].push_back({.tensor = k,
                                                    .unit = tensor_units_[k],
                                                    .tensor_offset = pos - begin,
                                                    .flat_offset = pos,
                                                    .shard_offset = unit.shard_begin + (pos - slice),
                                                    .numel = piece_end - pos,
                                                    .weight_decay = entries[k].weight_decay});
      pos = piece_end;
    }
  }
  for (auto& rank_pieces : pieces_)
    std::sort(rank_pieces.begin(), rank_pieces.end(),
              [](const ShardPiece& a, const ShardPiece& b) { return a.flat_offset < b.flat_offset; });
}

ArenaLayout ZeroPartition::layout(DType dtype) const {
  const size_t elem = dtype_size(dtype);
  ArenaLayout out(static_cast<size_t>(kAlign) * elem);
  const auto& entries = table_->entries();
  for (const ZeroUnit& unit : units_) {
    for (size_t k = unit.first_tensor; k < unit.end_tensor; ++k) {
      const ArenaSlot& slot = out.add({entries[k].name, entries[k].shape, dtype});
      ZT_CHECK(static_cast<int64_t>(slot.offset / elem) == tensor_offsets_[k], "ZeroPartition: layout of ",
               entries[k].name, " disagrees with the partition");
    }
    out.pad_to_multiple(static_cast<size_t>(kAlign * world_size_) * elem);
  }
  ZT_CHECK(static_cast<int64_t>(out.total_bytes() / elem) == total_numel_,
           "ZeroPartition: layout total disagrees with the partition");
  return out;
}

size_t ZeroPartition::unit_of_tensor(size_t tensor) const {
  ZT_CHECK(tensor < tensor_units_.size(), "ZeroPartition: tensor index ", tensor, " out of range");
  return tensor_units_[tensor];
}

int64_t ZeroPartition::largest_layer_unit() const {
  int64_t largest = 0;
  for (const ZeroUnit& unit : units_)
    if (unit.layer >= 0) largest = std::max(largest, unit.numel);
  return largest;
}

void ZeroPartition::check_rank(int rank) const {
  ZT_CHECK(rank >= 0 && rank < world_size_, "ZeroPartition: rank ", rank, " outside world of ", world_size_);
}

int64_t ZeroPartition::slice_begin(size_t unit, int rank) const {
  check_rank(rank);
  return units_.at(unit).flat_begin + rank * units_.at(unit).slice_numel;
}

const std::vector<ShardPiece>& ZeroPartition::pieces(int rank) const {
  check_rank(rank);
  return pieces_[static_cast<size_t>(rank)];
}

std::vector<TensorRange> ZeroPartition::slice_ranges(size_t unit, int rank) const {
  const int64_t begin = slice_begin(unit, rank);
  std::vector<TensorRange> ranges;
  for (const ShardPiece& p : pieces(rank))
    if (p.unit == unit)
      ranges.push_back({.offset = p.flat_offset - begin, .numel = p.numel, .weight_decay = p.weight_decay});
  return ranges;
}

std::vector<TensorRange> ZeroPartition::unit_ranges(size_t unit) const {
  const ZeroUnit& u = units_.at(unit);
  std::vector<TensorRange> ranges;
  for (size_t k = u.first_tensor; k < u.end_tensor; ++k)
    ranges.push_back({.offset = tensor_offsets_[k] - u.flat_begin,
                      .numel = table_->entries()[k].numel(),
                      .weight_decay = table_->entries()[k].weight_decay});
  return ranges;
}

std::string ZeroPartition::describe() const {
  std::ostringstream out;
  out << "ZeRO partition: " << total_numel_ << " elements (padded) in " << units_.size() << " units over "
      << world_size_ << " ranks, " << shard_numel() << " per rank\n";
  for (const ZeroUnit& u : units_)
    out << "  " << u.name << ": " << (u.end_tensor - u.first_tensor) << " tensors, " << u.tensor_numel
        << " elements, slice " << u.slice_numel << "\n";
  return out.str();
}

}  // namespace zt::optim
