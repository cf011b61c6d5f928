// The ZeRO engine's pieces with logic of their own: the plan (which buffers a run has, and their bytes with
// the allocator's rounding applied buffer by buffer), the owned blocks and their sub-groups, the units' order
// per phase (what the parameter file reads ahead), the bucket slots, and the overlapped update's per-unit
// landing (its thread's order, each unit waited for once, an error rethrown on the rank's thread).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "model/parameters.h"
#include "optim/zero/offloaded_optimizer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/unit_buffers.h"
#include "optim/zero/unit_order.h"
#include "optim/zero/zero_plan.h"
#include "runtime/check.h"
#include "tests/optim/zero_offload_harness.h"

namespace zt::optim {
namespace {

const ParameterTable& tiny_table() {
  static const ParameterTable table(testing::offload_tiny_config());
  return table;
}

TEST(ZeroPlan, GradientsGoStraightIntoTheShardOnlyAtWorldOneWithoutStreaming) {
  for (int world : {1, 2}) {
    const ZeroPartition part(tiny_table(), world);
    for (int stage = 0; stage <= 3; ++stage) {
      const ZeroPlan plain(part, stage, DType::bf16, {});
      EXPECT_EQ(plain.direct_gradients, stage >= 2 && world == 1) << "stage " << stage << " world " << world;
      EXPECT_EQ(plain.buckets(), stage >= 2 && world > 1);
      EXPECT_EQ(plain.gather_buffers(), stage == 3);
      EXPECT_EQ(plain.full_gradients(), stage <= 1);
    }
    for (int stage = 2; stage <= 3; ++stage) {
      const ZeroPlan streamed(part, stage, DType::bf16, {.optimizer = true, .stream_gradients = true});
      EXPECT_TRUE(streamed.streamed_gradients);
      EXPECT_FALSE(streamed.direct_gradients);
      EXPECT_TRUE(streamed.buckets());  // the slices go down from the buckets, also at world size 1
      EXPECT_EQ(streamed.bytes().gradients, 0u);
    }
  }
}

TEST(ZeroPlan, WhereTheComputeCopyAndTheStagingShardLive) {
  const ZeroPartition part(tiny_table(), 2);
  EXPECT_EQ(ZeroPlan(part, 2, DType::bf16, {}).compute_copy, ComputeCopyPlace::device_full);
  EXPECT_EQ(ZeroPlan(part, 3, DType::bf16, {}).compute_copy, ComputeCopyPlace::device_shard);
  const ZeroPlan on_host(part, 3, DType::bf16, {.optimizer = true, .param = true});
  EXPECT_EQ(on_host.compute_copy, ComputeCopyPlace::host_shard);
  EXPECT_FALSE(on_host.host_staging());  // the CPU update writes the host shard itself
  EXPECT_TRUE(on_host.parameter_upload());
  EXPECT_FALSE(ZeroPlan(ZeroPartition(tiny_table(), 1), 3, DType::bf16, {.optimizer = true, .param = true})
                   .parameter_upload());
  const ZeroPlan delayed(part, 3, DType::bf16, {.optimizer = true, .param = true, .delayed_update = true});
  EXPECT_TRUE(delayed.host_staging());  // the forward reads the shard while the update runs
  const ZeroPlan on_disk(part, 3, DType::bf16, {.optimizer = true, .param = true, .param_disk_buffers = 3});
  EXPECT_EQ(on_disk.compute_copy, ComputeCopyPlace::disk_shard);
  // offload.param means nothing below stage 3, offload nothing at stage 0.
  EXPECT_EQ(ZeroPlan(part, 2, DType::bf16, {.optimizer = true, .param = true}).compute_copy,
            ComputeCopyPlace::device_full);
  EXPECT_FALSE(ZeroPlan(part, 0, DType::bf16, {.optimizer = true}).offload_optimizer);
}

TEST(ZeroPlan, AMasterOfItsOwnOnlyInMixedPrecisionOnTheDevice) {
  const ZeroPartition part(tiny_table(), 1);
  EXPECT_FALSE(ZeroPlan(part, 0, DType::f32, {}).master_buffer());  // the compute copy is the master
  EXPECT_TRUE(ZeroPlan(part, 0, DType::bf16, {}).master_buffer());
  EXPECT_FALSE(ZeroPlan(part, 0, DType::bf16, {}, /*split_master=*/true).master_buffer());
  EXPECT_FALSE(ZeroPlan(part, 1, DType::bf16, {.optimizer = true}).master_buffer());  // on the host
}

// Every device buffer is rounded on its own: four gather buffers and four buckets at stage 3 are eight
// roundings, not one of their sum.
TEST(ZeroPlan, TheAllocatorsRoundingAppliesToEachBuffer) {
  const ZeroPartition part(tiny_table(), 2);
  constexpr size_t kGranule = size_t{1} << 20;
  auto held = [](size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; };
  const ZeroStateBytes exact = ZeroPlan(part, 3, DType::bf16, {}).bytes();
  const ZeroStateBytes rounded = ZeroPlan(part, 3, DType::bf16, {}).bytes(held);
  // The tiny model's buffers are all far below a granule.
  EXPECT_EQ(rounded.buffers, 8 * kGranule);
  EXPECT_EQ(rounded.compute_copy, kGranule);
  EXPECT_EQ(rounded.gradients, kGranule);
  EXPECT_EQ(rounded.master, kGranule);
  EXPECT_EQ(rounded.optimizer, 2 * kGranule);
  const auto& units = part.units();
  EXPECT_EQ(exact.buffers,
            static_cast<size_t>(units.front().numel + units.back().numel + 2 * part.largest_layer_unit()) *
                (4 + 2));
  EXPECT_EQ(zero_state_bytes(part, 3, DType::bf16, {}, held).total(), rounded.total());
}

TEST(OwnedBlocks, StageZeroOwnsWholeUnitsTheOthersTheirSlice) {
  const ZeroPartition part(tiny_table(), 4);
  const auto& units = part.units();
  const std::vector<OwnedBlock> whole = owned_blocks(part, 0, 2, true);
  ASSERT_EQ(whole.size(), units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(whole[u].numel, units[u].numel);
    EXPECT_EQ(whole[u].master, units[u].flat_begin);
    EXPECT_EQ(whole[u].grad, units[u].flat_begin);
  }
  for (int stage = 1; stage <= 3; ++stage) {
    int64_t owned = 0;
    for (bool separate_master : {false, true}) {
      const std::vector<OwnedBlock> blocks = owned_blocks(part, stage, 2, separate_master);
      for (size_t u = 0; u < units.size(); ++u) {
        const OwnedBlock& b = blocks[u];
        const int64_t slice = units[u].flat_begin + 2 * units[u].slice_numel;
        EXPECT_EQ(b.flat, slice);
        EXPECT_EQ(b.moments, units[u].shard_begin);
        EXPECT_EQ(b.grad, stage == 1 ? slice : units[u].shard_begin);
        EXPECT_EQ(b.compute, stage == 3 ? units[u].shard_begin : slice);
        EXPECT_EQ(b.master, separate_master ? units[u].shard_begin : b.compute);
        if (separate_master) owned += b.numel;
      }
    }
    EXPECT_EQ(owned, part.shard_numel());
  }
}

TEST(OwnedBlocks, SubGroupsTileEachBlockAndKeepItsRanges) {
  const ZeroPartition part(tiny_table(), 2);
  std::vector<OwnedBlock> blocks = owned_blocks(part, 2, 1, true);
  const int64_t sub_group_size = 100;
  const std::vector<SubGroup> subs =
      owned_sub_groups(blocks, offloaded_sub_groups(part, sub_group_size, part.shard_numel()));
  size_t next = 0;
  for (const OwnedBlock& b : blocks) {
    EXPECT_EQ(b.first_sub_group, next);
    int64_t at = 0, ranged = 0, block_ranged = 0;
    for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
      EXPECT_EQ(subs[g].begin, at);
      EXPECT_LE(subs[g].numel, sub_group_size);
      at += subs[g].numel;
      for (const TensorRange& r : subs[g].ranges) {
        EXPECT_GE(r.offset, 0);
        EXPECT_LE(r.offset + r.numel, subs[g].numel);
        ranged += r.numel;
      }
    }
    for (const TensorRange& r : b.ranges) block_ranged += r.numel;
    EXPECT_EQ(at, b.numel);
    EXPECT_EQ(ranged, block_ranged);  // the cut loses and duplicates no updated element
    next = b.end_sub_group;
  }
  EXPECT_EQ(next, subs.size());
  EXPECT_GT(subs.size(), blocks.size());  // the size cut some blocks
  // Extents that are not the blocks' slices are refused.
  std::vector<HostBlockExtent> shifted = offloaded_sub_groups(part, sub_group_size, part.shard_numel());
  shifted[1].offset += 1;
  std::vector<OwnedBlock> again = owned_blocks(part, 2, 1, true);
  EXPECT_THROW(owned_sub_groups(again, shifted), Error);
}

TEST(UnitOrder, ThePhasesFollowTheModelsHooks) {
  const ZeroPartition part(tiny_table(), 1);  // embeddings, two layers, shared
  const size_t E = part.embeddings_unit(), S = part.shared_unit();
  ASSERT_EQ(part.units().size(), 4u);
  std::vector<size_t> layers;
  for (size_t u = 0; u < 4; ++u)
    if (u != E && u != S) layers.push_back(u);
  const UnitOrder order(part);
  EXPECT_EQ(order.order(UnitPhase::forward), (std::vector<size_t>{E, S, layers[0], layers[1]}));
  EXPECT_EQ(order.order(UnitPhase::backward), (std::vector<size_t>{S, layers[1], layers[0], E}));
  EXPECT_EQ(order.order(UnitPhase::update), (std::vector<size_t>{0, 1, 2, 3}));
  // The last forward layer reads ahead into backward (skipping itself, which backward uses next).
  EXPECT_EQ(order.upcoming(layers[1], UnitPhase::forward, true, 2), (std::vector<size_t>{S, layers[0]}));
  // The end of backward continues with the update on the window's last micro-batch, else the next forward.
  std::vector<size_t> update_after_e;
  for (size_t u = 0; u < 4; ++u)
    if (u != E) update_after_e.push_back(u);
  EXPECT_EQ(order.upcoming(E, UnitPhase::backward, true, 3), update_after_e);
  EXPECT_EQ(order.upcoming(E, UnitPhase::backward, false, 2), (std::vector<size_t>{S, layers[0]}));
  // Never more than asked, each unit once.
  EXPECT_EQ(order.upcoming(E, UnitPhase::forward, true, 10).size(), 3u);
}

TEST(UnitBuffers, ConsecutiveLayersNeverShareABucket) {
  const ZeroPartition part(tiny_table(), 2);
  EXPECT_EQ(UnitBuffers::slot(part, part.embeddings_unit()), 0u);
  EXPECT_EQ(UnitBuffers::slot(part, part.shared_unit()), 1u);
  std::vector<size_t> layer_slots;
  for (size_t u = 0; u < part.units().size(); ++u)
    if (part.units()[u].layer >= 0) layer_slots.push_back(UnitBuffers::slot(part, u));
  ASSERT_EQ(layer_slots.size(), 2u);
  EXPECT_EQ(layer_slots, (std::vector<size_t>{2, 3}));
  const UnitBuffers buckets(part, "gradient bucket", DType::f32, {});
  for (size_t u = 0; u < part.units().size(); ++u)
    EXPECT_GE(buckets.at(part, u).bytes(), static_cast<size_t>(part.units()[u].numel) * 4);
}

TEST(OverlappedUnitUpdate, EachUnitLandsOnceAfterItsUpdate) {
  OverlappedUnitUpdate overlapped;
  std::vector<size_t> done;  // written by the update's thread in its order
  std::atomic<int> calls{0};
  EXPECT_FALSE(overlapped.pending(0));  // nothing in flight yet
  overlapped.start(3, {2, 0, 1}, [&](size_t unit) {
    done.push_back(unit);
    ++calls;
  });
  for (size_t unit : {0, 1, 2}) {
    ASSERT_TRUE(overlapped.pending(unit));
    overlapped.wait_until_updated(unit);
    overlapped.mark_landed(unit);
    EXPECT_FALSE(overlapped.pending(unit));
  }
  EXPECT_EQ(done, (std::vector<size_t>{2, 0, 1}));
  EXPECT_EQ(calls.load(), 3);
}

TEST(OverlappedUnitUpdate, AFailedUpdateThrowsOnTheWaitingThread) {
  OverlappedUnitUpdate overlapped;
  // The first unit in the thread's order fails: whichever unit the rank's thread waits for gets the error.
  overlapped.start(2, {1, 0}, [](size_t unit) {
    if (unit == 1) throw std::runtime_error("disk full");
  });
  EXPECT_THROW(overlapped.wait_until_updated(0), std::runtime_error);
  EXPECT_FALSE(overlapped.pending(0));  // nothing left in flight after the error
  EXPECT_FALSE(overlapped.pending(1));
}

}  // namespace
}  // namespace zt::optim
