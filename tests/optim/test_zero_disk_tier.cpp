// The disk tier in the ZeRO engine's accounting (optim/zero/engine.h, ZeroOffload::disk_buffers): the host
// column counts the disk tier's buffers (one sub-group each: a unit's slice, cut by sub_group_size), not the
// shard, and the memory plan shows the run's disk-tier row; loading into it moves each record once. Training
// through it: test_zero_training.cpp, ZeroDiskTierTraining.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/swap/swapped_state_store.h"
#include "optim/zero/engine.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/memory_estimate.h"
#include "optim/zero/partition.h"
#include "runtime/communicator.h"
#include "runtime/direct_io.h"
#include "tests/optim/zero_offload_harness.h"
#include "tests/support/temp_dir_test.h"

namespace zt::optim {
namespace {

// Loading the parameters into the disk tier (load_full_parameters: one tensor at a time, a dozen tensors a
// sub-group) writes each record once: a record is written when its buffer is needed or at the end of the
// loading, and a record never written is zeros without a read; the compute copy's pass after it reads each
// evicted record back once. Writing each record once per tensor made the initial load of a 5.3 B-parameter
// model (57 GiB of state, 20M-element sub-groups) move ~10x the file and outlast a 5-minute run before its
// first step. The master read back is the one loaded.
class ZeroDiskTierLoading : public test::TempDirTest {};

TEST_F(ZeroDiskTierLoading, WritesEachRecordOnce) {
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  const Arena init = testing::synthetic_initial_parameters(table);
  for (const int stage : {2, 3}) {
    auto comms = make_in_process_group(1);
    ZeroEngineOptions options;
    options.stage = stage;
    options.offload = {.optimizer = true, .param = stage == 3};
    options.offload.sub_group_size = 200;  // a few tensors a record; more records than buffers
    options.disk = ZeroDiskTier{};
    options.disk->directory = dir_.string();
    options.disk->buffer_count = 4;
    ZeroEngine engine(table, config, *comms[0], options);
    ASSERT_NE(engine.optimizer_swap_stats(), nullptr);
    engine.load_full_parameters(init);
    const swap::SwappedStateStats stats = *engine.optimizer_swap_stats();
    int64_t records = 0;
    for (const ZeroUnit& unit : engine.partition().units())
      records += sub_group_count(unit.slice_numel, options.offload.sub_group_size);
    ASSERT_GT(records, 4 * 4) << "more records than buffers: the loading evicts";
    EXPECT_EQ(static_cast<int64_t>(stats.blocks_written), records) << "stage " << stage;
    // Nothing read while loading; the compute copy's pass after it (finish_loading) reads back each record
    // the buffers no longer hold, once.
    EXPECT_LE(stats.blocks_read, static_cast<uint64_t>(records)) << "stage " << stage;
    const Arena back("back", table.layout(DType::f32), {.zero_fill = true});
    engine.gather_full_master(&back);
    for (const ParameterInfo& info : table.entries()) {  // tensor by tensor: init fills the padding too
      const Tensor want = init.tensor(info.name), got = back.tensor(info.name);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(info.numel()) * 4), 0)
          << info.name << ", stage " << stage;
    }
    EXPECT_GT(engine.optimizer_swap_stats()->blocks_read, 0u) << "the master came back from the disk";
  }
}

TEST(ZeroDiskTierBytes, HostOptimizerIsTheBuffersNotTheShard) {
  const DebertaConfig model = deberta_small_cpu_config();
  const ParameterTable table(model);
  for (const int world : {1, 2, 4}) {
    const ZeroPartition part(table, world);
    std::vector<int64_t> slices;
    for (const ZeroUnit& unit : part.units()) slices.push_back(unit.slice_numel);
    for (int stage = 1; stage <= 3; ++stage) {
      const ZeroStateBytes resident = zero_state_bytes(part, stage, DType::f32, {.optimizer = true});
      for (const int buffers : {1, 4}) {
        ZeroOffload disk{.optimizer = true};
        disk.disk_buffers = buffers;
        const ZeroStateBytes on_disk = zero_state_bytes(part, stage, DType::f32, disk);
        EXPECT_EQ(on_disk.host_optimizer,
                  swap::SwappedStateStore::buffer_bytes_for(
                      {.directory = "", .rank = 0, .block_numel = slices, .buffer_count = buffers}));
        // Everything else is the resident offload's.
        EXPECT_EQ(on_disk.host_gradients, resident.host_gradients);
        EXPECT_EQ(on_disk.host_parameters, resident.host_parameters);
        EXPECT_EQ(on_disk.total(), resident.total());
      }
    }
  }
}

