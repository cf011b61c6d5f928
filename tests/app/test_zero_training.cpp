// ZeRO stages 0-3 in the trainer over in-process ranks (threads), fp32 on the CPU, real MRPC batches with
// dropout on.
//
// What must hold and why:
//   - Within one world size, stages 0 and 1 are bit-identical, and so are 2 and 3: each pair reduces the same
//     values in the same rank order (0/1 once per window, 2/3 every micro-batch), divides by W, takes the
//     norm from the same per-(rank, unit) slice sums and runs AdamW element-wise. With accumulation 1 all
//     four stages are bit-identical (a single micro-batch gives the same sums whichever way it is reduced).
//   - With accumulation k > 1, stages 2/3 add the ranks' reduced gradients per micro-batch while 0/1 add
//     the micro-batches per rank first and then reduce: float addition in a different order, so they agree
//     to rounding (a few ulp per step), which we bound after 20 steps by 1e-5 relative on losses and 2e-5
//     absolute on the weights (|w| ~ 0.02-1).
//   - World W with accumulation k sees exactly the batches and dropout masks of world 1 with accumulation
//     W k (micro-batch i of a window goes to rank i % W and keys its masks by its global index), so the runs
//     differ only in the order gradients are summed: the same tolerances.
//   - A sharded checkpoint of world 2 (accumulation 3) resumes at world 3 (accumulation 2) — six
//     micro-batches per step either way — and continues the same curve, within the same tolerance.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "app/run/checkpoint.h"
#include "app/run/sharded_checkpoint.h"
#include "app/trainer/trainer.h"
#include "model/config.h"
#include "model/init.h"
#include "optim/swap/swapped_state_store.h"
#include "optim/zero/engine.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "runtime/check.h"

#include "tests/app/zero_training_harness.h"

namespace zt::optim {
namespace {

using namespace zero_harness;  // NOLINT: the harness is this test's vocabulary

class ZeroTraining : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Stages 0-3 at one (world, accumulation): the bitwise pairs, and agreement with world 1 at accumulation
// world x accumulation.
TEST_P(ZeroTraining, StagesAgreeWithEachOtherAndWithOneRank) {
  const auto [world, accumulation] = GetParam();
  RunResult stage[4];
  for (int s = 0; s < 4; ++s) stage[s] = run({.stage = s, .world = world, .accumulation = accumulation});
  ASSERT_EQ(stage[0].losses.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(bitwise_equal(stage[0], stage[1])) << "stage 1 differs from stage 0";
  EXPECT_TRUE(bitwise_equal(stage[2], stage[3])) << "stage 3 differs from stage 2";
  if (accumulation == 1) {
    EXPECT_TRUE(bitwise_equal(stage[0], stage[2])) << "stage 2 differs from stage 0";
  } else {
    expect_close(stage[2], stage[0], "stage 2 vs stage 0");
  }
  // The same training on one rank: world x accumulation micro-batches per step.
  const RunResult single = run({.stage = 0, .world = 1, .accumulation = world * accumulation});
  if (world == 1) {
    EXPECT_TRUE(bitwise_equal(single, stage[0]));
  } else {
    expect_close(stage[0], single, "world " + std::to_string(world) + " vs world 1");
    expect_close(stage[3], single, "stage 3 world " + std::to_string(world) + " vs world 1");
  }
  // The comparison can fail: another seed's run is far from these.
  if (world == 2 && accumulation == 1) {
    TrainConfig other = config_for({.stage = 0, .world = 1});
    other.seed = 12;
    MrpcTrainer t(other, tiny_model());
    t.train();
    EXPECT_NE(t.steps().back().loss, single.losses.back());
  }
}

INSTANTIATE_TEST_SUITE_P(WorldsAndAccumulation, ZeroTraining,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 3)),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_accumulation" +
                                  std::to_string(std::get<1>(info.param));
                         });

// overlap_comm acts on the GPU only (a comm stream per rank); on the CPU backend the in-process host
// collectives are synchronous and the flag changes nothing: every stage trains the same bits with it on.
TEST(ZeroTrainingOverlap, OverlapCommChangesNothingOnTheCpu) {
  for (int stage = 0; stage <= 3; ++stage) {
    const RunSpec in_order{.stage = stage, .world = 2, .accumulation = 2, .steps = 4};
    RunSpec overlapped = in_order;
    overlapped.overlap_comm = true;
    EXPECT_TRUE(bitwise_equal(run(overlapped), run(in_order))) << "stage " << stage;
  }
}

// Gradient checkpointing re-runs each layer's forward inside the backward's acquire of that layer (no hook
// of its own): every stage, at world 2 with accumulation 2, with optimizer and parameter offload at stage 3,
// trains the same bits as without it.
TEST(ZeroTrainingCheckpointing, GradientCheckpointingChangesNothingAtAnyStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    const RunSpec stored{.stage = stage, .world = 2, .accumulation = 2, .steps = 4};
    RunSpec checkpointed = stored;
    checkpointed.gradient_checkpointing = true;
    EXPECT_TRUE(bitwise_equal(run(checkpointed), run(stored))) << "stage " << stage;
  }
  const RunSpec offloaded{
      .stage = 3, .world = 2, .steps = 4, .offload_optimizer = true, .offload_param = true};
  RunSpec checkpointed = offloaded;
  checkpointed.gradient_checkpointing = true;
  EXPECT_TRUE(bitwise_equal(run(checkpointed), run(offloaded))) << "stage 3 with both offloads";
}

