// TrainConfig: DeepSpeed JSON with "auto" (the configs of HF's blog among them), and the errors a user meets.
#include "app/config/train_config.h"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/check.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::inputs;
using config_test::kXlargeHidden;
using config_test::line_of;
using config_test::resolved;
using config_test::write_temp;
using test::error_of;

// The DeepSpeed configs of HF's blog "Accelerate Large Model Training using DeepSpeed" (DeBERTa-v2-xlarge on
// MRPC): ZeRO-2 with the optimizer offloaded to CPU, and ZeRO-3 with optimizer and parameters offloaded.
constexpr const char* kBlogZero2Offload = R"({
  "fp16": {
    "enabled": true,
    "loss_scale": 0,
    "loss_scale_window": 1000,
    "initial_scale_power": 16,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "optimizer": {
    "type": "AdamW",
    "params": {
      "lr": "auto",
      "weight_decay": "auto",
      "torch_adam": true,
      "adam_w_mode": true
    }
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {
      "warmup_min_lr": "auto",
      "warmup_max_lr": "auto",
      "warmup_num_steps": "auto",
      "total_num_steps": "auto"
    }
  },
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": {
      "device": "cpu",
      "pin_memory": true
    },
    "allgather_partitions": true,
    "allgather_bucket_size": 2e8,
    "overlap_comm": true,
    "reduce_scatter": true,
    "reduce_bucket_size": "auto",
    "contiguous_gradients": true
  },
  "gradient_accumulation_steps": 1,
  "gradient_clipping": "auto",
  "steps_per_print": 2000,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "wall_clock_breakdown": false
})";

constexpr const char* kBlogZero3Offload = R"({
  "fp16": {
    "enabled": true,
    "loss_scale": 0,
    "loss_scale_window": 1000,
    "initial_scale_power": 16,
    "hysteresis": 2,
    "min_loss_scale": 1
  },
  "optimizer": {
    "type": "AdamW",
    "params": {
      "lr": "auto",
      "weight_decay": "auto"
    }
  },
  "scheduler": {
    "type": "WarmupDecayLR",
    "params": {
      "warmup_min_lr": "auto",
      "warmup_max_lr": "auto",
      "warmup_num_steps": "auto",
      "total_num_steps": "auto"
    }
  },
  "zero_optimization": {
    "stage": 3,
    "offload_optimizer": {
      "device": "cpu",
      "pin_memory": true
    },
    "offload_param": {
      "device": "cpu",
      "pin_memory": true
    },
    "overlap_comm": true,
    "contiguous_gradients": true,
    "reduce_bucket_size": "auto",
    "stage3_prefetch_bucket_size": "auto",
    "stage3_param_persistence_threshold": "auto",
    "sub_group_size": 1e9,
    "stage3_max_live_parameters": 1e9,
    "stage3_max_reuse_distance": 1e9,
    "stage3_gather_16bit_weights_on_model_save": "auto"
  },
  "gradient_accumulation_steps": 1,
  "gradient_clipping": "auto",
  "steps_per_print": 2000,
  "train_batch_size": "auto",
  "train_micro_batch_size_per_gpu": "auto",
  "wall_clock_breakdown": false
})";

// The blog's command line, minus its wandb tracking flags.
const std::vector<std::string> kBlogFlags = {"--model_name_or_path",
                                             "deberta-v2-xlarge-mnli",
                                             "--task_name",
                                             "mrpc",
                                             "--ignore_mismatched_sizes",
                                             "--max_length",
                                             "128",
                                             "--per_device_train_batch_size",
                                             "40",
                                             "--learning_rate",
                                             "2e-5",
                                             "--num_train_epochs",
                                             "3",
                                             "--output_dir",
                                             "/tmp/mrpc/deepspeed_stage2/"};

// A blog config with its CPU offload sections set to "none".
std::string without_offload(std::string json) {
  for (size_t at = json.find(R"("device": "cpu")"); at != std::string::npos;
       at = json.find(R"("device": "cpu")", at)) {
    json.replace(at, 15, R"("device": "none")");
  }
  return json;
}