// zero_optimization.sub_group_size bounds the disk tier's buffers: buffer_count records of the largest
// sub-group (master | m | v, 12 bytes an element, rounded up to the direct-I/O alignment), whatever the
// largest unit (the embeddings: 8000 x 128 of the small CPU model); the estimator's host column counts that.
// The resident offload's host bytes do not depend on it.
TEST(ZeroDiskTierBytes, SubGroupsBoundTheBuffers) {
  const DebertaConfig model = deberta_small_cpu_config();
  const ParameterTable table(model);
  for (const int world : {1, 2}) {
    const ZeroPartition part(table, world);
    int64_t largest_slice = 0;
    for (const ZeroUnit& unit : part.units()) largest_slice = std::max(largest_slice, unit.slice_numel);
    const ZeroOffload whole{.optimizer = true, .disk_buffers = 4};
    const size_t whole_bytes = zero_state_bytes(part, 2, DType::f32, whole).host_optimizer;
    EXPECT_EQ(whole_bytes, 4 * round_up_to_alignment(12 * static_cast<size_t>(largest_slice)));
    const ZeroStateBytes resident = zero_state_bytes(part, 2, DType::f32, {.optimizer = true});
    for (const int64_t sub_group_size : {int64_t{100'000}, int64_t{30'001}, int64_t{1000}}) {
      ASSERT_LT(sub_group_size, largest_slice);
      ZeroOffload cut = whole;
      cut.sub_group_size = sub_group_size;
      // The largest piece: each slice in sub_group_count near-equal pieces.
      int64_t largest_piece = 0;
      for (const ZeroUnit& unit : part.units()) {
        const int64_t pieces = sub_group_count(unit.slice_numel, sub_group_size);
        largest_piece = std::max(largest_piece, (unit.slice_numel + pieces - 1) / pieces);
      }
      EXPECT_LE(largest_piece, sub_group_size);
      const ZeroStateBytes bytes = zero_state_bytes(part, 2, DType::f32, cut);
      EXPECT_EQ(bytes.host_optimizer, 4 * round_up_to_alignment(12 * static_cast<size_t>(largest_piece)))
          << "sub_group_size " << sub_group_size << " world " << world;
      EXPECT_LT(bytes.host_optimizer, whole_bytes);
      EXPECT_EQ(bytes.host_gradients, resident.host_gradients);
      EXPECT_EQ(bytes.host_parameters, resident.host_parameters);
      EXPECT_EQ(estimate_memory(model, 2, world, DType::f32, 4, 16, cut, false).host(), bytes.host_total());
      ZeroOffload resident_cut{.optimizer = true};
      resident_cut.sub_group_size = sub_group_size;
      EXPECT_EQ(zero_state_bytes(part, 2, DType::f32, resident_cut).host_total(), resident.host_total());
    }
  }
}

