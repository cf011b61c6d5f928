#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "runtime/arena.h"
#include "runtime/check.h"

namespace zt {
namespace {

ArenaLayout three_tensors() {
  return ArenaLayout({
      {"embeddings.weight", {10, 3}, DType::bf16},  // 60 bytes at 0
      {"encoder.0.bias", {5}, DType::f32},          // 20 bytes at 128
      {"classifier.weight", {2, 65}, DType::f32},   // 520 bytes at 256
  });
}

TEST(ArenaLayout, PlacesTensorsAtAlignedOffsetsWithoutAllocating) {
  ArenaLayout layout = three_tensors();
  ASSERT_EQ(layout.slots().size(), 3u);
  EXPECT_EQ(layout.slot("embeddings.weight").offset, 0u);
  EXPECT_EQ(layout.slot("embeddings.weight").nbytes, 60u);
  EXPECT_EQ(layout.slot("encoder.0.bias").offset, 128u);
  EXPECT_EQ(layout.slot("classifier.weight").offset, 256u);
  EXPECT_EQ(layout.slot("classifier.weight").nbytes, 520u);
  EXPECT_EQ(layout.used_bytes(), 776u);
  EXPECT_EQ(layout.total_bytes(), 896u);  // 7 * 128
  for (const ArenaSlot& s : layout.slots()) EXPECT_EQ(s.offset % kArenaAlignment, 0u) << s.name;
  std::string table = layout.describe("parameters");
  EXPECT_NE(table.find("classifier.weight"), std::string::npos) << table;
  EXPECT_NE(table.find("[2, 65]"), std::string::npos) << table;
}

TEST(ArenaLayout, PadsToEqualAlignedShards) {
  ArenaLayout layout = three_tensors();
  for (int world : {1, 2, 3, 4, 8}) {
    layout.set_shard_count(world);
    EXPECT_GE(layout.total_bytes(), layout.used_bytes());
    EXPECT_EQ(layout.total_bytes() % (world * kArenaAlignment), 0u) << world;
    EXPECT_EQ(layout.shard_bytes() * world, layout.total_bytes());
    EXPECT_EQ(layout.shard_bytes() % kArenaAlignment, 0u);
    EXPECT_LT(layout.total_bytes() - layout.used_bytes(), world * kArenaAlignment);  // minimal padding
    EXPECT_EQ(layout.shard_offset(world - 1), layout.total_bytes() - layout.shard_bytes());
  }
  layout.set_shard_count(3);
  EXPECT_EQ(layout.total_bytes(), 1152u);  // 776 rounded up to a multiple of 384
  EXPECT_THROW(layout.shard_offset(3), Error);
  EXPECT_THROW(layout.set_shard_count(0), Error);
}

TEST(ArenaLayout, RejectsDuplicateAndUnknownNames) {
  ArenaLayout layout = three_tensors();
  EXPECT_THROW(layout.add({"encoder.0.bias", {1}, DType::f32}), Error);
  EXPECT_THROW(layout.slot("encoder.1.bias"), Error);
  EXPECT_FALSE(layout.contains("encoder.1.bias"));
  EXPECT_THROW(layout.add({"", {1}, DType::f32}), Error);
  EXPECT_THROW(ArenaLayout(100), Error);  // alignment must be a power of two
}

TEST(Arena, HandsOutNamedViewsIntoOneBuffer) {
  Arena arena("parameters", three_tensors(), {.kind = MemoryKind::host, .zero_fill = true});
  ASSERT_NE(arena.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.data()) % kArenaAlignment, 0u);
  Tensor bias = arena.tensor("encoder.0.bias");
  EXPECT_EQ(bias.dtype(), DType::f32);
  EXPECT_EQ(bias.shape(), (Shape{5}));
  EXPECT_EQ(bias.device(), DeviceKind::cpu);
  EXPECT_EQ(static_cast<char*>(bias.data()) - static_cast<char*>(arena.data()), 128);
  bias.data_as<float>()[4] = 2.5f;
  EXPECT_EQ(arena.flat(DType::f32).data_as<float>()[128 / 4 + 4], 2.5f);
  EXPECT_EQ(arena.flat(DType::f32).data_as<float>()[0], 0.0f);  // zero filled
  EXPECT_EQ(arena.flat(DType::bf16).numel(), 448);
  EXPECT_THROW(arena.tensor("missing"), Error);
  try {
    arena.tensor("missing");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("parameters"), std::string::npos) << e.what();
  }
}

// Arena::over names views into memory owned elsewhere, frees nothing (the owner does, after it), and moves
// like an owning arena; misaligned or missing memory is refused.
TEST(Arena, OverMemoryOwnedElsewhereViewsItAndFreesNothing) {
  Arena owner("activations", ArenaLayout({{"all", {1024}, DType::f32}}), {.kind = MemoryKind::host});
  auto* base = static_cast<char*>(owner.data());
  {
    Arena view = Arena::over("gradients", three_tensors(), base + 256, MemoryKind::host);
    EXPECT_FALSE(view.owns_memory());
    EXPECT_EQ(static_cast<char*>(view.tensor("encoder.0.bias").data()), base + 256 + 128);
    Arena moved = std::move(view);
    EXPECT_EQ(moved.data(), base + 256);
    moved.tensor("encoder.0.bias").data_as<float>()[0] = 1.5f;
  }  // both destroyed: nothing freed
  EXPECT_EQ(owner.tensor("all").data_as<float>()[(256 + 128) / 4], 1.5f);
  EXPECT_TRUE(owner.owns_memory());
  EXPECT_THROW(Arena::over("gradients", three_tensors(), base + 4, MemoryKind::host), Error);
  EXPECT_THROW(Arena::over("gradients", three_tensors(), nullptr, MemoryKind::host), Error);
}

TEST(Arena, PinnedHostFallsBackToHostMemoryWithoutGpu) {
  Arena arena("adam m", three_tensors(), {.kind = MemoryKind::pinned_host});
  ASSERT_NE(arena.data(), nullptr);
  EXPECT_EQ(arena.tensor("classifier.weight").device(), DeviceKind::cpu);
  std::memset(arena.data(), 1, arena.bytes());  // all of it is writable
}

TEST(Arena, DeviceArenaGoesThroughTheAllocatorWithItsCategory) {
  DeviceAllocator allocator(std::make_unique<HostMemoryBackend>(), 1 << 20);
  {
    Arena grads("gradients", three_tensors(),
                {.kind = MemoryKind::device,
                 .category = MemoryCategory::gradients,
                 .allocator = &allocator,
                 .zero_fill = true});
    EXPECT_EQ(grads.tensor("encoder.0.bias").device(), DeviceKind::cuda);
    EXPECT_EQ(allocator.stats().in_use[static_cast<size_t>(MemoryCategory::gradients)],
              DeviceAllocator::size_class(896));
    Arena moved = std::move(grads);
    EXPECT_EQ(moved.tensor("encoder.0.bias").data_as<float>()[0], 0.0f);
  }
  EXPECT_EQ(allocator.stats().in_use_total, 0u);  // released exactly once, by the moved-to arena
}

TEST(Arena, EmptyLayoutAllocatesNothing) {
  Arena arena("empty", ArenaLayout{}, {});
  EXPECT_EQ(arena.data(), nullptr);
  EXPECT_EQ(arena.bytes(), 0u);
}

}  // namespace
}  // namespace zt