TEST(TrainConfigJson, BlogZero2AutoResolvesFromFlags) {
  for (const int world_size : {1, 2}) {
    SCOPED_TRACE(world_size);
    const TrainConfig config = resolved(kBlogFlags, without_offload(kBlogZero2Offload), world_size);
    EXPECT_EQ(config.per_device_train_batch_size, 40);
    EXPECT_EQ(config.gradient_accumulation_steps, 1);
    EXPECT_EQ(config.train_batch_size, 40 * world_size);
    EXPECT_EQ(config.origin_of("train_batch_size"), Origin::json_auto);
    EXPECT_DOUBLE_EQ(config.learning_rate, 2e-5);
    EXPECT_DOUBLE_EQ(config.weight_decay, 0.0);
    EXPECT_DOUBLE_EQ(config.max_grad_norm, 1.0);  // gradient_clipping "auto"
    EXPECT_EQ(config.optimizer_type, "AdamW");
    EXPECT_TRUE(config.torch_adam);
    EXPECT_EQ(config.dtype, ComputeDType::f16);  // fp16.enabled true beats the default bf16
    EXPECT_EQ(config.origin_of("dtype"), Origin::json);
    EXPECT_EQ(config.fp16.initial_scale_power, 16);
    EXPECT_EQ(config.fp16.scale_window, 1000);
    EXPECT_EQ(config.fp16.hysteresis, 2);
    EXPECT_DOUBLE_EQ(config.fp16.static_scale, 0.0);
    // 3668 rows: ceil(3668 / 40) = 92 micro-batches, floor(92 / W) steps per epoch, 3 epochs.
    const int64_t steps_per_epoch = world_size == 1 ? 92 : 46;
    EXPECT_EQ(config.num_training_steps, 3 * steps_per_epoch);
    ASSERT_TRUE(config.deepspeed_schedule.has_value());
    const DeepSpeedSchedule& schedule = *config.deepspeed_schedule;
    EXPECT_EQ(schedule.type, DeepSpeedSchedule::Type::warmup_decay_lr);
    EXPECT_DOUBLE_EQ(schedule.warmup_min_lr, 0.0);
    EXPECT_DOUBLE_EQ(schedule.warmup_max_lr, 2e-5);
    EXPECT_EQ(config.origin_of("scheduler.warmup_max_lr"), Origin::json_auto);
    EXPECT_EQ(schedule.warmup_num_steps, 0);
    EXPECT_EQ(schedule.total_num_steps, 3 * steps_per_epoch);
    EXPECT_TRUE(schedule.warmup_log);  // DeepSpeed's default warmup_type
    EXPECT_EQ(config.zero.stage, 2);
    EXPECT_FALSE(config.zero.offload_optimizer.enabled);
    EXPECT_TRUE(config.zero.offload_optimizer.pin_memory);
    EXPECT_FALSE(config.zero.offload_param.enabled);
    EXPECT_TRUE(config.zero.overlap_comm);
    EXPECT_EQ(config.zero.allgather_bucket_size, 200'000'000);  // written 2e8
    EXPECT_EQ(config.zero.reduce_bucket_size, kXlargeHidden * kXlargeHidden);
    EXPECT_EQ(config.origin_of("zero_optimization.reduce_bucket_size"), Origin::json_auto);
    EXPECT_EQ(config.log_every, 10);  // steps_per_print is DeepSpeed's console interval, not --log_every
    EXPECT_EQ(config.origin_of("log_every"), Origin::default_value);
  }
}

