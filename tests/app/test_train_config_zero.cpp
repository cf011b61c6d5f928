// TrainConfig: the zero_optimization keys, honoured, refused or described with what they mean here.
#include "app/config/train_config.h"

#include <gtest/gtest.h>

#include <string>

#include "app/config/engine_options.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::inputs;
using config_test::kXlargeHidden;
using config_test::line_of;
using config_test::resolved;

// ---------------------------------------------------------------------------------------------------------
// zero_optimization: Note [ZeRO keys] in app/config/train_config_zero.cpp

std::string zero_json(const std::string& keys) {
  return R"({"zero_optimization": {)" + keys + "}}";
}

// offload_optimizer.ratio (or --offload_ratio): a partial optimizer offload at stages 1-3 with device cpu,
// handed to the engine (ZeroOffload::ratio); outside (0, 1], or with what it is not built for, an error that
// says why.
TEST(TrainConfigZero, OffloadRatioIsAPartialOffload) {
  for (const int stage : {1, 2, 3}) {
    const TrainConfig c = resolved(
        {},
        zero_json(str(R"("stage": )", stage, R"(, "offload_optimizer": {"device": "cpu", "ratio": 0.3})")));
    EXPECT_EQ(c.zero.offload_optimizer.ratio, 0.3);
    EXPECT_EQ(zero_offload(c).ratio, 0.3);
    EXPECT_FALSE(zero_offload(c).stream_gradients) << "the device part reads the gradient shard";
    EXPECT_FALSE(c.offload_overlap_update_applies());
    EXPECT_NE(line_of(c.describe(), "zero_optimization.offload_optimizer.ratio").find("partial"),
              std::string::npos);
  }
  const std::string cpu2 = zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})");
  EXPECT_EQ(zero_offload(resolved({"--offload_ratio", "0.25"}, cpu2)).ratio, 0.25);
  EXPECT_EQ(zero_offload(resolved({}, cpu2)).ratio, 1.0);
  EXPECT_TRUE(zero_offload(resolved({}, cpu2)).stream_gradients);
  // The flag agrees with the JSON or is refused.
  const std::string json_half =
      zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5})");
  EXPECT_EQ(resolved({"--offload_ratio", "0.5"}, json_half).zero.offload_optimizer.ratio, 0.5);
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "0.25"}, json_half), "--offload_ratio 0.25 contradicts");
  for (const char* bad : {"0", "1.5"}) {
    EXPECT_ERROR_HAS(resolved({"--offload_ratio", bad}, cpu2), "--offload_ratio must be in (0, 1]");
  }
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "-0.1"}, cpu2), "--offload_ratio must be at least 0");
  for (const char* bad : {"0", "1.5"}) {
    EXPECT_ERROR_HAS(
        resolved({},
                 zero_json(str(R"("stage": 2, "offload_optimizer": {"device": "cpu", "ratio": )", bad, "}"))),
        "zero_optimization.offload_optimizer.ratio", "must be in (0, 1]");
  }
  // Where it does not run.
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "0.5"}, zero_json(R"("stage": 0)")),
                   "needs zero_optimization.offload_optimizer.device cpu at ZeRO stage 1, 2 or 3",
                   "device none at stage 0");
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "0.5"}, zero_json(R"("stage": 2)")),
                   "device none at stage 2");
  EXPECT_ERROR_HAS(
      resolved(
          {"--offload_ratio", "0.5"},
          zero_json(
              R"("stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"})")),
      "not with offload_param");
  EXPECT_ERROR_HAS(
      resolved({"--offload_ratio", "0.5"},
               zero_json(R"("stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp"})")),
      "device nvme (the disk tier) is not built for it");
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "0.5", "--offload_delayed_update"}, cpu2),
                   "not with --offload_delayed_update");
  EXPECT_ERROR_HAS(resolved({"--offload_ratio", "0.5", "--offload_overlap_update"}, cpu2),
                   "not with --offload_overlap_update");
}

