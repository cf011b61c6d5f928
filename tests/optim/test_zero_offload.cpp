// ZeRO CPU offload at the engine: the byte formula, the host store, and bad input refused before anything
// is allocated (stage rules, a host too small for the plan). Training parity lives in
// test_zero_training.cpp (ZeroOffloadTraining).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/zero/engine.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/memory_estimate.h"
#include "optim/zero/owned_blocks.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "tests/optim/zero_offload_harness.h"

// Options are filled with designated initializers; the members left out keep their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace zt::optim {
namespace {

DebertaConfig tiny_config() {
  return testing::offload_tiny_config();
}

// The message of the error constructing a world-1 engine with `options` throws ("" when it constructs).
std::string engine_error(const ZeroEngineOptions& options) {
  const DebertaConfig config = tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  try {
    ZeroEngine engine(table, config, *comms[0], options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ZeroOffload, StateBytesMoveMasterAndMomentsToTheHost) {
  const ParameterTable table(tiny_config());
  for (int world : {1, 2, 4}) {
    const ZeroPartition part(table, world);
    const auto shard = static_cast<size_t>(part.shard_numel());
    for (int stage = 1; stage <= 3; ++stage) {
      const ZeroStateBytes plain = zero_state_bytes(part, stage, DType::bf16);
      const ZeroStateBytes off = zero_state_bytes(part, stage, DType::bf16, {.optimizer = true});
      EXPECT_EQ(plain.host_total(), 0u);
      EXPECT_EQ(off.master, 0u);
      EXPECT_EQ(off.optimizer, 0u);
      EXPECT_EQ(off.compute_copy, plain.compute_copy);
      EXPECT_EQ(off.gradients, plain.gradients);
      EXPECT_EQ(off.total(), plain.total() - plain.master - plain.optimizer);
      EXPECT_EQ(off.host_optimizer, 12 * shard);
      EXPECT_EQ(off.host_gradients, 4 * shard);
      EXPECT_EQ(off.host_parameters, 2 * shard);
    }
    const ZeroStateBytes both = zero_state_bytes(part, 3, DType::bf16, {.optimizer = true, .param = true});
    EXPECT_EQ(both.compute_copy, 0u);
    EXPECT_EQ(both.host_parameters, 2 * shard);
    // Streamed gradients: no device gradient shard, the four buckets instead (also at world size 1).
    for (int stage = 2; stage <= 3; ++stage) {
      const ZeroStateBytes kept = zero_state_bytes(part, stage, DType::bf16, {.optimizer = true});
      const ZeroStateBytes streamed =
          zero_state_bytes(part, stage, DType::bf16, {.optimizer = true, .stream_gradients = true});
      const auto& units = part.units();
      const auto buckets =
          4 * static_cast<size_t>(units.front().numel + units.back().numel + 2 * part.largest_layer_unit());
      EXPECT_EQ(streamed.gradients, 0u);
      EXPECT_EQ(streamed.buffers, kept.buffers + (world == 1 ? buckets : 0)) << "stage " << stage;
      EXPECT_EQ(streamed.host_total(), kept.host_total());
    }
  }
}

// A partial offload (ZeroOffload::ratio) keeps the state of the shard's first H elements on the host and the
// rest's on the device: the device's master (mixed) and m, v shrink to S - H, the host's buffers are H long,
// and the device keeps its gradient shard (not streamed: the device part reads it).
TEST(ZeroOffload, PartialOffloadSplitsTheStateBytes) {
  const ParameterTable table(tiny_config());
  for (int world : {1, 2, 4}) {
    const ZeroPartition part(table, world);
    const int64_t S = part.shard_numel();
    for (const double ratio : {0.1, 0.5, 0.9}) {
      const auto H = static_cast<size_t>(offloaded_shard_numel(S, ratio));
      ASSERT_EQ(H % 32, 0u);
      EXPECT_LT(H, static_cast<size_t>(S));
      EXPECT_NEAR(static_cast<double>(H), ratio * static_cast<double>(S), 16.0);
      const auto D = static_cast<size_t>(S) - H;
      for (int stage = 1; stage <= 3; ++stage) {
        const ZeroStateBytes plain = zero_state_bytes(part, stage, DType::bf16);
        ZeroOffload offload{.optimizer = true, .stream_gradients = true};
        offload.ratio = ratio;
        const ZeroStateBytes partial = zero_state_bytes(part, stage, DType::bf16, offload);
        EXPECT_EQ(partial.master, 4 * D);
        EXPECT_EQ(partial.optimizer, 8 * D);
        EXPECT_EQ(partial.gradients, plain.gradients) << "stage " << stage;  // not streamed
        EXPECT_EQ(partial.compute_copy, plain.compute_copy);
        EXPECT_EQ(partial.host_optimizer, 12 * H);
        EXPECT_EQ(partial.host_gradients, 4 * H);
        EXPECT_EQ(partial.host_parameters, 2 * H);
        // f32: the compute copy is the device part's master.
        EXPECT_EQ(zero_state_bytes(part, stage, DType::f32, offload).master, 0u);
      }
    }
    EXPECT_EQ(offloaded_shard_numel(S, 1.0), S);
    EXPECT_EQ(offloaded_shard_numel(S, 1e-9), 32);  // never an empty host part
  }
  EXPECT_THROW(offloaded_shard_numel(1024, 0.0), Error);
  EXPECT_THROW(offloaded_shard_numel(1024, 1.5), Error);
}

// split_owned_blocks: the host parts are the shard's prefix with the blocks' own offsets, the device parts
// the rest at shard offset - H in the device's buffers; together they cover each block once.
TEST(ZeroOffload, PartialOffloadSplitsTheOwnedBlocksAtOneShardElement) {
  const ParameterTable table(tiny_config());
  const ZeroPartition part(table, 2);
  const std::vector<OwnedBlock> blocks = owned_blocks(part, 2, 1, true);
  const int64_t H = offloaded_shard_numel(part.shard_numel(), 0.5);
  const SplitOwnedBlocks split = split_owned_blocks(blocks, H, /*mixed=*/true);
  ASSERT_EQ(split.host.size(), blocks.size());
  int64_t on_host = 0, on_device = 0, cut_units = 0;
  for (size_t u = 0; u < blocks.size(); ++u) {
    const OwnedBlock &b = blocks[u], &h = split.host[u], &d = split.device[u];
    EXPECT_EQ(h.numel + d.numel, b.numel);
    if (h.numel > 0) {
      EXPECT_EQ(h.master, b.master);
    }
    EXPECT_LE(h.master + h.numel, H);  // inside the host buffers, even when empty
    if (d.numel > 0) {
      EXPECT_EQ(d.master, b.master + h.numel - H);
      EXPECT_EQ(d.moments, d.master);
      EXPECT_EQ(d.grad, b.grad + h.numel);
      EXPECT_EQ(d.compute, b.compute + h.numel);
    }
    if (h.numel > 0 && d.numel > 0) ++cut_units;
    int64_t ranged = 0, block_ranged = 0;
    for (const TensorRange& r : h.ranges) ranged += r.numel;
    for (const TensorRange& r : d.ranges) ranged += r.numel;
    for (const TensorRange& r : b.ranges) block_ranged += r.numel;
    EXPECT_EQ(ranged, block_ranged) << "unit " << u;
    on_host += h.numel;
    on_device += d.numel;
  }
  EXPECT_EQ(on_host, H);
  EXPECT_EQ(on_device, part.shard_numel() - H);
  EXPECT_EQ(cut_units, 1);  // the prefix ends inside one unit
  // f32: the device part's master is the compute copy.
  const SplitOwnedBlocks f32 = split_owned_blocks(blocks, H, /*mixed=*/false);
  for (const OwnedBlock& d : f32.device) EXPECT_EQ(d.master, d.compute);
}

// Each DeepSpeed section's pin_memory pins its own buffers: offload_param's the stage-3 parameter shard (or
// its disk buffers), offload_optimizer's everything else but the disk tier's optimizer buffers.
TEST(ZeroOffload, PinnedHostBytesFollowEachSectionsPinMemory) {
  const ParameterTable table(tiny_config());
  const ZeroPartition part(table, 2);
  const auto shard = static_cast<size_t>(part.shard_numel());
  const ZeroStateBytes both = zero_state_bytes(part, 3, DType::bf16, {.optimizer = true, .param = true});
  EXPECT_EQ(both.host_offloaded_parameters, 2 * shard);
  EXPECT_EQ(pinned_host_bytes(both, true, true, false), 18 * shard);
  EXPECT_EQ(pinned_host_bytes(both, true, false, false), 16 * shard);
  EXPECT_EQ(pinned_host_bytes(both, false, true, false), 2 * shard);
  EXPECT_EQ(pinned_host_bytes(both, false, false, false), 0u);
  // The delayed update's staging shard is the CPU update's (offload_optimizer's), not offload_param's.
  const ZeroStateBytes delayed =
      zero_state_bytes(part, 3, DType::bf16, {.optimizer = true, .param = true, .delayed_update = true});
  EXPECT_EQ(delayed.host_parameters, 4 * shard);
  EXPECT_EQ(pinned_host_bytes(delayed, true, false, false), 22 * shard);
  EXPECT_EQ(pinned_host_bytes(delayed, false, true, false), 2 * shard);
  // Parameters on disk: their buffers are offload_param's; optimizer state on disk: its buffers pageable.
  const ZeroStateBytes on_disk = zero_state_bytes(
      part, 3, DType::bf16, {.optimizer = true, .param = true, .disk_buffers = 3, .param_disk_buffers = 2});
  EXPECT_EQ(on_disk.host_offloaded_parameters, on_disk.host_parameters);  // 2 aligned buffers, no staging
  EXPECT_NE(on_disk.host_offloaded_parameters, 2 * shard);
  EXPECT_EQ(pinned_host_bytes(on_disk, false, true, true), on_disk.host_offloaded_parameters);
  EXPECT_EQ(pinned_host_bytes(on_disk, true, true, true), on_disk.host_total() - on_disk.host_optimizer);
  // Below stage 3 offload_param holds nothing.
  const ZeroStateBytes stage2 = zero_state_bytes(part, 2, DType::bf16, {.optimizer = true});
  EXPECT_EQ(stage2.host_offloaded_parameters, 0u);
  EXPECT_EQ(pinned_host_bytes(stage2, false, true, false), 0u);
  EXPECT_EQ(pinned_host_bytes(stage2, true, false, false), stage2.host_total());
}

// The estimator's device formula (allocator size classes aside: device = false) agrees with the engine's
// bytes with and without streamed gradients.
TEST(ZeroOffload, EstimatorCountsStreamedGradientsAsTheEngineDoes) {
  const DebertaConfig model = tiny_config();
  const ParameterTable table(model);
  for (int world : {1, 2}) {
    for (int stage = 2; stage <= 3; ++stage) {
      for (const bool streamed : {false, true}) {
        const ZeroOffload offload{.optimizer = true, .param = stage == 3, .stream_gradients = streamed};
        const ZeroStateBytes engine =
            zero_state_bytes(ZeroPartition(table, world), stage, DType::bf16, offload);
        const MemoryEstimate e = estimate_memory(model, stage, world, DType::bf16, 4, 16, offload, false);
        EXPECT_EQ(e.state.gradients, engine.gradients) << "stage " << stage << " world " << world << streamed;
        EXPECT_EQ(e.state.buffers, engine.buffers) << "stage " << stage << " world " << world << streamed;
        EXPECT_EQ(e.state.total(), engine.total()) << "stage " << stage << " world " << world << streamed;
      }
    }
  }
}

TEST(ZeroOffload, EstimatorReportsDeviceAndHostSeparately) {
  const DebertaConfig model = tiny_config();
  const MemoryEstimate plain = estimate_memory(model, 2, 2, DType::bf16, 4, 16);
  const MemoryEstimate off = estimate_memory(model, 2, 2, DType::bf16, 4, 16, {.optimizer = true});
  EXPECT_EQ(plain.host(), 0u);
  EXPECT_LT(off.total(), plain.total());
  EXPECT_EQ(off.host(), off.state.host_total());
  EXPECT_GT(off.host(), plain.state.master + plain.state.optimizer);  // + the gradient and parameter shards
  const std::string table =
      describe_memory_estimates(model, 3, 2, DType::bf16, 4, 16, {.optimizer = true, .param = true});
  EXPECT_NE(table.find("3 +offload both (run)"), std::string::npos) << table;
  EXPECT_EQ(table.find("2 +offload opt (run)"), std::string::npos) << table;
  EXPECT_NE(table.find("host"), std::string::npos) << table;
  // A partial offload: between no offload and the full one on both sides, its own row marked as the run's.
  ZeroOffload partial{.optimizer = true};
  partial.ratio = 0.5;
  const MemoryEstimate half = estimate_memory(model, 2, 2, DType::bf16, 4, 16, partial);
  EXPECT_LT(half.total(), plain.total());
  EXPECT_GT(half.total(), off.total());
  EXPECT_GT(half.host(), 0u);
  EXPECT_LT(half.host(), off.host());
  const std::string partial_table = describe_memory_estimates(model, 2, 2, DType::bf16, 4, 16, partial);
  EXPECT_NE(partial_table.find("2 +offload 0.5 (run)"), std::string::npos) << partial_table;
  EXPECT_EQ(partial_table.find("2 +offload opt (run)"), std::string::npos) << partial_table;
}

// The engine alone (synthetic gradients, clipping active): offloaded equals not offloaded, bit for bit, at
// every stage, with either copy mode (the CPU backend's copies are synchronous in both).
TEST(ZeroOffload, EngineStepEqualsTheNonOffloadedStep) {
  for (int stage = 1; stage <= 3; ++stage) {
    const std::vector<float> plain =
        testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage, {}, 4);
    ASSERT_FALSE(plain.empty());
    for (const bool pipelined : {false, true}) {
      EXPECT_EQ(plain,
                testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage,
                                                        {.optimizer = true, .pipelined = pipelined}, 4))
          << "stage " << stage;
    }
    if (stage == 3) {
      EXPECT_EQ(plain, testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, 3,
                                                               {.optimizer = true, .param = true}, 4));
    }
    // The delayed update applies the same updates, one step later: with gradients that do not depend on
    // the parameters (these), the result once it has landed is the same bits.
    EXPECT_EQ(plain, testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage,
                                                             {.optimizer = true, .delayed_update = true}, 4))
        << "stage " << stage << " delayed";
    if (stage == 3) {
      EXPECT_EQ(plain, testing::train_with_synthetic_gradients(
                           DeviceKind::cpu, DType::f32, 3,
                           {.optimizer = true, .param = true, .delayed_update = true}, 4))
          << "stage 3 delayed with offload_param";
    }
    // Streamed gradients (stages 2/3): down from the buckets, the norm from the host copy; with the delayed
    // update, offload_param and sub-groups that cut everything.
    if (stage >= 2) {
      for (ZeroOffload streamed :
           {ZeroOffload{.optimizer = true, .param = stage == 3},
            ZeroOffload{.optimizer = true, .delayed_update = true, .sub_group_size = 7}}) {
        streamed.stream_gradients = true;
        EXPECT_EQ(plain,
                  testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage, streamed, 4))
            << "stage " << stage << " streamed gradients, delayed " << streamed.delayed_update;
      }
    }
    // sub_group_size: the CPU update (and the load and gather of the master) sub-group by sub-group, with
    // sub-groups that cut tensors, weight-decay ranges and units anywhere (7 elements), or a few per unit.
    for (const int64_t sub_group_size : {int64_t{7}, int64_t{1000}}) {
      ZeroOffload offload{.optimizer = true};
      offload.sub_group_size = sub_group_size;
      EXPECT_EQ(plain,
                testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage, offload, 4))
          << "stage " << stage << " sub_group_size " << sub_group_size;
      offload.delayed_update = true;
      offload.param = stage == 3;
      EXPECT_EQ(plain,
                testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, stage, offload, 4))
          << "stage " << stage << " delayed, sub_group_size " << sub_group_size;
    }
  }
  // The comparison can fail: fewer steps give other weights.
  EXPECT_NE(testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, 2, {}, 4),
            testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, 2, {.optimizer = true}, 3));
}