TEST(TrainConfigJson, BlogZero3AutoResolvesHiddenSizeKeys) {
  for (const int world_size : {1, 2}) {
    SCOPED_TRACE(world_size);
    const TrainConfig config = resolved(kBlogFlags, without_offload(kBlogZero3Offload), world_size);
    EXPECT_EQ(config.train_batch_size, 40 * world_size);
    EXPECT_EQ(config.zero.stage, 3);
    EXPECT_FALSE(config.zero.offload_optimizer.enabled);
    EXPECT_FALSE(config.zero.offload_param.enabled);
    EXPECT_EQ(config.zero.reduce_bucket_size, 2'359'296);               // 1536^2
    EXPECT_EQ(config.zero.stage3_prefetch_bucket_size, 2'123'366);      // int(0.9 * 1536^2)
    EXPECT_EQ(config.zero.stage3_param_persistence_threshold, 15'360);  // 10 * 1536
    EXPECT_EQ(config.zero.sub_group_size, 1'000'000'000);
    EXPECT_FALSE(config.zero.stage3_gather_16bit_weights_on_model_save);  // "auto", as Accelerate fills it
    EXPECT_FALSE(config.torch_adam);
  }
}

// The blog's configs as published: CPU offload with pinned memory, honoured.
TEST(TrainConfigJson, BlogConfigsAsPublishedOffloadToTheCpu) {
  const TrainConfig zero2 = resolved(kBlogFlags, kBlogZero2Offload);
  EXPECT_TRUE(zero2.zero.offload_optimizer.enabled);
  EXPECT_TRUE(zero2.zero.offload_optimizer.pin_memory);
  EXPECT_FALSE(zero2.zero.offload_param.enabled);
  const TrainConfig zero3 = resolved(kBlogFlags, kBlogZero3Offload);
  EXPECT_TRUE(zero3.zero.offload_optimizer.enabled);
  EXPECT_TRUE(zero3.zero.offload_param.enabled);
  EXPECT_TRUE(zero3.zero.offload_param.pin_memory);
  EXPECT_NE(line_of(zero3.describe(), "zero_optimization.offload_param.device").find("cpu"),
            std::string::npos)
      << zero3.describe();
}

TEST(TrainConfigJson, BlogConfigReadFromFile) {
  std::vector<std::string> flags = kBlogFlags;
  flags.push_back("--deepspeed_config");
  flags.push_back(write_temp("zero_stage2_blog.json", without_offload(kBlogZero2Offload)));
  TrainConfig config = TrainConfig::from_args(flags);
  config.resolve(inputs());
  EXPECT_EQ(config.zero.stage, 2);
  const std::string text = config.describe();
  for (const char* group :
       {"\ndata\n", "\nmodel\n", "\noptimizer\n", "\nschedule\n", "\nprecision\n", "\nZeRO\n"}) {
    EXPECT_NE(text.find(group), std::string::npos) << group << " missing from\n" << text;
  }
}

TEST(TrainConfigJson, AbsentKeysKeepDeepSpeedDefaults) {
  const TrainConfig config = resolved({}, R"({"zero_optimization": {"stage": 3}})");
  EXPECT_TRUE(config.zero.overlap_comm);  // DeepSpeed turns it on for stage 3 only
  EXPECT_EQ(config.zero.reduce_bucket_size, 500'000'000);
  EXPECT_EQ(config.zero.stage3_prefetch_bucket_size, 50'000'000);
  EXPECT_EQ(config.zero.stage3_param_persistence_threshold, 100'000);
  EXPECT_FALSE(config.zero.offload_optimizer.pin_memory);
  EXPECT_EQ(config.dtype, ComputeDType::bf16);
  EXPECT_DOUBLE_EQ(config.max_grad_norm, 1.0);  // absent gradient_clipping takes the flag, not DeepSpeed's 0
  EXPECT_FALSE(resolved({}, R"({"zero_optimization": {"stage": 2}})").zero.overlap_comm);
}

TEST(TrainConfigJson, SyntaxErrorNamesFileAndPosition) {
  const std::string path =
      write_temp("broken.json", "{\n  \"train_batch_size\": 8,\n  \"fp16\": {enabled: true}\n}\n");
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--deepspeed_config", path});
  EXPECT_ERROR_HAS(config.resolve(inputs()), path.c_str(), "line 3", "column");
  TrainConfig missing =
      TrainConfig::from_args(std::vector<std::string>{"--deepspeed_config", "/no/such.json"});
  EXPECT_ERROR_HAS(missing.resolve(inputs()), "/no/such.json");
}

TEST(TrainConfigJson, UnknownKeysNameTheirFullPath) {
  EXPECT_ERROR_HAS(
      resolved({}, R"({"zero_optimization": {"stage": 2, "offload_optimzer": {"device": "cpu"}}})"),
      "'zero_optimization.offload_optimzer'", "did you mean 'offload_optimizer'");
  EXPECT_ERROR_HAS(
      resolved(
          {},
          R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none", "pin_memroy": 1}}})"),
      "'zero_optimization.offload_optimizer.pin_memroy'");
  EXPECT_ERROR_HAS(
      resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "beta": [0.9, 0.99]}}})"),
      "'optimizer.params.beta'");
  EXPECT_ERROR_HAS(resolved({}, R"({"train_batch": 8})"), "'train_batch'");
  // A real DeepSpeed key that zerotrain lacks is told apart from a typo.
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 2, "zenflow": {}}})"),
                   "'zero_optimization.zenflow'", "does not implement");
  // DeepSpeed's activation_checkpointing section points at the flag that does what users want from it.
  EXPECT_ERROR_HAS(resolved({}, R"({"activation_checkpointing": {"partition_activations": true}})"),
                   "'activation_checkpointing'", "--gradient_checkpointing");
  // Scheduler params are checked per type: WarmupLR has no total_num_steps.
  EXPECT_ERROR_HAS(resolved({}, R"({"scheduler": {"type": "WarmupLR", "params": {"total_num_steps": 10}}})"),
                   "'scheduler.params.total_num_steps'");
}

