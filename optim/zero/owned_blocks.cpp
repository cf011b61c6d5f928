#include "optim/zero/owned_blocks.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/check.h"

namespace zt::optim {

std::vector<OwnedBlock> owned_blocks(const ZeroPartition& partition, int stage, int rank,
                                     bool separate_master) {
  const auto& units = partition.units();
  std::vector<OwnedBlock> blocks;
  for (size_t u = 0; u < units.size(); ++u) {
    const ZeroUnit& unit = units[u];
    OwnedBlock b;
    b.unit = u;
    if (stage == 0) {
      b.numel = unit.numel;
      b.flat = b.master = b.moments = b.grad = b.compute = unit.flat_begin;
      b.ranges = partition.unit_ranges(u);
    } else {
      const int64_t slice = partition.slice_begin(u, rank);
      b.numel = unit.slice_numel;
      b.flat = slice;
      b.moments = unit.shard_begin;
      b.grad = stage == 1 ? slice : unit.shard_begin;
      b.compute = stage == 3 ? unit.shard_begin : slice;
      b.master = separate_master ? unit.shard_begin : b.compute;
      b.ranges = partition.slice_ranges(u, rank);
    }
    blocks.push_back(std::move(b));
  }
  return blocks;
}

int64_t offloaded_shard_numel(int64_t shard, double ratio) {
  ZT_CHECK(ratio > 0.0 && ratio <= 1.0,
           "the offloaded fraction of the optimizer state must be in (0, 1], got ", ratio);
  if (ratio >= 1.0) return shard;
  const auto units_of_32 = std::llround(ratio * static_cast<double>(shard) / 32.0);
  return std::clamp<int64_t>(units_of_32 * 32, std::min<int64_t>(32, shard), shard);
}

std::vector<HostBlockExtent> offloaded_sub_groups(const ZeroPartition& partition, int64_t sub_group_size,
                                                  int64_t host_numel) {
  std::vector<HostBlockExtent> slices;
  for (const ZeroUnit& unit : partition.units()) {
    const int64_t on_host = std::clamp<int64_t>(host_numel - unit.shard_begin, 0, unit.slice_numel);
    // An empty clip at the host part's end, inside the host buffers (it is never read).
    slices.push_back({std::min(unit.shard_begin, host_numel), on_host});
  }
  return cut_into_sub_groups(slices, sub_group_size);
}

SplitOwnedBlocks split_owned_blocks(const std::vector<OwnedBlock>& blocks, int64_t host_numel, bool mixed) {
  SplitOwnedBlocks out;
  for (const OwnedBlock& b : blocks) {
    const int64_t on_host = std::clamp<int64_t>(host_numel - b.master, 0, b.numel);
    OwnedBlock host = b;
    host.numel = on_host;
    host.ranges = ranges_within(b.ranges, 0, on_host);
    if (on_host == 0) host.master = host.moments = std::min(b.master, host_numel);  // inside the host buffers
    OwnedBlock device = b;
    device.numel = b.numel - on_host;
    device.flat += on_host;
    device.grad += on_host;
    device.compute += on_host;
    // An empty device part (the unit lies in the host part) at element 0 of the device's buffers.
    device.moments = device.numel == 0 ? 0 : b.moments + on_host - host_numel;
    device.master = !mixed ? device.compute : device.numel == 0 ? 0 : b.master + on_host - host_numel;
    device.ranges = ranges_within(b.ranges, on_host, device.numel);
    ZT_CHECK(device.moments >= 0 && device.master >= 0, "ZeRO engine: unit ", b.unit,
             "'s device part starts before the host part ends");
    out.host.push_back(std::move(host));
    out.device.push_back(std::move(device));
  }
  return out;
}

std::vector<SubGroup> owned_sub_groups(std::vector<OwnedBlock>& blocks,
                                       const std::vector<HostBlockExtent>& extents) {
  std::vector<SubGroup> sub_groups;
  size_t g = 0;
  for (OwnedBlock& b : blocks) {
    b.first_sub_group = g;
    int64_t begin = 0;
    while (g < extents.size() && begin < b.numel) {
      const HostBlockExtent& e = extents[g];
      ZT_CHECK(e.offset == b.master + begin, "ZeRO engine: sub-group ", g, " is not at element ", begin,
               " of unit ", b.unit);
      sub_groups.push_back({begin, e.numel, ranges_within(b.ranges, begin, e.numel)});
      begin += e.numel;
      ++g;
    }
    if (b.numel == 0) {  // an empty slice keeps one empty sub-group
      sub_groups.push_back({0, 0, {}});
      ++g;
    }
    ZT_CHECK(begin == b.numel, "ZeRO engine: the sub-groups of unit ", b.unit, " cover ", begin, " of ",
             b.numel, " elements");
    b.end_sub_group = g;
  }
  ZT_CHECK(g == extents.size(), "ZeRO engine: ", extents.size() - g, " sub-groups past the last unit");
  return sub_groups;
}

std::vector<int64_t> numel_of(const std::vector<HostBlockExtent>& extents) {
  std::vector<int64_t> out;
  for (const HostBlockExtent& e : extents) out.push_back(e.numel);
  return out;
}

std::vector<TensorRange> ranges_within(const std::vector<TensorRange>& ranges, int64_t begin, int64_t numel) {
  std::vector<TensorRange> out;
  for (const TensorRange& r : ranges) {
    const int64_t lo = std::max(r.offset, begin);
    const int64_t hi = std::min(r.offset + r.numel, begin + numel);
    if (lo < hi) out.push_back({lo - begin, hi - lo, r.weight_decay});
  }
  return out;
}

std::vector<int64_t> unit_slices(const ZeroPartition& partition) {
  std::vector<int64_t> out;
  for (const ZeroUnit& u : partition.units()) out.push_back(u.slice_numel);
  return out;
}

int64_t largest_slice(const ZeroPartition& partition) {
  int64_t n = 0;
  for (const ZeroUnit& u : partition.units()) n = std::max(n, u.slice_numel);
  return n;
}

}  // namespace zt::optim
