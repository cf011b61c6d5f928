// The ZeRO partition: per-unit slices cover every tensor element exactly once and no padding, every unit
// splits evenly over the ranks, and world size 1 reproduces the parameter table's own layout. (Training with
// the partition is tested in test_zero_training.cpp.)
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/zero/partition.h"
#include "tests/optim/zero_offload_harness.h"

namespace zt::optim {
namespace {

// ~10k parameters in a few dozen tensors, enough that shard boundaries cut through tensors for every world
// size (the offload tests' model).
DebertaConfig tiny_config() {
  return testing::offload_tiny_config();
}

// mask[i]: element i of the flat buffer belongs to a tensor (false: padding).
std::vector<bool> tensor_mask(const ZeroPartition& part) {
  std::vector<bool> mask(static_cast<size_t>(part.total_numel()), false);
  const ArenaLayout layout = part.layout(DType::f32);
  for (const ArenaSlot& s : layout.slots())
    for (size_t i = s.offset / sizeof(float); i < s.end() / sizeof(float); ++i) mask[i] = true;
  return mask;
}

class ZeroWorld : public ::testing::TestWithParam<int> {};

TEST_P(ZeroWorld, PartitionCoversEveryTensorElementOnceAndNoPadding) {
  const int world = GetParam();
  const ParameterTable table(tiny_config());
  const ZeroPartition part(table, world);
  ASSERT_EQ(part.total_numel(), part.shard_numel() * world);
  ASSERT_EQ(part.layout(DType::f32).total_bytes(), static_cast<size_t>(part.total_numel()) * 4);
  ASSERT_EQ(part.units().size(), static_cast<size_t>(tiny_config().num_hidden_layers) + 2);
  int64_t shard_cursor = 0;
  for (const ZeroUnit& u : part.units()) {
    EXPECT_EQ(u.numel % (32 * world), 0) << u.name << ": every slice must be 128-byte aligned";
    EXPECT_EQ(u.slice_numel * world, u.numel) << u.name;
    EXPECT_EQ(u.shard_begin, shard_cursor) << u.name;
    shard_cursor += u.slice_numel;
  }
  EXPECT_EQ(shard_cursor, part.shard_numel());

  const std::vector<bool> mask = tensor_mask(part);
  const ArenaLayout layout = part.layout(DType::f32);
  std::vector<int> covered(mask.size(), 0);
  for (int r = 0; r < world; ++r) {
    int64_t previous_end = -1;
    for (const ShardPiece& p : part.pieces(r)) {
      const ArenaSlot& slot = layout.slots()[p.tensor];
      const ParameterInfo& info = table.entries()[p.tensor];
      const ZeroUnit& unit = part.units()[p.unit];
      ASSERT_EQ(slot.name, info.name);
      EXPECT_EQ(part.unit_of_tensor(p.tensor), p.unit);
      EXPECT_GT(p.numel, 0);
      EXPECT_GE(p.flat_offset, previous_end) << "pieces are in flat order and disjoint";
      // Inside rank r's slice of its unit, at the matching place of the rank's shard buffer.
      EXPECT_GE(p.flat_offset, part.slice_begin(p.unit, r));
      EXPECT_LE(p.flat_offset + p.numel, part.slice_begin(p.unit, r) + unit.slice_numel);
      EXPECT_EQ(p.shard_offset, unit.shard_begin + (p.flat_offset - part.slice_begin(p.unit, r)));
      EXPECT_EQ(p.flat_offset, static_cast<int64_t>(slot.offset / sizeof(float)) + p.tensor_offset);
      EXPECT_EQ(p.weight_decay, info.weight_decay) << info.name;
      previous_end = p.flat_offset + p.numel;
      for (int64_t i = p.flat_offset; i < p.flat_offset + p.numel; ++i) ++covered[static_cast<size_t>(i)];
    }
    // slice_ranges of every unit together are the rank's pieces.
    size_t pieces_seen = 0;
    for (size_t u = 0; u < part.units().size(); ++u) {
      for (const TensorRange& range : part.slice_ranges(u, r)) {
        const ShardPiece& p = part.pieces(r)[pieces_seen++];
        EXPECT_EQ(range.offset, p.flat_offset - part.slice_begin(u, r));
        EXPECT_EQ(range.numel, p.numel);
      }
    }
    EXPECT_EQ(pieces_seen, part.pieces(r).size());
  }
  for (size_t i = 0; i < mask.size(); ++i)
    ASSERT_EQ(covered[i], mask[i] ? 1 : 0) << "element " << i << (mask[i] ? " (tensor)" : " (padding)");
}

TEST(ZeroPartition, WorldOneIsTheParameterTableLayout) {
  const ParameterTable table(tiny_config());
  const ArenaLayout a = ZeroPartition(table, 1).layout(DType::bf16);
  const ArenaLayout b = table.layout(DType::bf16);
  ASSERT_EQ(a.slots().size(), b.slots().size());
  for (size_t k = 0; k < a.slots().size(); ++k) EXPECT_EQ(a.slots()[k].offset, b.slots()[k].offset);
  EXPECT_EQ(a.total_bytes(), b.total_bytes());
}

TEST(ZeroPartition, LayersAreSplitOverEveryRank) {
  // A per-unit cut: every layer has a slice on every rank (a flat cut would give a layer to one or two).
  const ParameterTable table(tiny_config());
  const ZeroPartition part(table, 4);
  for (int l = 0; l < tiny_config().num_hidden_layers; ++l)
    for (int r = 0; r < 4; ++r)
      EXPECT_FALSE(part.slice_ranges(part.layer_unit(l), r).empty()) << l << " " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroWorld, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "world" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace zt::optim