TEST(TrainConfigJson, WrongTypesAndMisplacedAutoNameTheKey) {
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": "two"}})"), "zero_optimization.stage",
                   "integer");
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"overlap_comm": "auto"}})"),
                   "zero_optimization.overlap_comm", "auto");
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"allgather_bucket_size": 2.5}})"),
                   "zero_optimization.allgather_bucket_size");
  EXPECT_ERROR_HAS(resolved({}, R"([1, 2])"), "must be a JSON object");
}

TEST(TrainConfigJson, ContradictoryBatchSizes) {
  EXPECT_ERROR_HAS(resolved({}, R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8,
                                    "gradient_accumulation_steps": 1})"),
                   "train_batch_size 32", "train_micro_batch_size_per_gpu 8", "world_size 1", "= 8");
  EXPECT_ERROR_HAS(resolved({"--per_device_train_batch_size", "8"}, R"({"train_batch_size": 32})", 3),
                   "train_batch_size 32", "not divisible", "world_size 3");
  EXPECT_ERROR_HAS(resolved({"--per_device_train_batch_size", "8", "--gradient_accumulation_steps", "2"},
                            R"({"train_batch_size": 32})", 1),
                   "!=", "= 16");
}

TEST(TrainConfigJson, BatchSizesDerivedAsDeepSpeedDoes) {
  // Only train_batch_size: accumulation stays 1, the micro batch follows.
  TrainConfig micro = resolved({}, R"({"train_batch_size": 32})", 2);
  EXPECT_EQ(micro.per_device_train_batch_size, 16);
  EXPECT_EQ(micro.origin_of("per_device_train_batch_size"), Origin::derived);
  // train_batch_size and micro: accumulation follows.
  TrainConfig accumulation =
      resolved({}, R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8})", 2);
  EXPECT_EQ(accumulation.gradient_accumulation_steps, 4);
  EXPECT_EQ(accumulation.per_device_train_batch_size, 8);
}