TEST(TrainConfigZero, StageMustBeZeroToThree) {
  for (const int stage : {0, 1, 2, 3}) {
    EXPECT_EQ(resolved({}, zero_json(str(R"("stage": )", stage))).zero.stage, stage);
  }
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 4)")), "test.json",
                   "zero_optimization.stage must be 0, 1, 2 or 3, got 4");
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": -1)")), "got -1");
}

// "auto" for the stage or an offload device asks for the planner (--auto_plan, app/plan), which sets them;
// until it runs the stage is 0 and nothing is offloaded.
TEST(TrainConfigZero, StageAndOffloadDeviceAutoAskForThePlanner) {
  TrainConfig c = resolved({}, zero_json(R"("stage": "auto")"));
  EXPECT_TRUE(c.auto_plan);
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_EQ(c.origin_of("zero_optimization.stage"), Origin::json_auto);
  c = resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "auto"})"));
  EXPECT_TRUE(c.auto_plan);
  EXPECT_FALSE(c.zero.offload_optimizer.enabled);
  EXPECT_EQ(c.origin_of("zero_optimization.offload_optimizer.device"), Origin::json_auto);
  EXPECT_FALSE(resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})")).auto_plan);
  // A host-memory cap is no error when the planner may offload.
  EXPECT_TRUE(resolved({"--host_memory_limit", "1GiB"}, zero_json(R"("stage": "auto")")).auto_plan);
  EXPECT_ERROR_HAS(resolved({"--host_memory_limit", "1GiB"}, zero_json(R"("stage": 2)")),
                   "nothing is offloaded");
}