// A partial offload at ratios 0.1-0.9 (the host part's AdamW on the host store, the device part's on the
// engine's buffers, the gradients of the host part downloaded, its values uploaded) equals no offload bit
// for bit at worlds 1-4 and stages 1-3; with sub-groups that cut the host part anywhere too. The ratio 1 is
// the full offload.
TEST(ZeroOffload, PartialOffloadEqualsNoOffloadBitForBit) {
  for (int world = 1; world <= 4; ++world) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<float> plain = testing::train_ranks_with_synthetic_gradients(world, stage, {}, 3);
      ASSERT_FALSE(plain.empty());
      for (const double ratio : {0.1, 0.25, 0.5, 0.75, 0.9, 1.0}) {
        ZeroOffload offload{.optimizer = true};
        offload.ratio = ratio;
        EXPECT_EQ(plain, testing::train_ranks_with_synthetic_gradients(world, stage, offload, 3))
            << "world " << world << " stage " << stage << " ratio " << ratio;
      }
      ZeroOffload sub_grouped{.optimizer = true, .sub_group_size = 7};
      sub_grouped.ratio = 0.5;
      EXPECT_EQ(plain, testing::train_ranks_with_synthetic_gradients(world, stage, sub_grouped, 3))
          << "world " << world << " stage " << stage << " ratio 0.5, sub_group_size 7";
    }
  }
  // The comparison can fail: one step fewer gives other weights.
  ZeroOffload half{.optimizer = true};
  half.ratio = 0.5;
  EXPECT_NE(testing::train_ranks_with_synthetic_gradients(2, 2, {}, 3),
            testing::train_ranks_with_synthetic_gradients(2, 2, half, 2));
}