TEST(TrainConfigJson, Fp16AndBf16BothEnabled) {
  EXPECT_ERROR_HAS(resolved({}, R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"), "fp16.enabled",
                   "bf16.enabled", "both");
}

TEST(TrainConfigJson, DtypeFlagAgainstJson) {
  EXPECT_ERROR_HAS(resolved({"--dtype", "bf16"}, R"({"fp16": {"enabled": true}})"), "--dtype bf16",
                   "fp16.enabled true");
  EXPECT_ERROR_HAS(resolved({"--dtype", "f16"}, R"({"fp16": {"enabled": false}})"), "--dtype f16",
                   "fp16.enabled false");
  EXPECT_EQ(
      resolved({"--dtype", "f16"}, R"({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})").dtype,
      ComputeDType::f16);
  EXPECT_EQ(resolved({}, R"({"bf16": {"enabled": false}})").dtype, ComputeDType::f32);
  EXPECT_EQ(resolved({}, R"({"bfloat16": {"enabled": true}})").dtype, ComputeDType::bf16);
}

TEST(TrainConfigJson, FlagAgainstJsonValue) {
  const std::string json = R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}})";
  EXPECT_ERROR_HAS(resolved({"--learning_rate", "3e-5"}, json), "--learning_rate 3e-05",
                   "optimizer.params.lr", "1e-05");
  // A flag left at its default yields to the JSON; an explicit flag that agrees is fine.
  const TrainConfig from_json = resolved({}, json);
  EXPECT_DOUBLE_EQ(from_json.learning_rate, 1e-5);
  EXPECT_EQ(from_json.origin_of("learning_rate"), Origin::json);
  EXPECT_DOUBLE_EQ(resolved({"--learning_rate", "1e-5"}, json).learning_rate, 1e-5);

  EXPECT_ERROR_HAS(
      resolved({"--per_device_train_batch_size", "16"}, R"({"train_micro_batch_size_per_gpu": 8})"),
      "--per_device_train_batch_size 16", "train_micro_batch_size_per_gpu");
  EXPECT_ERROR_HAS(resolved({"--max_grad_norm", "0.5"}, R"({"gradient_clipping": 1.0})"), "--max_grad_norm",
                   "gradient_clipping");
  EXPECT_ERROR_HAS(resolved({"--num_warmup_steps", "10"},
                            R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}}})"),
                   "--num_warmup_steps 10", "scheduler.params.warmup_num_steps");
  // Two JSON keys that set the same rate must agree too.
  EXPECT_ERROR_HAS(resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
                                    "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 2e-5}}})"),
                   "scheduler.params.warmup_max_lr", "optimizer.params.lr");
  EXPECT_ERROR_HAS(resolved({"--lr_scheduler_type", "cosine"}, R"({"scheduler": {"type": "WarmupLR"}})"),
                   "--lr_scheduler_type cosine", "scheduler.type WarmupLR");
}

TEST(TrainConfigJson, StageAndOffloadRules) {
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 4}})"), "zero_optimization.stage",
                   "got 4");
  // Below stage 3 DeepSpeed ignores offload_param, and so does zerotrain (its verdict says so).
  EXPECT_FALSE(resolved({}, R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})")
                   .zero.offload_param.enabled);
  EXPECT_ERROR_HAS(
      resolved({}, R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}})"),
      "offload_optimizer", "stage is 0");
  EXPECT_ERROR_HAS(
      resolved({}, R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})"),
      "zero_optimization.offload_param.nvme_path", "required with device nvme");
  // Off is fine at any stage.
  EXPECT_FALSE(resolved({}, R"({"zero_optimization": {"stage": 1, "offload_param": {"device": "none"}}})")
                   .zero.offload_param.enabled);
}

TEST(TrainConfigJson, HiddenSizeAutoNeedsTheHiddenSize) {
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{});
  EXPECT_ERROR_HAS(
      config.resolve_with_json_text(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})",
                                    "t.json", {.world_size = 1, .num_train_examples = 10}),
      "zero_optimization.reduce_bucket_size", "hidden size");
}

TEST(TrainConfigJson, OptimizerAndSchedulerTypes) {
  EXPECT_ERROR_HAS(resolved({}, R"({"optimizer": {"type": "Lamb"}})"), "optimizer.type", "Lamb");
  EXPECT_ERROR_HAS(resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})"),
                   "AdamW contradicts", "adam_w_mode");
  EXPECT_EQ(resolved({}, R"({"optimizer": {"type": "adam"}})").optimizer_type, "Adam");
  EXPECT_ERROR_HAS(resolved({}, R"({"scheduler": {"type": "OneCycle"}})"), "scheduler.type", "OneCycle");
  // Absent params follow the flags, not DeepSpeed's own defaults (warmup_max_lr 0.001, 1000 warmup steps).
  const TrainConfig warmup = resolved({}, R"({"scheduler": {"type": "WarmupLR"}})");
  ASSERT_TRUE(warmup.deepspeed_schedule.has_value());
  EXPECT_DOUBLE_EQ(warmup.deepspeed_schedule->warmup_max_lr, 5e-5);
  EXPECT_EQ(warmup.deepspeed_schedule->warmup_num_steps, 0);
  const TrainConfig cosine = resolved({"--num_warmup_steps", "30"},
                                      R"({"scheduler": {"type": "WarmupCosineLR", "params": {
                                          "warmup_type": "linear", "cos_min_ratio": 0.1,
                                          "total_num_steps": "auto", "warmup_num_steps": "auto"}}})");
  ASSERT_TRUE(cosine.deepspeed_schedule.has_value());
  EXPECT_EQ(cosine.deepspeed_schedule->type, DeepSpeedSchedule::Type::warmup_cosine_lr);
  EXPECT_FALSE(cosine.deepspeed_schedule->warmup_log);
  EXPECT_DOUBLE_EQ(cosine.deepspeed_schedule->cos_min_ratio, 0.1);
  EXPECT_EQ(cosine.deepspeed_schedule->warmup_num_steps, 30);
  EXPECT_EQ(cosine.deepspeed_schedule->total_num_steps, 1377);
}