TEST(TrainConfigZero, OffloadKeysAreHonouredOrRefusedWithTheReason) {
  for (const int stage : {1, 2, 3}) {
    const TrainConfig c =
        resolved({}, zero_json(str(R"("stage": )", stage, R"(, "offload_optimizer": {"device": "cpu"})")));
    EXPECT_TRUE(c.zero.offload_optimizer.enabled) << stage;
    EXPECT_FALSE(c.zero.offload_optimizer.pin_memory) << stage;  // DeepSpeed's default
  }
  // DeepSpeed's defaults of the NVMe keys say nothing and are accepted; other values are refused.
  EXPECT_NO_THROW(
      resolved({}, zero_json(R"("stage": 3, "offload_optimizer": {"device": "cpu", "buffer_count": 4,
      "fast_init": false, "ratio": 1.0}, "offload_param": {"device": "cpu", "buffer_count": 5})")));
  EXPECT_ERROR_HAS(
      resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu", "fast_init": true})")),
      "zero_optimization.offload_optimizer.fast_init true", "not implemented");
  // The disk tier's keys with device cpu change nothing, and describe() says so
  // (app/config/train_config_aio.cpp).
  EXPECT_NE(line_of(resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu", "nvme_path":
                                "/x", "buffer_count": 8})"))
                        .describe(),
                    "zero_optimization.offload_optimizer.buffer_count")
                .find("effective: none; the device is not nvme"),
            std::string::npos);
  EXPECT_ERROR_HAS(
      resolved({}, zero_json(R"("stage": 3, "offload_param": {"device": "cpu"})")),
      "zero_optimization.offload_param.device cpu needs zero_optimization.offload_optimizer.device cpu");
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "nvme"})")),
                   "zero_optimization.offload_optimizer.nvme_path is required with device nvme");
  // The delayed parameter update is a flag, and only means something with the optimizer offloaded.
  EXPECT_ERROR_HAS(resolved({"--offload_delayed_update"}, zero_json(R"("stage": 2)")),
                   "--offload_delayed_update", "offload_optimizer.device cpu");
  const TrainConfig delayed = resolved({"--offload_delayed_update"},
                                       zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})"));
  EXPECT_TRUE(delayed.offload_delayed_update);
  EXPECT_NE(line_of(delayed.describe(), "offload_delayed_update").find("one step stale"), std::string::npos)
      << delayed.describe();
  // The overlapped (exact) update: a flag, with the optimizer offloaded, world size 1, not with the delayed
  // update or the state on disk.
  EXPECT_ERROR_HAS(resolved({"--offload_overlap_update"}, zero_json(R"("stage": 2)")),
                   "--offload_overlap_update needs zero_optimization.offload_optimizer.device cpu",
                   "offload_optimizer none");
  EXPECT_ERROR_HAS(resolved({"--offload_overlap_update", "--offload_delayed_update"},
                            zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})")),
                   "--offload_overlap_update", ", --offload_delayed_update");
  EXPECT_ERROR_HAS(resolved({"--offload_overlap_update", "--world_size", "2"},
                            zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})")),
                   "--offload_overlap_update", "world size 2");
  const TrainConfig overlapped = resolved({"--offload_overlap_update"},
                                          zero_json(R"("stage": 3, "offload_optimizer": {"device": "cpu"})"));
  EXPECT_TRUE(overlapped.offload_overlap_update);
  EXPECT_TRUE(zero_offload(overlapped).overlap_update);
  EXPECT_NE(line_of(overlapped.describe(), "offload_overlap_update").find("exact"), std::string::npos)
      << overlapped.describe();
  // Unasked, the overlap is on where it applies on a GPU (the engine decides: it knows the device);
  // --no_offload_overlap_update turns that off, and contradicting flags are refused.
  const std::string cpu_offload = zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})");
  const TrainConfig by_default = resolved({"--device", "auto"}, cpu_offload);
  EXPECT_FALSE(zero_offload(by_default).overlap_update);
  EXPECT_TRUE(zero_offload(by_default).overlap_update_where_it_applies);
  EXPECT_NE(line_of(by_default.describe(), "offload_overlap_update").find("auto"), std::string::npos)
      << by_default.describe();
  const TrainConfig turned_off = resolved({"--no_offload_overlap_update"}, cpu_offload);
  EXPECT_FALSE(zero_offload(turned_off).overlap_update_where_it_applies);
  EXPECT_NE(line_of(turned_off.describe(), "offload_overlap_update").find("off"), std::string::npos)
      << turned_off.describe();
  EXPECT_EQ(
      line_of(resolved({"--device", "cpu"}, cpu_offload).describe(), "offload_overlap_update").find("auto"),
      std::string::npos);
  EXPECT_EQ(line_of(resolved({"--offload_delayed_update"}, cpu_offload).describe(), "offload_overlap_update")
                .find("auto"),
            std::string::npos);
  EXPECT_ERROR_HAS(resolved({"--offload_overlap_update", "--no_offload_overlap_update"}, cpu_offload),
                   "contradict");
  EXPECT_FALSE(zero_offload(resolved({}, zero_json(R"("stage": 2)"))).overlap_update_where_it_applies);
  // --overlap_optimizer: the AdamW on the device, where no collective follows it.
  EXPECT_ERROR_HAS(
      resolved({"--overlap_optimizer"}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "cpu"})")),
      "--overlap_optimizer", "offload_optimizer");
  EXPECT_ERROR_HAS(resolved({"--overlap_optimizer"}, zero_json(R"("stage": 1)")), "--overlap_optimizer",
                   "stage 1");
  EXPECT_ERROR_HAS(resolved({"--overlap_optimizer", "--world_size", "2"}, zero_json(R"("stage": 2)")),
                   "--overlap_optimizer", "world size 2");
  EXPECT_TRUE(
      resolved({"--overlap_optimizer", "--world_size", "2"}, zero_json(R"("stage": 0)")).overlap_optimizer);
  EXPECT_ERROR_HAS(resolved({"--overlap_optimizer", "--device", "cpu"}, zero_json(R"("stage": 0)")),
                   "--overlap_optimizer", "device cpu (the CPU backend has no streams)");
  const TrainConfig on_device = resolved({"--overlap_optimizer"}, zero_json(R"("stage": 3)"));
  EXPECT_NE(line_of(on_device.describe(), "overlap_optimizer").find("own stream"), std::string::npos)
      << on_device.describe();
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "gpu"})")),
                   "must be none, cpu or nvme", "'gpu'");
  const TrainConfig none =
      resolved({}, zero_json(R"("stage": 2, "offload_optimizer": {"device": "none", "pin_memory": true})"));
  EXPECT_FALSE(none.zero.offload_optimizer.enabled);
  EXPECT_NE(line_of(none.describe(), "zero_optimization.offload_optimizer.pin_memory")
                .find("effective: none; nothing is offloaded"),
            std::string::npos)
      << none.describe();
}