// The state read out per owned piece (a checkpoint) is the same whatever the ratio: a run checkpointed at one
// ratio resumes at another, with the whole state on the host or none of it, and ends on the bits of the run
// that never stopped.
TEST(ZeroOffload, PartialOffloadStateResumesAtAnyRatio) {
  const ZeroOffload none{};
  ZeroOffload quarter{.optimizer = true}, three_quarters{.optimizer = true}, full{.optimizer = true};
  quarter.ratio = 0.25;
  three_quarters.ratio = 0.75;
  struct Resume {
    ZeroOffload from, to;
    const char* what;
  };
  const Resume resumes[] = {{quarter, three_quarters, "0.25 -> 0.75"},
                            {three_quarters, none, "0.75 -> no offload"},
                            {none, quarter, "no offload -> 0.25"},
                            {quarter, full, "0.25 -> 1"},
                            {full, three_quarters, "1 -> 0.75"}};
  for (int world = 1; world <= 4; ++world) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<float> straight = testing::train_ranks_with_synthetic_gradients(world, stage, {}, 4);
      for (const Resume& r : resumes) {
        EXPECT_EQ(straight, testing::train_ranks_with_synthetic_gradients(world, stage, r.from, 4, r.to, 2))
            << "world " << world << " stage " << stage << " " << r.what;
      }
    }
  }
}