// ---------------------------------------------------------------------------------------------------------
// Reading the JSON

TEST(TrainConfigJson, DuplicateKeysNameTheKeyAndTheFile) {
  EXPECT_ERROR_HAS(resolved({}, R"({"train_batch_size": 8, "train_batch_size": 16})"), "test.json",
                   "'train_batch_size' appears twice");
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 2, "overlap_comm": true, "stage": 3}})"),
                   "test.json", "'zero_optimization.stage' appears twice");
  EXPECT_ERROR_HAS(resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "lr": 2e-5}}})"),
                   "'optimizer.params.lr' appears twice");
  // The same key in two objects is no duplicate.
  EXPECT_EQ(resolved({}, R"({"fp16": {"enabled": false}, "bf16": {"enabled": true}})").dtype,
            ComputeDType::bf16);
  // Read from a file, the message names the file.
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{
      "--deepspeed_config",
      write_temp("duplicate.json", R"({"gradient_clipping": 1.0, "gradient_clipping": 0})")});
  EXPECT_ERROR_HAS(config.resolve(inputs()), "duplicate.json", "'gradient_clipping' appears twice");
}

TEST(TrainConfigJson, NumbersOutOfRangeNameTheKeyAndTheFile) {
  // Beyond a double: the parser's own exception would name neither.
  const std::string message =
      error_of([] { resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e400}}})"); });
  EXPECT_NE(message.find("test.json"), std::string::npos) << message;
  EXPECT_NE(message.find("'optimizer.params.lr'"), std::string::npos) << message;
  EXPECT_NE(message.find("out of range"), std::string::npos) << message;
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
  EXPECT_ERROR_HAS(resolved({}, R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, -1e999]}}})"),
                   "'optimizer.params.betas[1]'", "out of range");
  // Beyond int64: nlohmann keeps 2^64 - 1 unsigned (it would wrap to -1) and turns 1e30 into a double.
  EXPECT_ERROR_HAS(resolved({}, R"({"train_batch_size": 18446744073709551615})"), "test.json",
                   "'train_batch_size' is out of range");
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e30}})"),
                   "'zero_optimization.stage3_max_live_parameters' is out of range");
  // Beyond the field it sets.
  EXPECT_ERROR_HAS(resolved({}, R"({"fp16": {"enabled": true, "hysteresis": 1e10}})"), "test.json",
                   "'fp16.hysteresis' must be in [1, 2147483647]");
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 1e12}})"), "zero_optimization.stage",
                   "got 1000000000000");
  // Each in range, their product not.
  EXPECT_ERROR_HAS(resolved({}, R"({"train_micro_batch_size_per_gpu": 4000000000000000000,
                                    "gradient_accumulation_steps": 4})"),
                   "overflows");
}

