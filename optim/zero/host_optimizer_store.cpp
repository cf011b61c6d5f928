#include "optim/zero/host_optimizer_store.h"

#include <algorithm>

#include "runtime/check.h"

namespace zt::optim {
namespace {

Arena shard_arena(const char* name, int64_t numel, MemoryKind kind) {
  ArenaLayout layout;
  layout.add({"flat", Shape{numel}, DType::f32});
  return Arena(name, std::move(layout),
               {.kind = kind, .category = MemoryCategory::optimizer, .zero_fill = true});
}

}  // namespace

int64_t sub_group_count(int64_t numel, int64_t sub_group_size) {
  ZT_CHECK(sub_group_size >= 1, "zero_optimization.sub_group_size must be at least 1, got ", sub_group_size);
  ZT_CHECK(numel >= 0, "sub-groups of a block of ", numel, " elements");
  return std::max<int64_t>(1, (numel + sub_group_size - 1) / sub_group_size);
}

std::vector<HostBlockExtent> cut_into_sub_groups(const std::vector<HostBlockExtent>& blocks,
                                                 int64_t sub_group_size) {
  std::vector<HostBlockExtent> out;
  for (const HostBlockExtent& b : blocks) {
    const int64_t pieces = sub_group_count(b.numel, sub_group_size);
    int64_t offset = b.offset;
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t n = b.numel / pieces + (i < b.numel % pieces ? 1 : 0);
      out.push_back({offset, n});
      offset += n;
    }
  }
  return out;
}

ResidentHostOptimizerStore::ResidentHostOptimizerStore(std::vector<HostBlockExtent> blocks,
                                                       int64_t shard_numel, MemoryKind kind)
    : blocks_(std::move(blocks)),
      master_(shard_arena("offloaded master", shard_numel, kind)),
      exp_avg_(shard_arena("offloaded adam_m", shard_numel, kind)),
      exp_avg_sq_(shard_arena("offloaded adam_v", shard_numel, kind)) {
  ZT_CHECK(kind != MemoryKind::device, "the host optimizer store needs host memory");
  for (const HostBlockExtent& b : blocks_)
    ZT_CHECK(b.offset >= 0 && b.numel >= 0 && b.offset + b.numel <= shard_numel,
             "host optimizer store: block [", b.offset, ", ", b.offset + b.numel, ") outside the shard of ",
             shard_numel, " elements");
}

HostStateBlock ResidentHostOptimizerStore::acquire(size_t block) {
  ZT_CHECK(block < blocks_.size(), "host optimizer store: block ", block, " of ", blocks_.size());
  ZT_CHECK(acquired_ < 0, "host optimizer store: block ", block, " acquired while block ", acquired_,
           " is still held");
  acquired_ = static_cast<std::ptrdiff_t>(block);
  const HostBlockExtent& b = blocks_[block];
  auto span_of = [&](const Arena& a) {
    return std::span<float>(static_cast<float*>(a.data()) + b.offset, static_cast<size_t>(b.numel));
  };
  return {span_of(master_), span_of(exp_avg_), span_of(exp_avg_sq_)};
}

void ResidentHostOptimizerStore::release(size_t block, bool) {
  ZT_CHECK(acquired_ == static_cast<std::ptrdiff_t>(block), "host optimizer store: release of block ", block,
           " which is not held");
  acquired_ = -1;
}

}  // namespace zt::optim