// DeBERTa-v2-xlarge, bf16, world 1, ZeRO-2, the disk tier with 4 buffers: with DeepSpeed's default
// sub_group_size (1e9, more than any unit) a buffer holds the embeddings' slice (197M elements, 2.2 GiB),
// so 4 buffers are close to the resident master, m and v; smaller sub-groups bound them by 4 x 12 x
// sub_group_size bytes. The gradient and parameter staging (6 bytes an element of the shard) stay.
TEST(ZeroDiskTierBytes, XlargeBuffersFallWithTheSubGroup) {
  const ParameterTable table(deberta_v2_xlarge_config());
  const ZeroPartition part(table, 1);
  const ZeroStateBytes resident = zero_state_bytes(part, 2, DType::bf16, {.optimizer = true});
  auto gib = [](size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); };
  std::printf(
      "xlarge bf16 world 1 stage 2, host bytes: resident offload %.2f GiB (master/m/v %.2f, gradients "
      "%.2f, staging %.2f)\n",
      gib(resident.host_total()), gib(resident.host_optimizer), gib(resident.host_gradients),
      gib(resident.host_parameters));
  size_t previous = resident.host_total();
  for (const int64_t sub_group_size : {int64_t{1'000'000'000}, int64_t{100'000'000}, int64_t{20'000'000}}) {
    ZeroOffload disk{.optimizer = true, .disk_buffers = 4};
    disk.sub_group_size = sub_group_size;
    const ZeroStateBytes b = zero_state_bytes(part, 2, DType::bf16, disk);
    std::printf("  nvme, 4 buffers, sub_group_size %lld: %.2f GiB (buffers %.2f)\n",
                static_cast<long long>(sub_group_size), gib(b.host_total()), gib(b.host_optimizer));
    EXPECT_LE(b.host_optimizer, 4 * round_up_to_alignment(12 * static_cast<size_t>(sub_group_size)));
    EXPECT_LT(b.host_total(), previous) << sub_group_size;
    EXPECT_EQ(b.host_gradients + b.host_parameters, resident.host_gradients + resident.host_parameters);
    previous = b.host_total();
  }
}

// The swap file is the sum of the rank's records, each its own sub-group's master | m | v (aligned), not
// records x the largest: the unit slices are unequal (the embeddings vs each layer). DeBERTa-v2-xlarge,
// world 1, the default sub_group_size 1e9 (no unit is cut): 26 records, the embeddings' 197M elements and 24
// layers of 29M; sizing every record as the embeddings' made a 57 GiB file for 9.9 GiB of state.
TEST(ZeroDiskTierBytes, SwapFileIsTheSumOfUnequalRecords) {
  auto sum_of_records = [](const ZeroPartition& part, int64_t sub_group_size) {
    std::vector<HostBlockExtent> slices;
    for (const ZeroUnit& unit : part.units()) slices.push_back({unit.shard_begin, unit.slice_numel});
    uint64_t sum = 0;
    size_t largest = 0;
    const std::vector<HostBlockExtent> groups = cut_into_sub_groups(slices, sub_group_size);
    for (const HostBlockExtent& g : groups) {
      const size_t record = round_up_to_alignment(12 * static_cast<size_t>(g.numel));
      sum += record;
      largest = std::max(largest, record);
    }
    return std::tuple{sum, largest, groups.size()};
  };
  auto gib = [](uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); };
  {
    const ParameterTable xlarge(deberta_v2_xlarge_config());
    const ZeroPartition part(xlarge, 1);
    const ZeroStateBytes b = zero_state_bytes(part, 2, DType::bf16, {.optimizer = true, .disk_buffers = 4});
    const auto [sum, largest, records] = sum_of_records(part, 1'000'000'000);
    EXPECT_EQ(records, 26u);
    EXPECT_EQ(b.disk_file, sum);
    EXPECT_EQ(b.host_optimizer, 4 * largest);  // the buffers stay the largest record's size
    // The estimator (bench_train_step --estimate_only's "disk") reports the same file.
    EXPECT_EQ(estimate_memory(deberta_v2_xlarge_config(), 2, 1, DType::bf16, 8, 128,
                              {.optimizer = true, .disk_buffers = 4}, false)
                  .state.disk_file,
              sum);
    // Close to 12 bytes a parameter (the padding is under 4 KiB a record), far from 26 x the largest.
    EXPECT_LT(b.disk_file, 12 * static_cast<uint64_t>(part.shard_numel()) + 26 * kDirectIoAlignment);
    EXPECT_GT(records * largest, 5 * b.disk_file);
    std::printf(
        "xlarge bf16 world 1, disk tier swap file: %.2f GiB (sum of %zu records; %.2f GiB as %zu x "
        "the largest record of %.2f GiB)\n",
        gib(b.disk_file), records, gib(records * largest), records, gib(largest));
  }
  const DebertaConfig model = deberta_small_cpu_config();
  const ParameterTable table(model);
  for (const int world : {1, 2, 3}) {
    const ZeroPartition part(table, world);
    for (const int64_t sub_group_size : {int64_t{1'000'000'000}, int64_t{30'001}}) {
      ZeroOffload disk{.optimizer = true, .disk_buffers = 2};
      disk.sub_group_size = sub_group_size;
      const auto [sum, largest, records] = sum_of_records(part, sub_group_size);
      for (int stage = 1; stage <= 3; ++stage) {
        const ZeroStateBytes b = zero_state_bytes(part, stage, DType::f32, disk);
        EXPECT_EQ(b.disk_file, sum) << "world " << world << " sub_group_size " << sub_group_size;
        EXPECT_LT(b.disk_file, records * largest)
            << "world " << world << " sub_group_size " << sub_group_size;
      }
    }
    // Without the disk tier there is no file.
    EXPECT_EQ(zero_state_bytes(part, 2, DType::f32, {.optimizer = true}).disk_file, 0u);
  }
}

TEST(ZeroDiskTierBytes, MemoryPlanShowsTheRunsDiskTierRow) {
  const DebertaConfig model = deberta_small_cpu_config();
  ZeroOffload disk{.optimizer = true};
  disk.disk_buffers = 2;
  const std::string table = describe_memory_estimates(model, 2, 2, DType::f32, 4, 16, disk);
  EXPECT_NE(table.find("2 +offload nvme (run)"), std::string::npos) << table;
  EXPECT_EQ(table.find("2 +offload opt (run)"), std::string::npos) << table;
  // Without the disk tier there is no such row.
  EXPECT_EQ(describe_memory_estimates(model, 2, 2, DType::f32, 4, 16, {.optimizer = true}).find("nvme"),
            std::string::npos);
}

}  // namespace
}  // namespace zt::optim