TEST(TrainConfigZero, OverlapCommDefaultsByStageAndIsHonoured) {
  const TrainConfig stage3 = resolved({}, zero_json(R"("stage": 3)"));
  EXPECT_TRUE(stage3.zero.overlap_comm);
  EXPECT_EQ(stage3.origin_of("zero_optimization.overlap_comm"), Origin::default_value);
  EXPECT_FALSE(resolved({}, zero_json(R"("stage": 1)")).zero.overlap_comm);
  const TrainConfig off = resolved({}, zero_json(R"("stage": 3, "overlap_comm": false)"));
  EXPECT_FALSE(off.zero.overlap_comm);
  EXPECT_EQ(off.origin_of("zero_optimization.overlap_comm"), Origin::json);
  EXPECT_TRUE(resolved({}, zero_json(R"("stage": 2, "overlap_comm": true)")).zero.overlap_comm);
}

TEST(TrainConfigZero, OverlapCommSaysWhereItActs) {
  const std::string key = "zero_optimization.overlap_comm";
  const std::string world2 = resolved({}, zero_json(R"("stage": 2, "overlap_comm": true)"), 2).describe();
  EXPECT_NE(
      line_of(world2, key).find("effective: reductions on a communication stream, overlapping backward"),
      std::string::npos)
      << world2;
  const std::string world1 = resolved({}, zero_json(R"("stage": 2, "overlap_comm": true)")).describe();
  EXPECT_NE(line_of(world1, key).find("effective: none at world size 1"), std::string::npos) << world1;
  TrainConfig cpu = resolved({}, zero_json(R"("stage": 2, "overlap_comm": true)"), 2);
  cpu.device = DeviceChoice::cpu;
  EXPECT_NE(line_of(cpu.describe(), key).find("effective: none on the CPU backend"), std::string::npos)
      << cpu.describe();
  const std::string off = resolved({}, zero_json(R"("stage": 2, "overlap_comm": false)"), 2).describe();
  EXPECT_EQ(line_of(off, key).find("effective"), std::string::npos) << off;
}

TEST(TrainConfigZero, ReduceScatterIsHonoured) {
  EXPECT_TRUE(resolved({}, zero_json(R"("stage": 2)")).zero.reduce_scatter);
  EXPECT_FALSE(resolved({}, zero_json(R"("stage": 2, "reduce_scatter": false)")).zero.reduce_scatter);
}

TEST(TrainConfigZero, ValuesWeDoNotImplementAreRefusedWithTheReason) {
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "contiguous_gradients": false)")), "test.json",
                   "zero_optimization.contiguous_gradients false", "flat per-layer buckets");
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "allgather_partitions": false)")),
                   "zero_optimization.allgather_partitions false", "always all-gathers");
  // The values we do implement are fine when written out.
  EXPECT_NO_THROW(resolved({}, zero_json(R"("stage": 2, "contiguous_gradients": true,
                                             "allgather_partitions": true, "round_robin_gradients": false)")));
  // DeepSpeed keys without an implementation are named as such, not as typos.
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 3, "stage3_allgather_sequential": true)")),
                   "'zero_optimization.stage3_allgather_sequential'", "does not implement");
}

TEST(TrainConfigZero, BucketSizesAreStoredWithTheirEffectiveMeaning) {
  const TrainConfig config =
      resolved({}, zero_json(R"("stage": 2, "reduce_bucket_size": "auto", "allgather_bucket_size": 2e8)"));
  EXPECT_EQ(config.zero.reduce_bucket_size, kXlargeHidden * kXlargeHidden);
  EXPECT_EQ(config.zero.allgather_bucket_size, 200'000'000);
  const std::string text = config.describe();
  for (const char* key :
       {"zero_optimization.reduce_bucket_size", "zero_optimization.allgather_bucket_size"}) {
    EXPECT_NE(
        line_of(text, key).find("effective: one layer per bucket (zerotrain reduces/gathers whole layers)"),
        std::string::npos)
        << text;
  }
  // "auto" is filled only where HF's integration fills it.
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "allgather_bucket_size": "auto")")),
                   "zero_optimization.allgather_bucket_size", "auto");
  // 0, as transformers' ZeRO-3 test config writes it: the bucket is one layer whatever the size.
  EXPECT_EQ(resolved({}, zero_json(R"("stage": 2, "reduce_bucket_size": 0)")).zero.reduce_bucket_size, 0);
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 2, "reduce_bucket_size": -1)")),
                   "zero_optimization.reduce_bucket_size' must be at least 0");
}