// overlap_update: the exact CPU update on a host thread in the forward's unit order, each unit landed when
// the next pass first touches it (here the synthetic backward: shared unit first, then layers, embeddings;
// gather_full_master lands the last step's) — the same bits as the update inside step(), with streamed
// gradients, offload_param and sub-groups; runs it does not cover fall back and still agree. (The CPU
// backend trains in f32; test_zero_offload_gpu.cpp has bf16/f16.)
TEST(ZeroOffload, OverlappedUpdateEqualsTheUpdateInsideStep) {
  for (const DType compute : {DType::f32}) {
    for (int stage = 1; stage <= 3; ++stage) {
      for (ZeroOffload offload :
           {ZeroOffload{.optimizer = true}, ZeroOffload{.optimizer = true, .param = true},
            ZeroOffload{.optimizer = true, .stream_gradients = true},
            ZeroOffload{.optimizer = true, .sub_group_size = 7},
            ZeroOffload{.optimizer = true, .delayed_update = true}}) {
        if (offload.param && stage != 3) continue;
        if (offload.stream_gradients && stage < 2) continue;
        const std::vector<float> inside =
            testing::train_with_synthetic_gradients(DeviceKind::cpu, compute, stage, offload, 4);
        ASSERT_FALSE(inside.empty());
        offload.overlap_update = true;
        EXPECT_EQ(inside,
                  testing::train_with_synthetic_gradients(DeviceKind::cpu, compute, stage, offload, 4))
            << dtype_name(compute) << " stage " << stage << " param " << offload.param << " streamed "
            << offload.stream_gradients << " sub-groups " << offload.sub_group_size << " delayed "
            << offload.delayed_update;
      }
    }
  }
}