// The trainer hands its init to the engines one tensor at a time (no staging of the whole model): before any
// step, every stage at world 2, with and without offload, holds exactly init_parameters(seed).
TEST(ZeroTrainingInit, EveryRankStartsFromTheSeededInit) {
  const DebertaConfig model = tiny_model();
  const ParameterTable table(model);
  Arena expected("expected init", table.layout(DType::f32), {.zero_fill = true});
  init_parameters(model, table, expected, 11);  // config_for's --seed
  for (int stage = 0; stage <= 3; ++stage) {
    for (const bool offload : {false, true}) {
      if (offload && stage == 0) continue;  // offload needs a sharded optimizer
      RunSpec spec{
          .stage = stage, .world = 2, .offload_optimizer = offload, .offload_param = offload && stage == 3};
      MrpcTrainer trainer(config_for(spec), model);
      const Arena params = trainer.params();
      ASSERT_EQ(params.bytes(), expected.bytes());
      EXPECT_EQ(
          std::memcmp(params.flat(DType::f32).data(), expected.flat(DType::f32).data(), expected.bytes()), 0)
          << "stage " << stage << (offload ? " with offload" : "");
    }
  }
}

// CPU offload (optimizer, and parameters at stage 3) equals the same stage without it, bit for bit: the same
// reductions and norm, and the CPU AdamW computes what the in-place one does (the CPU backend's "device" is
// the host, so the copies down and up are memcpys through the offload path's code). Accumulation 2, so the
// stage-1 window and the stage-2/3 per-micro-batch accumulation both run before the copy down; a clipping
// threshold below every step's norm, so the clip factor folded into the CPU AdamW is used. With a small
// zero_optimization.sub_group_size (1000 elements: many sub-groups per unit, most units not a multiple of it)
// the CPU update goes sub-group by sub-group: the same bits.
class ZeroOffloadTraining : public ::testing::TestWithParam<int> {};