TEST(TrainConfigZero, Stage3KeysAreDescribedWithWhatTheyMeanHere) {
  const TrainConfig config = resolved({}, zero_json(R"("stage": 3, "stage3_prefetch_bucket_size": "auto",
      "stage3_param_persistence_threshold": "auto", "stage3_max_reuse_distance": 1e9,
      "stage3_max_live_parameters": 3e8, "sub_group_size": 1e9,
      "stage3_gather_16bit_weights_on_model_save": true)"));
  EXPECT_EQ(config.zero.stage3_prefetch_bucket_size, 2'123'366);      // int(0.9 * 1536^2)
  EXPECT_EQ(config.zero.stage3_param_persistence_threshold, 15'360);  // 10 * 1536
  EXPECT_EQ(config.zero.stage3_max_reuse_distance, 1'000'000'000);
  EXPECT_EQ(config.zero.stage3_max_live_parameters, 300'000'000);
  EXPECT_EQ(config.zero.sub_group_size, 1'000'000'000);
  EXPECT_TRUE(config.zero.stage3_gather_16bit_weights_on_model_save);
  const std::string text = config.describe();
  const std::string z = "zero_optimization.";
  EXPECT_NE(line_of(text, z + "stage3_prefetch_bucket_size").find("effective: one layer per bucket"),
            std::string::npos)
      << text;
  for (const char* key : {"stage3_param_persistence_threshold", "stage3_max_reuse_distance"}) {
    EXPECT_NE(
        line_of(text, z + key).find("each layer, small tensors included, is gathered by one collective"),
        std::string::npos)
        << text;
  }
  EXPECT_NE(line_of(text, z + "sub_group_size").find("the optimizer updates a shard in one fused pass"),
            std::string::npos)
      << text;
  EXPECT_NE(line_of(text, z + "stage3_max_live_parameters").find("two layers + the embeddings"),
            std::string::npos)
      << text;
  EXPECT_NE(line_of(text, z + "stage3_gather_16bit_weights_on_model_save").find("consolidated fp32 model.h5"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("note:"), std::string::npos) << text;
}

TEST(TrainConfigZero, Stage3KeysBelowStage3GetANotice) {
  const TrainConfig config = resolved(
      {}, zero_json(R"("stage": 2, "stage3_prefetch_bucket_size": 5e7, "stage3_max_reuse_distance": 1e9)"));
  const std::string text = config.describe();
  EXPECT_NE(text.find("note: at stage 2 these stage-3 settings change nothing (DeepSpeed ignores them too): "
                      "stage3_prefetch_bucket_size, stage3_max_reuse_distance\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("stage3_param_persistence_threshold"), std::string::npos) << text;  // not given
  // Without such keys there is neither a notice nor a stage-3 line.
  const std::string plain = resolved({}, zero_json(R"("stage": 2)")).describe();
  EXPECT_EQ(plain.find("note:"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("stage3_"), std::string::npos) << plain;
}

TEST(TrainConfigZero, OldNameOfGather16BitIsAccepted) {
  const TrainConfig config =
      resolved({}, zero_json(R"("stage": 3, "stage3_gather_fp16_weights_on_model_save": true)"));
  EXPECT_TRUE(config.zero.stage3_gather_16bit_weights_on_model_save);
  EXPECT_ERROR_HAS(resolved({}, zero_json(R"("stage": 3, "stage3_gather_fp16_weights_on_model_save": true,
                                             "stage3_gather_16bit_weights_on_model_save": true)")),
                   "old name");
}

}  // namespace
}  // namespace zt::optim