// The delayed update is one step stale: after step() the model still reads the old parameters, and they
// change only when the update lands (finish_delayed_update, or the next step()).
TEST(ZeroOffload, DelayedUpdateLandsOneStepLater) {
  const DebertaConfig config = tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngine engine(table, config, *comms[0],
                    {.stage = 2, .max_grad_norm = 0, .offload = {.optimizer = true, .delayed_update = true}});
  Arena init("init", table.layout(DType::f32), {.zero_fill = true});
  for (int64_t i = 0; i < init.flat(DType::f32).numel(); ++i)
    init.flat(DType::f32).data_as<float>()[i] = 0.5f;
  engine.load_full_parameters(init);
  const Tensor w = engine.parameter_handles().shared.classifier_weight;
  LossScaler scaler = LossScaler::disabled();
  engine.begin_backward(true, true);
  testing::write_gradient(engine.gradient_handles().shared.classifier_weight, 1.0, 1.0);
  for (size_t u = 0; u <= shared_unit(config); ++u) engine.gradients_ready(u);
  engine.step(1e-2, scaler);
  EXPECT_EQ(w.data_as<float>()[0], 0.5f);  // the update is still in flight (or landed on the host only)
  engine.finish_delayed_update();
  EXPECT_NE(w.data_as<float>()[0], 0.5f);
  EXPECT_THROW(ZeroEngine(table, config, *comms[0], {.stage = 2, .offload = {.delayed_update = true}}),
               Error);
}