TEST(TrainConfigJson, ConfigFilesAreCappedAndReadOnce) {
  // A valid config padded past the limit: refused by size, naming the file and the limit.
  const std::string big =
      write_temp("big.json", R"({"train_batch_size": 8)" + std::string(kMaxDeepSpeedConfigBytes, ' ') + "}");
  TrainConfig too_big = TrainConfig::from_args(std::vector<std::string>{"--deepspeed_config", big});
  EXPECT_ERROR_HAS(too_big.resolve(inputs()), big.c_str(), "larger than 1 MiB");
  // A file without end stops at the limit instead of filling memory.
  TrainConfig endless = TrainConfig::from_args(std::vector<std::string>{"--deepspeed_config", "/dev/zero"});
  EXPECT_ERROR_HAS(endless.resolve(inputs()), "/dev/zero", "larger than 1 MiB");
  // Text handed over directly has the same limit.
  TrainConfig text = TrainConfig::from_args(std::vector<std::string>{});
  EXPECT_ERROR_HAS(
      text.resolve_with_json_text(std::string(kMaxDeepSpeedConfigBytes + 1, ' '), "padded.json", inputs()),
      "padded.json", "larger than 1 MiB");
}

TEST(TrainConfigJson, ConfigFromAFifoIsReadInOnePass) {
  // A FIFO has no size and a second open would wait for a writer that is gone: one open, one pass to EOF.
  const std::string path = testing::TempDir() + "zt_config_fifo_" + std::to_string(::getpid());
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
  std::thread writer([&] { std::ofstream(path) << R"({"zero_optimization": {"stage": 2}})"; });
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--deepspeed_config", path});
  const std::string message = error_of([&] { config.resolve(inputs()); });
  writer.join();
  ::unlink(path.c_str());
  EXPECT_EQ(message, "");
  EXPECT_EQ(config.zero.stage, 2);
}

// ---------------------------------------------------------------------------------------------------------
// Keys that were accepted and ignored

TEST(TrainConfigJson, SixteenBitJsonOnTheCpuIsRefused) {
  EXPECT_ERROR_HAS(resolved({"--device", "cpu"}, R"({"fp16": {"enabled": true}})"), "test.json",
                   "fp16.enabled true", "computes in f32 only");
  EXPECT_ERROR_HAS(resolved({"--device", "cpu"}, R"({"bf16": {"enabled": true}})"), "bf16.enabled true",
                   "computes in f32 only");
  EXPECT_ERROR_HAS(resolved({"--device", "cpu", "--dtype", "bf16"}, "{}"), "--dtype bf16",
                   "computes in f32 only");
  // "auto", disabled sections and no JSON at all train in f32 on the CPU.
  EXPECT_EQ(
      resolved({"--device", "cpu"}, R"({"fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})").dtype,
      ComputeDType::f32);
  EXPECT_EQ(resolved({"--device", "cpu"}, R"({"bf16": {"enabled": false}})").dtype, ComputeDType::f32);
  TrainConfig no_json = TrainConfig::from_args(std::vector<std::string>{"--device", "cpu"});
  no_json.resolve(inputs());
  EXPECT_EQ(no_json.dtype, ComputeDType::f32);
  // A GPU run takes them as before.
  EXPECT_EQ(resolved({"--device", "cuda"}, R"({"fp16": {"enabled": true}})").dtype, ComputeDType::f16);
}

TEST(TrainConfigJson, StepsPerPrintLeavesLogEvery) {
  // DeepSpeed's console interval: metrics.jsonl and TensorBoard keep --log_every (HF's logging steps).
  const TrainConfig config = resolved({"--log_every", "5"}, R"({"steps_per_print": 50})");
  EXPECT_EQ(config.log_every, 5);
  EXPECT_NE(config.describe().find("  steps_per_print  explained: DeepSpeed's console print interval"),
            std::string::npos)
      << config.describe();
}

TEST(TrainConfigJson, WallClockBreakdownComesFromTheKeyOrTheFlag) {
  EXPECT_TRUE(resolved({}, R"({"wall_clock_breakdown": true})").wall_clock_breakdown);
  EXPECT_FALSE(resolved({}, R"({"wall_clock_breakdown": false})").wall_clock_breakdown);
  EXPECT_TRUE(resolved({"--wall_clock_breakdown"}, R"({})").wall_clock_breakdown);
  EXPECT_ERROR_HAS(resolved({"--wall_clock_breakdown"}, R"({"wall_clock_breakdown": false})"),
                   "--wall_clock_breakdown true contradicts", "wall_clock_breakdown = false");
}

}  // namespace
}  // namespace zt::optim