TEST_P(ZeroOffloadTraining, EqualsTheSameStageWithoutOffloadBitForBit) {
  const int world = GetParam();
  for (int stage = 1; stage <= 3; ++stage) {
    const RunResult plain =
        run({.stage = stage, .world = world, .accumulation = 2, .steps = 6, .max_grad_norm = 0.01});
    ASSERT_EQ(plain.losses.size(), 6u);
    const RunResult offloaded = run({.stage = stage,
                                     .world = world,
                                     .accumulation = 2,
                                     .steps = 6,
                                     .offload_optimizer = true,
                                     .max_grad_norm = 0.01});
    EXPECT_TRUE(bitwise_equal(plain, offloaded)) << "stage " << stage << " world " << world;
    RunSpec sub_grouped{.stage = stage,
                        .world = world,
                        .accumulation = 2,
                        .steps = 6,
                        .offload_optimizer = true,
                        .max_grad_norm = 0.01};
    sub_grouped.sub_group_size = 1000;
    EXPECT_TRUE(bitwise_equal(plain, run(sub_grouped)))
        << "stage " << stage << " world " << world << ", sub_group_size 1000";
    if (stage == 3) {
      const RunResult both = run({.stage = 3,
                                  .world = world,
                                  .accumulation = 2,
                                  .steps = 6,
                                  .offload_optimizer = true,
                                  .offload_param = true,
                                  .max_grad_norm = 0.01});
      EXPECT_TRUE(bitwise_equal(plain, both)) << "stage 3 with offload_param, world " << world;
    }
    // One micro-batch per step: at stages 2/3 the gradients stream down from the buckets (no device
    // shard; ZeroOffload::stream_gradients, which the trainer sets without accumulation).
    if (stage >= 2) {
      const RunResult single = run({.stage = stage, .world = world, .steps = 6, .max_grad_norm = 0.01});
      const RunResult streamed = run({.stage = stage,
                                      .world = world,
                                      .steps = 6,
                                      .offload_optimizer = true,
                                      .offload_param = stage == 3,
                                      .max_grad_norm = 0.01});
      EXPECT_TRUE(bitwise_equal(single, streamed)) << "stage " << stage << " world " << world << ", streamed";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroOffloadTraining, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// A partial optimizer offload (offload_optimizer.ratio): the state of each rank's first ratio x shard
// elements on the host, the rest on the device, both updated in the step — equal to no offload bit for bit
// at worlds 1-4 and stages 1-3 with real forwards, clipping and accumulation, and without accumulation (where
// a full offload streams the gradients, a partial one keeps the shard). The whole grid of ratios 0.1-0.9 is
// tests/optim/test_zero_offload.cpp's (the engine with synthetic gradients); here the ends and the middle.
class PartialOffloadTraining : public ::testing::TestWithParam<int> {};

TEST_P(PartialOffloadTraining, EqualsTheSameStageWithoutOffloadBitForBit) {
  const int world = GetParam();
  for (int stage = 1; stage <= 3; ++stage) {
    const RunSpec base{.stage = stage, .world = world, .accumulation = 2, .steps = 4, .max_grad_norm = 0.01};
    const RunResult plain = run(base);
    ASSERT_EQ(plain.losses.size(), 4u);
    for (const double ratio : {0.1, 0.5, 0.9}) {
      RunSpec partial = base;
      partial.offload_optimizer = true;
      partial.offload_ratio = ratio;
      EXPECT_TRUE(bitwise_equal(plain, run(partial)))
          << "stage " << stage << " world " << world << " ratio " << ratio;
    }
    if (stage >= 2) {
      RunSpec single = base;
      single.accumulation = 1;
      RunSpec partial = single;
      partial.offload_optimizer = true;
      partial.offload_ratio = 0.25;
      EXPECT_TRUE(bitwise_equal(run(single), run(partial)))
          << "stage " << stage << " world " << world << " ratio 0.25, one micro-batch a step";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, PartialOffloadTraining, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The disk tier (offload_optimizer device nvme, issue 15): training with the optimizer state in swap files
// equals training without offload bit for bit, at worlds 1 and 2 and stages 1-3, under a --host_memory_limit
// that the resident CPU offload exceeds (so every shard goes through the disk: one buffer per rank, fewer
// than the blocks), and with the reads and writes pipelined (3 buffers). With zero_optimization.
// sub_group_size 1000 (many sub-groups per unit; 1000 divides no unit slice of the tiny model, and the
// sub-groups are of unequal sizes) the records are sub-groups: the same bits under a cap that the disk tier
// with whole-unit records exceeds. The swap files are gone afterwards.
class ZeroDiskTierTraining : public ::testing::TestWithParam<int> {};

TEST_P(ZeroDiskTierTraining, EqualsTrainingWithoutItBitForBit) {
  const int world = GetParam();
  const std::string dir = temp_dir("disk_tier_" + std::to_string(world));
  std::filesystem::create_directories(dir);
  const ParameterTable table(tiny_model());
  const ZeroPartition partition(table, world);
  std::vector<int64_t> blocks;
  for (const ZeroUnit& unit : partition.units()) blocks.push_back(unit.slice_numel);
  ASSERT_GT(blocks.size(), 1u);
  for (int stage = 1; stage <= 3; ++stage) {
    // Host bytes per rank: the resident offload's, and the disk tier's with one buffer.
    const ZeroStateBytes resident = zero_state_bytes(partition, stage, DType::f32, {.optimizer = true});
    const size_t one_buffer =
        swap::SwappedStateStore::buffer_bytes_for({.block_numel = blocks, .buffer_count = 1});
    const size_t disk_per_rank = resident.host_total() - resident.host_optimizer + one_buffer;
    ASSERT_LT(disk_per_rank, resident.host_total());
    const size_t cap = disk_per_rank * static_cast<size_t>(world);

    const RunSpec base{.stage = stage, .world = world, .accumulation = 2, .steps = 6, .max_grad_norm = 0.01};
    const RunResult plain = run(base);
    RunSpec capped = base;
    capped.nvme_path = dir;
    capped.nvme_buffers = 1;
    capped.host_memory_limit = cap;
    EXPECT_TRUE(bitwise_equal(plain, run(capped))) << "stage " << stage << " world " << world << ", capped";
    RunSpec pipelined = base;
    pipelined.nvme_path = dir;
    pipelined.nvme_buffers = 3;
    pipelined.nvme_pipeline = true;
    EXPECT_TRUE(bitwise_equal(plain, run(pipelined)))
        << "stage " << stage << " world " << world << ", pipelined";

    // Sub-groups of at most 1000 elements: one buffer of the largest sub-group under a cap that one buffer
    // of the largest unit slice exceeds.
    ZeroOffload sub_grouped_disk{.optimizer = true, .disk_buffers = 1};
    sub_grouped_disk.sub_group_size = 1000;
    const size_t sub_group_cap =
        zero_state_bytes(partition, stage, DType::f32, sub_grouped_disk).host_total() *
        static_cast<size_t>(world);
    ASSERT_LT(sub_group_cap, cap);
    RunSpec sub_grouped = capped;
    sub_grouped.sub_group_size = 1000;
    sub_grouped.host_memory_limit = sub_group_cap;
    EXPECT_TRUE(bitwise_equal(plain, run(sub_grouped)))
        << "stage " << stage << " world " << world << ", sub_group_size 1000, capped";
    RunSpec sub_grouped_pipelined = pipelined;
    sub_grouped_pipelined.sub_group_size = 1000;
    EXPECT_TRUE(bitwise_equal(plain, run(sub_grouped_pipelined)))
        << "stage " << stage << " world " << world << ", sub_group_size 1000, pipelined";
    RunSpec whole_units = capped;
    whole_units.host_memory_limit = sub_group_cap;
    EXPECT_THROW(run(whole_units), Error)
        << "whole-unit records should exceed the sub-group cap, stage " << stage;
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "swap files left in " << dir;

    // The same cap refuses the resident CPU offload, naming the cap.
    RunSpec resident_capped = base;
    resident_capped.offload_optimizer = true;
    resident_capped.host_memory_limit = cap;
    try {
      run(resident_capped);
      ADD_FAILURE() << "the resident offload should exceed --host_memory_limit at stage " << stage;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("host memory limit exceeded"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("--host_memory_limit"), std::string::npos) << e.message();
    }
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroDiskTierTraining, ::testing::Values(1, 2),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// Parameters on disk (offload_param device nvme, issue 15): stage 3 with the parameter shard in a swap file
// equals offload_param cpu bit for bit at worlds 1 and 2 — with DeepSpeed's 5 buffers (the gathers and the
// update read the next units ahead), with one buffer (every read synchronous), with the optimizer state on
// disk in the same nvme_path too, with sub-groups of 1000 elements, and with the delayed update (whose
// staging shard is written into the file when the update lands). A --host_memory_limit that the parameter
// shard on the host exceeds admits it on disk. The swap files are gone afterwards (the parameters'
// subdirectory stays, empty).
class ZeroParamDiskTraining : public ::testing::TestWithParam<int> {};

TEST_P(ZeroParamDiskTraining, EqualsParametersOnTheHostBitForBit) {
  const int world = GetParam();
  const std::string dir = temp_dir("param_disk_" + std::to_string(world));
  std::filesystem::create_directories(dir);
  const RunSpec host{.stage = 3,
                     .world = world,
                     .accumulation = 2,
                     .steps = 6,
                     .offload_optimizer = true,
                     .offload_param = true,
                     .max_grad_norm = 0.01};
  const RunResult expected = run(host);
  ASSERT_EQ(expected.losses.size(), 6u);
  for (const int buffers : {5, 1}) {
    RunSpec on_disk = host;
    on_disk.param_nvme_path = dir;
    on_disk.param_nvme_buffers = buffers;
    EXPECT_TRUE(bitwise_equal(expected, run(on_disk))) << "world " << world << ", " << buffers << " buffers";
  }
  RunSpec both = host;
  both.param_nvme_path = dir;
  both.nvme_path = dir;
  both.nvme_buffers = 3;
  both.nvme_pipeline = true;
  EXPECT_TRUE(bitwise_equal(expected, run(both))) << "world " << world << ", optimizer state on disk too";
  RunSpec sub_grouped = host;
  sub_grouped.sub_group_size = 1000;
  RunSpec sub_grouped_disk = sub_grouped;
  sub_grouped_disk.param_nvme_path = dir;
  sub_grouped_disk.param_nvme_buffers = 2;
  EXPECT_TRUE(bitwise_equal(run(sub_grouped), run(sub_grouped_disk)))
      << "world " << world << ", sub_group_size 1000";
  RunSpec delayed = host;
  delayed.delayed_update = true;
  RunSpec delayed_disk = delayed;
  delayed_disk.param_nvme_path = dir;
  delayed_disk.param_nvme_buffers = 3;
  EXPECT_TRUE(bitwise_equal(run(delayed), run(delayed_disk))) << "world " << world << ", delayed update";

  // Host bytes per rank: the parameter shard on the host, and one buffer of the largest slice instead.
  const ParameterTable table(tiny_model());
  const ZeroPartition partition(table, world);
  const size_t on_host =
      zero_state_bytes(partition, 3, DType::f32, {.optimizer = true, .param = true}).host_total();
  const size_t one_buffer =
      zero_state_bytes(partition, 3, DType::f32, {.optimizer = true, .param = true, .param_disk_buffers = 1})
          .host_total();
  ASSERT_LT(one_buffer, on_host);
  RunSpec capped = host;
  capped.host_memory_limit = one_buffer * static_cast<size_t>(world);
  try {
    run(capped);
    ADD_FAILURE() << "the parameter shard on the host should exceed --host_memory_limit, world " << world;
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("host memory limit exceeded"), std::string::npos) << e.message();
  }
  capped.param_nvme_path = dir;
  capped.param_nvme_buffers = 1;
  EXPECT_TRUE(bitwise_equal(expected, run(capped))) << "world " << world << ", capped";

  const std::string files = SwappedParameterShard::file_directory(dir);
  EXPECT_TRUE(std::filesystem::is_directory(files)) << files;
  EXPECT_TRUE(std::filesystem::is_empty(files)) << "parameter swap files left in " << files;
  std::filesystem::remove(files);
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "swap files left in " << dir;
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ZeroParamDiskTraining, ::testing::Values(1, 2),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// A stage-3 world-2 run with the parameters (and the optimizer state) on disk checkpoints at step 4 and
// crashes; resumed with the parameters on disk, it continues bit for bit as the same run on the host does
// (crashed and resumed with both offloads in host memory), and the curve of the run that never stopped; its
// model.h5 holds its final weights.
TEST(ZeroParamDiskTrainingCheckpoint, ParametersOnDiskSaveAndResume) {
  const std::string dir = temp_dir("param_disk_resume");
  std::filesystem::create_directories(dir + "/nvme");
  const RunSpec base{.stage = 3,
                     .world = 2,
                     .accumulation = 3,
                     .steps = 8,
                     .checkpoint_every = 4,
                     .offload_optimizer = true,
                     .offload_param = true};
  const RunResult straight = run({.stage = 3, .world = 2, .accumulation = 3, .steps = 8});
  RunSpec crashed_host = base;
  crashed_host.output_dir = dir + "/host";
  crashed_host.crash_after = 4;
  run(crashed_host);
  RunSpec crashed_disk = base;
  crashed_disk.output_dir = dir + "/disk";
  crashed_disk.crash_after = 4;
  crashed_disk.param_nvme_path = dir + "/nvme";
  crashed_disk.nvme_path = dir + "/nvme";
  run(crashed_disk);

  RunSpec resumed_host = base;
  resumed_host.output_dir = dir + "/host_resumed";
  resumed_host.resume = resolve_checkpoint_path(crashed_host.output_dir);
  RunSpec resumed_disk = base;
  resumed_disk.output_dir = dir + "/disk_resumed";
  resumed_disk.resume = resolve_checkpoint_path(crashed_disk.output_dir);
  resumed_disk.param_nvme_path = dir + "/nvme";
  resumed_disk.param_nvme_buffers = 2;
  const RunResult host_after = run(resumed_host);
  const RunResult disk_after = run(resumed_disk);
  ASSERT_EQ(disk_after.losses.size(), 4u);
  EXPECT_TRUE(bitwise_equal(host_after, disk_after));
  const RunResult tail{{straight.losses.begin() + 4, straight.losses.end()},
                       {straight.grad_norms.begin() + 4, straight.grad_norms.end()},
                       straight.weights};
  expect_close(disk_after, tail, "parameters on disk, resumed at world 2");
  expect_model_file_holds(resumed_disk.output_dir + "/model.h5", disk_after);
  std::filesystem::remove_all(dir);
}

// The engine's swap files while it trains (world 2, stage 2): one per rank, each the size of the estimator's
// disk_file — the sum of the rank's records, which test_zero_disk_tier.cpp checks record by record — for
// unequal records: the unit slices (the embeddings' 8000 x 16 vs each layer's few thousand elements), or
// with sub_group_size 1000 their unequal pieces; less than records x the largest (a buffer's size).
TEST(ZeroDiskTierFiles, SwapFilesAreTheSumOfUnequalRecords) {
  const std::string dir = temp_dir("disk_tier_files");
  std::filesystem::create_directories(dir);
  constexpr int kWorld = 2;
  const ParameterTable table(tiny_model());
  const ZeroPartition partition(table, kWorld);
  std::vector<HostBlockExtent> slices;
  for (const ZeroUnit& unit : partition.units()) slices.push_back({unit.shard_begin, unit.slice_numel});
  for (const int64_t sub_group_size : {int64_t{1'000'000'000}, int64_t{1000}}) {
    SCOPED_TRACE(str("sub_group_size ", sub_group_size));
    ZeroOffload disk{.optimizer = true, .disk_buffers = 1};
    disk.sub_group_size = sub_group_size;
    const ZeroStateBytes bytes = zero_state_bytes(partition, 2, DType::f32, disk);
    const uint64_t sum = bytes.disk_file;
    ASSERT_LT(sum, cut_into_sub_groups(slices, sub_group_size).size() * bytes.host_optimizer);

    RunSpec spec{.stage = 2, .world = kWorld, .steps = 2, .nvme_path = dir, .nvme_buffers = 2};
    spec.sub_group_size = sub_group_size;
    int checked = 0;
    {
      MrpcTrainer trainer(config_for(spec), tiny_model());
      trainer.set_step_callback([&](const StepRecord&) {
        std::vector<uintmax_t> sizes;
        for (const auto& entry : std::filesystem::directory_iterator(dir)) sizes.push_back(entry.file_size());
        EXPECT_EQ(sizes, std::vector<uintmax_t>(kWorld, sum));
        ++checked;
      });
      trainer.train();
    }
    EXPECT_EQ(checked, 2);
    EXPECT_TRUE(std::filesystem::is_empty(dir)) << "swap files left in " << dir;  // the engines removed them
  }
  std::filesystem::remove_all(dir);
}

// World 2, stage 2, accumulation 3, 8 steps, writing to `dir`/a: it checkpoints at step 4 and crashes after
// it (the offloaded and disk-tier resume tests below add their store to it).
RunSpec crashing_after_checkpoint(const std::string& dir) {
  return {.stage = 2,
          .world = 2,
          .accumulation = 3,
          .steps = 8,
          .output_dir = dir + "/a",
          .checkpoint_every = 4,
          .crash_after = 4};
}

// Checkpoints hold the full state, read back through the swap files: a world-2 run with the disk tier
// checkpoints, crashes, and resumes with the disk tier at world 3, continuing the curve of a run that never
// stopped (within the cross-world tolerance). Sub-groups of 1000 elements before and 777 after, so the
// checkpoint's pieces cross sub-group boundaries on both sides.
TEST(ZeroDiskTierTrainingCheckpoint, SwappedStateSavesAndResumes) {
  const std::string dir = temp_dir("disk_tier_resume");
  std::filesystem::create_directories(dir + "/nvme");
  const RunResult straight = run({.stage = 2, .world = 2, .accumulation = 3, .steps = 8});
  RunSpec crashed = crashing_after_checkpoint(dir);
  crashed.nvme_path = dir + "/nvme";
  crashed.nvme_buffers = 3;
  crashed.nvme_pipeline = true;
  crashed.sub_group_size = 1000;
  run(crashed);
  EXPECT_TRUE(std::filesystem::is_empty(dir + "/nvme")) << "a failed run removes its swap files too";
  expect_resume_continues(straight, crashed,
                          {.stage = 3,
                           .world = 3,
                           .accumulation = 2,
                           .steps = 8,
                           .nvme_path = dir + "/nvme",
                           .nvme_buffers = 2,
                           .sub_group_size = 777},
                          "disk-tier stage-2 checkpoint resumed with the disk tier at stage 3, world 3");
  std::filesystem::remove_all(dir);
}

// An offloaded world-2 stage-2 run checkpoints (the state read back from the host store) and resumes without
// offload at world 3, continuing the curve of the run that never stopped.
TEST(ZeroOffloadTrainingCheckpoint, OffloadedStateSavesAndResumes) {
  const std::string dir = temp_dir("offload_resume");
  const RunResult straight = run({.stage = 2, .world = 2, .accumulation = 3, .steps = 8});
  RunSpec crashed = crashing_after_checkpoint(dir);
  crashed.offload_optimizer = true;
  run(crashed);
  expect_resume_continues(straight, crashed,
                          {.stage = 3,
                           .world = 3,
                           .accumulation = 2,
                           .steps = 8,
                           .offload_optimizer = true,
                           .offload_param = true},
                          "offloaded stage-2 checkpoint resumed offloaded at stage 3, world 3");
  std::filesystem::remove_all(dir);
}

// A checkpoint written with a partial offload holds the same state as any other (each owned piece read from
// the host store and the device's buffers): resumed at another ratio, with the whole state on the host or
// none of it, the run continues the curve of the run that never stopped bit for bit (same world and stage);
// and a checkpoint without offload resumes at a ratio.
TEST(ZeroOffloadTrainingCheckpoint, PartialOffloadResumesAtAnyRatioBitForBit) {
  const std::string dir = temp_dir("partial_resume");
  const RunResult straight = run({.stage = 2, .world = 2, .accumulation = 3, .steps = 8});
  RunSpec crashed = crashing_after_checkpoint(dir);
  crashed.offload_optimizer = true;
  crashed.offload_ratio = 0.25;
  run(crashed);
  RunSpec resumed{.stage = 2, .world = 2, .accumulation = 3, .steps = 8};
  EXPECT_TRUE(resumes_bitwise(straight, crashed, resumed)) << "ratio 0.25 resumed without offload";
  resumed.offload_optimizer = true;
  resumed.offload_ratio = 0.75;
  EXPECT_TRUE(resumes_bitwise(straight, crashed, resumed)) << "ratio 0.25 resumed at 0.75";
  resumed.offload_ratio = 1.0;
  EXPECT_TRUE(resumes_bitwise(straight, crashed, resumed)) << "ratio 0.25 resumed with full offload";
  std::filesystem::remove_all(dir);

  RunSpec plain_crashed = crashing_after_checkpoint(dir);
  run(plain_crashed);
  resumed.offload_ratio = 0.5;
  EXPECT_TRUE(resumes_bitwise(straight, plain_crashed, resumed)) << "no offload resumed at 0.5";
  std::filesystem::remove_all(dir);
}

// --offload_overlap_update: the exact CPU update on a host thread, the next forward landing each unit as it
// reaches it (here with real forwards, evaluation and the final parameters read between steps) — the
// same losses and weights, bit for bit, as the update inside step(), at stages 1-3, with offload_param, with
// accumulation (the gradient shard) and streamed gradients.
TEST(ZeroOffloadTraining, OverlappedUpdateEqualsTheUpdateInsideStep) {
  for (const RunSpec& spec :
       {RunSpec{.stage = 1, .steps = 5, .offload_optimizer = true},
        RunSpec{.stage = 2, .steps = 5, .offload_optimizer = true},
        RunSpec{.stage = 2, .accumulation = 2, .steps = 4, .offload_optimizer = true},
        RunSpec{.stage = 3, .steps = 5, .offload_optimizer = true, .offload_param = true}}) {
    const RunResult inside = run(spec);
    RunSpec overlapped = spec;
    overlapped.overlap_update = true;
    EXPECT_TRUE(bitwise_equal(inside, run(overlapped)))
        << "stage " << spec.stage << ", accumulation " << spec.accumulation << ", offload_param "
        << spec.offload_param;
  }
}

// The delayed parameter update trains one step stale: step 0's loss is the exact run's, step 1's is computed
// before step 0's update lands (so it differs), and the curve stays close to the exact one. The
// evaluation at the end (rank 0 alone, below stage 3) sees the landed update on every rank.
TEST(ZeroOffloadTraining, DelayedUpdateIsOneStepStaleAndClose) {
  for (const int stage : {2, 3}) {
    const RunResult exact = run({.stage = stage, .world = 2, .steps = 8, .offload_optimizer = true});
    const RunResult delayed =
        run({.stage = stage, .world = 2, .steps = 8, .offload_optimizer = true, .delayed_update = true});
    ASSERT_EQ(delayed.losses.size(), exact.losses.size());
    EXPECT_EQ(delayed.losses[0], exact.losses[0]) << stage;
    EXPECT_NE(delayed.losses[1], exact.losses[1]) << stage;
    for (size_t i = 0; i < exact.losses.size(); ++i)
      EXPECT_NEAR(delayed.losses[i], exact.losses[i], 0.02) << "stage " << stage << " step " << i;
    EXPECT_NE(delayed.weights, exact.weights);  // the last update landed, but on other gradients
  }
}

// Wherever the delayed update lands — whole at the start of step() (the reference), unit by unit after the
// next step's norm, or each unit the CPU is done with at its gradients_ready during the backward — training
// gives the same losses, norms and weights, bit for bit, at stages 1-3 (stage 3 with offload_param too),
// worlds 1-2, with and without pinned host buffers and accumulation, for 3, 4 and 7 units. The comparison
// can fail: the exact update gives other losses.
TEST(ZeroOffloadTraining, DelayedUpdateLandsTheSameWherever) {
  for (const int layers : {1, 2, 5}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (const int world : {1, 2}) {
        const bool pin = (stage + world + layers) % 2 == 0;
        RunSpec whole{.stage = stage,
                      .world = world,
                      .accumulation = world == 1 && layers == 2 ? 2 : 1,
                      .steps = 3,
                      .offload_optimizer = true,
                      .offload_param = stage == 3 && world == 2 && layers != 1,
                      .delayed_update = true,
                      .delayed_landing = "whole",
                      .pin_memory = pin,
                      .layers = layers};
        const RunResult expected = run(whole);
        ASSERT_EQ(expected.losses.size(), 3u);
        for (const char* landing : {"after_norm", "in_backward"}) {
          RunSpec other = whole;
          other.delayed_landing = landing;
          EXPECT_TRUE(bitwise_equal(expected, run(other))) << landing << ", layers " << layers << " stage "
                                                           << stage << " world " << world << " pin " << pin;
        }
        if (layers == 2 && stage == 2 && world == 2) {
          RunSpec exact = whole;
          exact.delayed_update = false;
          EXPECT_FALSE(bitwise_equal(expected, run(exact)));
        }
      }
    }
  }
}

// The delayed update runs the CPU update on a host thread, which then walks the swap files: the disk tier
// changes nothing there either (bit for bit the resident delayed update).
TEST(ZeroDiskTierTraining, DelayedUpdateEqualsTheResidentOne) {
  const std::string dir = temp_dir("disk_tier_delayed");
  std::filesystem::create_directories(dir);
  const RunSpec resident{
      .stage = 2, .world = 2, .steps = 6, .offload_optimizer = true, .delayed_update = true};
  RunSpec on_disk = resident;
  on_disk.nvme_path = dir;
  on_disk.nvme_buffers = 3;
  on_disk.nvme_pipeline = true;
  const RunResult expected = run(resident);
  EXPECT_TRUE(bitwise_equal(expected, run(on_disk)));
  on_disk.sub_group_size = 1000;  // many sub-groups per unit
  EXPECT_TRUE(bitwise_equal(expected, run(on_disk))) << "sub_group_size 1000";
  std::filesystem::remove_all(dir);
}

// A world-2 stage-2 checkpoint resumes at world 3 and continues the curve; the consolidated model equals the
// trainer's own parameters and loads as a model file.
TEST(ZeroCheckpoint, ResumesAtAnotherWorldSizeAndConsolidates) {
  const std::string dir = temp_dir("reshard");
  const RunResult straight = run({.stage = 2, .world = 2, .accumulation = 3, .steps = 12});
  RunSpec first{
      .stage = 2, .world = 2, .accumulation = 3, .steps = 6, .output_dir = dir + "/a", .checkpoint_every = 6};
  const RunResult half = run(first);
  const std::string checkpoint = sharded_checkpoint_path(dir + "/a", 6);
  ASSERT_TRUE(is_sharded_checkpoint(checkpoint));
  EXPECT_TRUE(std::filesystem::exists(checkpoint + "/rank_1_of_2.h5"));

  // Consolidation: the checkpoint's master equals the run's final parameters.
  consolidate_checkpoint(checkpoint, dir + "/consolidated.h5");
  expect_model_file_holds(dir + "/consolidated.h5", half);

  // A 12-step world-2 run (accumulation 3) at `saved_stage` crashes after its step-6 checkpoint and resumes
  // at world 3 (accumulation 2: six micro-batches per step as before) at `resumed_stage`. The crash keeps the
  // 12-step learning-rate schedule.
  auto crash_and_resume_at_world_3 = [&](int saved_stage, int resumed_stage, const std::string& out) {
    const RunSpec crashed{.stage = saved_stage,
                          .world = 2,
                          .accumulation = 3,
                          .steps = 12,
                          .output_dir = out,
                          .checkpoint_every = 6,
                          .crash_after = 6};
    run(crashed);
    expect_resume_continues(straight, crashed,
                            {.stage = resumed_stage, .world = 3, .accumulation = 2, .steps = 12},
                            str("stage ", resumed_stage, " world 3 resumed from stage ", saved_stage));
  };
  crash_and_resume_at_world_3(2, 3, dir + "/c");  // a step_6.zero directory
  crash_and_resume_at_world_3(0, 1, dir + "/b");  // stage 0 writes the single file step_6.h5
  std::filesystem::remove_all(dir);
}

// The message of the error load_checkpoint throws ("" when it loads).
std::string load_error(const DebertaConfig& model, const std::string& checkpoint) {
  MrpcTrainer t(config_for({.stage = 1, .world = 2, .steps = 4}), model);
  try {
    t.load_checkpoint(checkpoint);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ZeroCheckpoint, MissingShardAndAnotherModelAreClearErrors) {
  const std::string dir = temp_dir("errors");
  run({.stage = 1, .world = 2, .steps = 2, .output_dir = dir, .checkpoint_every = 2});
  const std::string checkpoint = sharded_checkpoint_path(dir, 2);
  EXPECT_EQ(load_error(tiny_model(), checkpoint), "");
  DebertaConfig other = tiny_model();  // another model: a different FFN width
  other.intermediate_size = 48;
  EXPECT_NE(load_error(other, checkpoint).find("intermediate_size"), std::string::npos);
  std::filesystem::remove(checkpoint + "/rank_1_of_2.h5");
  EXPECT_NE(load_error(tiny_model(), checkpoint).find("rank_1_of_2.h5"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// The rank_0 file of a step_<N>.zero directory holds the run's resolved configuration: a resume with another
// seed is refused before anything is loaded, one with another learning rate is allowed and said.
TEST(ZeroCheckpoint, ResumeComparesTheConfigurationStoredWithTheShards) {
  const std::string dir = temp_dir("config");
  const RunSpec saved{.stage = 1, .world = 2, .steps = 2, .output_dir = dir, .checkpoint_every = 2};
  run(saved);
  const std::string checkpoint = sharded_checkpoint_path(dir, 2);
  const CheckpointSummary summary = read_checkpoint_summary(checkpoint);
  EXPECT_EQ(summary.state.optimizer_step, 2);
  EXPECT_EQ(summary.training_config, config_for(saved).describe());

  TrainConfig other_seed = config_for({.stage = 1, .world = 2, .steps = 4});
  other_seed.seed = 12;
  MrpcTrainer refused(other_seed, tiny_model());
  try {
    refused.load_checkpoint(checkpoint);
    ADD_FAILURE() << "resuming with another seed was allowed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resume from " + checkpoint), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("seed 11 -> 12"), std::string::npos) << e.what();
  }

  TrainConfig other_lr = config_for({.stage = 1, .world = 2, .steps = 4});
  other_lr.learning_rate = 2e-3;
  MrpcTrainer allowed(other_lr, tiny_model());
  testing::internal::CaptureStdout();
  allowed.load_checkpoint(checkpoint);
  const std::string said = testing::internal::GetCapturedStdout();
  EXPECT_NE(said.find("continuing with changed learning_rate "), std::string::npos) << said;
  EXPECT_NE(said.find("continuing with changed max_train_steps 2 -> 4, not bitwise the original run"),
            std::string::npos)
      << said;
  std::filesystem::remove_all(dir);
}

// --debug_collectives wraps every rank's communicator in the sequence check: the same training, bit for bit.
TEST(ZeroTrainingDebug, CheckedCollectivesTrainTheSame) {
  const RunResult plain = run({.stage = 3, .world = 2, .steps = 4});
  TrainConfig config = config_for({.stage = 3, .world = 2, .steps = 4});
  config.debug_collectives = true;
  MrpcTrainer trainer(config, tiny_model());
  trainer.train();
  ASSERT_EQ(trainer.steps().size(), plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) EXPECT_EQ(trainer.steps()[i].loss, plain.losses[i]);
}

}  // namespace
}  // namespace zt::optim