// What the model reads of every unit (stages 1/2: views of the whole compute copy), as bits.
std::vector<float> parameters_the_model_reads(const ZeroEngine& engine) {
  const DebertaTensors& p = engine.parameter_handles();
  std::vector<const Tensor*> tensors = {&p.embeddings.word_embeddings, &p.embeddings.ln_bias,
                                        &p.shared.rel_embeddings, &p.shared.classifier_weight};
  for (const DebertaLayerTensors& l : p.layers) {
    tensors.push_back(&l.query_weight);
    tensors.push_back(&l.output_ln_bias);
  }
  std::vector<float> out;
  for (const Tensor* t : tensors)
    out.insert(out.end(), t->data_as<float>(), t->data_as<float>() + t->numel());
  return out;
}

// Wherever the delayed update lands — whole at the start of step() (the reference), unit by unit after the
// next step's norm, or each unit the CPU is done with at its gradients_ready during the backward — the model
// reads the same values: the compute copy after every step, bit for bit, for 3, 4 and 7 units, with
// sub-groups that cut units and streamed gradients. The comparison can fail: the parameters change every
// step.
TEST(ZeroOffload, DelayedLandingPutsTheSameParametersWherever) {
  for (const int layers : {1, 2, 5}) {
    DebertaConfig config = tiny_config();
    config.num_hidden_layers = layers;
    const ParameterTable table(config);
    for (int stage = 1; stage <= 2; ++stage) {
      for (ZeroOffload offload :
           {ZeroOffload{.optimizer = true, .delayed_update = true},
            ZeroOffload{.optimizer = true, .delayed_update = true, .sub_group_size = 7},
            ZeroOffload{.optimizer = true, .delayed_update = true, .stream_gradients = true}}) {
        if (offload.stream_gradients && stage < 2) continue;
        auto comms = make_in_process_group(1);
        ZeroEngineOptions options{.stage = stage, .max_grad_norm = 0.5, .offload = offload};
        options.offload.delayed_landing = DelayedLanding::whole;
        ZeroEngine whole(table, config, *comms[0], options);
        options.offload.delayed_landing = DelayedLanding::after_norm;
        ZeroEngine after_norm(table, config, *comms[0], options);
        options.offload.delayed_landing = DelayedLanding::in_backward;
        ZeroEngine in_backward(table, config, *comms[0], options);
        const std::vector<ZeroEngine*> engines = {&whole, &after_norm, &in_backward};
        for (ZeroEngine* engine : engines)
          engine->load_full_parameters(testing::synthetic_initial_parameters(table));
        LossScaler scaler = LossScaler::disabled();
        std::vector<float> before = parameters_the_model_reads(whole);
        for (int step = 0; step < 4; ++step) {
          for (ZeroEngine* engine : engines) testing::synthetic_step(*engine, config, step, 1.0, scaler);
          const std::vector<float> after = parameters_the_model_reads(whole);
          const std::string where =
              str("layers ", layers, " stage ", stage, " sub-groups ", offload.sub_group_size, " streamed ",
                  offload.stream_gradients, " step ", step);
          EXPECT_EQ(after, parameters_the_model_reads(after_norm)) << where;
          EXPECT_EQ(after, parameters_the_model_reads(in_backward)) << where;
          if (step > 0) {
            EXPECT_NE(before, after) << where << ": the previous update landed";
          }
          before = after;
        }
        for (ZeroEngine* engine : engines) engine->finish_delayed_update();
        EXPECT_EQ(parameters_the_model_reads(whole), parameters_the_model_reads(after_norm));
        EXPECT_EQ(parameters_the_model_reads(whole), parameters_the_model_reads(in_backward));
      }
    }
  }
}

TEST(ZeroOffload, DelayedLandingNames) {
  EXPECT_EQ(delayed_landing_named("whole"), DelayedLanding::whole);
  EXPECT_EQ(delayed_landing_named("after_norm"), DelayedLanding::after_norm);
  EXPECT_EQ(delayed_landing_named("in_backward"), DelayedLanding::in_backward);
  EXPECT_THROW(delayed_landing_named("in_forward"), Error);
}

// The gradients go down from gradients_ready on the last micro-batch; a step without them is an error, not
// an update from stale host gradients.
TEST(ZeroOffload, StepWithoutDownloadedGradientsIsAnError) {
  const DebertaConfig config = tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngine engine(table, config, *comms[0], {.stage = 2, .offload = {.optimizer = true}});
  LossScaler scaler = LossScaler::disabled();
  engine.begin_backward(true, true);
  engine.gradients_ready(kEmbeddingsUnit);  // the other units never report
  try {
    engine.step(1e-3, scaler);
    ADD_FAILURE() << "step did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("never went down"), std::string::npos) << e.what();
  }
}

TEST(ZeroOffload, SubGroupsCutEachBlockIntoNearEqualPieces) {
  const std::vector<HostBlockExtent> cut = cut_into_sub_groups({{0, 10}, {16, 6}, {22, 0}, {22, 3}}, 4);
  // 10 -> 4 + 3 + 3 (three pieces of at most 4), 6 -> 3 + 3, an empty block stays one empty piece, 3 -> 3.
  const std::vector<std::pair<int64_t, int64_t>> expected = {{0, 4},  {4, 3},  {7, 3}, {16, 3},
                                                             {19, 3}, {22, 0}, {22, 3}};
  ASSERT_EQ(cut.size(), expected.size());
  for (size_t i = 0; i < cut.size(); ++i) {
    EXPECT_EQ(cut[i].offset, expected[i].first) << i;
    EXPECT_EQ(cut[i].numel, expected[i].second) << i;
  }
  EXPECT_EQ(sub_group_count(10, 10), 1);
  EXPECT_EQ(sub_group_count(11, 10), 2);
  EXPECT_EQ(cut_into_sub_groups({{5, 10}}, 1'000'000'000).size(), 1u);  // DeepSpeed's default: whole
  try {
    cut_into_sub_groups({{0, 10}}, 0);
    ADD_FAILURE() << "sub_group_size 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("zero_optimization.sub_group_size must be at least 1"), std::string::npos)
        << e.message();
  }
}

TEST(ZeroOffload, ResidentStoreHandsOutOneBlockAtATime) {
  ResidentHostOptimizerStore store({{0, 10}, {16, 6}}, 32, MemoryKind::host);
  EXPECT_EQ(store.block_count(), 2u);
  HostStateBlock b = store.acquire(1);
  ASSERT_EQ(b.master.size(), 6u);
  EXPECT_EQ(b.exp_avg[0], 0.0f);  // zero-filled
  b.master[0] = 3.0f;
  EXPECT_THROW(store.acquire(0), Error);  // block 1 still held
  store.release(1, true);
  EXPECT_EQ(store.acquire(1).master[0], 3.0f);
  EXPECT_THROW(store.release(0, false), Error);
  store.release(1, false);
  EXPECT_THROW(store.acquire(2), Error);
  EXPECT_THROW(ResidentHostOptimizerStore({{30, 6}}, 32, MemoryKind::host), Error);
}

// Gradients on the activations (ZeroEngineOptions::gradient_memory) are a stage-0 placement: refused above.
TEST(ZeroEngineGradientMemory, RefusedAboveStageZero) {
  alignas(128) static float memory[1 << 16];
  const DebertaConfig config = tiny_config();
  const ParameterTable table(config);
  ASSERT_LE(ZeroPartition(table, 1).layout(DType::f32).total_bytes(), sizeof(memory));
  for (int stage = 1; stage <= 3; ++stage) {
    EXPECT_NE(engine_error({.stage = stage, .gradient_memory = memory})
                  .find("gradients on the activations are a stage-0 placement"),
              std::string::npos)
        << "stage " << stage;
  }
  EXPECT_EQ(engine_error({.stage = 0, .gradient_memory = memory}), "");
}

// Streamed gradients need a sharded gradient at stage 2/3 with offload, and one micro-batch per step.
TEST(ZeroOffload, StreamedGradientsRefuseStageOneAndAccumulation) {
  EXPECT_NE(engine_error({.stage = 1, .offload = {.optimizer = true, .stream_gradients = true}})
                .find("stream_gradients needs ZeRO stage 2 or 3 with offload_optimizer"),
            std::string::npos);
  EXPECT_NE(engine_error({.stage = 2, .offload = {.stream_gradients = true}}).find("without offload"),
            std::string::npos);
  const DebertaConfig config = tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngine engine(table, config, *comms[0],
                    {.stage = 2, .offload = {.optimizer = true, .stream_gradients = true}});
  try {
    engine.begin_backward(true, false);
    ADD_FAILURE() << "accumulation with streamed gradients should be refused";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("one micro-batch per step"), std::string::npos) << e.message();
  }
}

TEST(ZeroOffload, BadPlansAreRefusedBeforeAllocation) {
  EXPECT_EQ(engine_error({.stage = 2, .offload = {.optimizer = true}}), "");
  EXPECT_NE(
      engine_error({.stage = 0, .offload = {.optimizer = true}}).find("offload_optimizer needs ZeRO stage 1"),
      std::string::npos);
  EXPECT_NE(engine_error({.stage = 2, .offload = {.optimizer = true, .param = true}})
                .find("offload_param needs ZeRO stage 3"),
            std::string::npos);
  EXPECT_NE(
      engine_error({.stage = 3, .offload = {.param = true}}).find("offload_param needs offload_optimizer"),
      std::string::npos);

  // offload_optimizer.ratio: in (0, 1], and below 1 only where the update runs inside step() with the
  // state in host memory.
  auto with_ratio = [](ZeroEngineOptions options, double ratio) {
    options.offload.ratio = ratio;
    return options;
  };
  EXPECT_EQ(engine_error(with_ratio({.stage = 1, .offload = {.optimizer = true}}, 0.3)), "");
  for (const double bad : {0.0, -0.5, 1.5}) {
    EXPECT_NE(
        engine_error(with_ratio({.stage = 2, .offload = {.optimizer = true}}, bad)).find("must be in (0, 1]"),
        std::string::npos)
        << bad;
  }
  EXPECT_NE(engine_error(with_ratio({.stage = 0}, 0.5)).find("needs offload_optimizer"), std::string::npos);
  EXPECT_NE(engine_error(with_ratio({.stage = 3, .offload = {.optimizer = true, .param = true}}, 0.5))
                .find("not with offload_param"),
            std::string::npos);
  EXPECT_NE(
      engine_error(with_ratio({.stage = 2, .offload = {.optimizer = true, .delayed_update = true}}, 0.5))
          .find("not with the delayed update"),
      std::string::npos);
  EXPECT_NE(
      engine_error(with_ratio({.stage = 2, .offload = {.optimizer = true, .overlap_update = true}}, 0.5))
          .find("not with overlap_update"),
      std::string::npos);
  EXPECT_NE(
      engine_error(with_ratio({.stage = 2, .offload = {.optimizer = true}, .disk = ZeroDiskTier{}}, 0.5))
          .find("not with the disk tier"),
      std::string::npos);

  // The preflight counts a partial offload's host part only: a host that holds it but not the whole shard.
  {
    const ParameterTable table(tiny_config());
    const ZeroPartition part(table, 1);
    ZeroOffload partial{.optimizer = true};
    partial.ratio = 0.25;
    const size_t needed = zero_state_bytes(part, 2, DType::f32, partial).host_total();
    ASSERT_LT(needed, zero_state_bytes(part, 2, DType::f32, {.optimizer = true}).host_total());
    const HostMemoryLimits limits{.available = needed + needed / 2};
    EXPECT_EQ(engine_error(with_ratio(
                  {.stage = 2, .offload = {.optimizer = true}, .host_memory_limits = limits}, 0.25)),
              "");
    EXPECT_NE(engine_error({.stage = 2, .offload = {.optimizer = true}, .host_memory_limits = limits})
                  .find("needs"),
              std::string::npos);
  }

  // A host that cannot hold the plan (the preflight runs before the constructor's first arena): the error
  // names the plan and the bytes.
  const std::string small = engine_error({.stage = 3,
                                          .offload = {.optimizer = true, .param = true},
                                          .ranks_sharing_host = 4,
                                          .host_memory_limits = HostMemoryLimits{.available = 1000}});
  EXPECT_NE(small.find("ZeRO-3 CPU offload (optimizer and parameters, 4 rank(s) in this process) needs"),
            std::string::npos)
      << small;
  EXPECT_NE(small.find("only 1000 B is available"), std::string::npos) << small;
}

}  // namespace
}  // namespace zt::optim
