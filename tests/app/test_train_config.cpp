// TrainConfig: run_glue_no_trainer.py flags, DeepSpeed JSON with "auto", and the errors a user meets.
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

#include "app/config/engine_options.h"
#include "runtime/check.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::kMrpcTrainRows;
using config_test::kXlargeHidden;

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

using config_test::inputs;
using config_test::write_temp;

TrainConfig resolved(const std::vector<std::string>& flags, const std::string& json, int world_size = 1) {
  TrainConfig config = TrainConfig::from_args(flags);
  config.resolve_with_json_text(json, "test.json", inputs(world_size));
  return config;
}

using test::error_of;

// The line of describe()'s `text` that prints `key` ("" if there is none).
std::string line_of(const std::string& text, const std::string& key) {
  const size_t start = text.find("  " + key + " ");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

TEST(TrainConfigFlags, DefaultsMatchRunGlueNoTrainer) {
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{});
  EXPECT_EQ(config.max_length, 128);
  EXPECT_FALSE(config.pad_to_max_length);
  EXPECT_EQ(config.per_device_train_batch_size, 8);
  EXPECT_EQ(config.per_device_eval_batch_size, 8);
  EXPECT_DOUBLE_EQ(config.learning_rate, 5e-5);
  EXPECT_DOUBLE_EQ(config.weight_decay, 0.0);
  EXPECT_EQ(config.num_train_epochs, 3);
  EXPECT_FALSE(config.max_train_steps.has_value());
  EXPECT_EQ(config.gradient_accumulation_steps, 1);
  EXPECT_EQ(config.lr_scheduler_type, "linear");
  EXPECT_EQ(config.num_warmup_steps, 0);
  EXPECT_DOUBLE_EQ(config.max_grad_norm, 1.0);
  EXPECT_EQ(config.checkpointing_steps.kind, CheckpointingSteps::Kind::none);
  EXPECT_EQ(config.dtype, ComputeDType::bf16);
  EXPECT_EQ(config.device, DeviceChoice::auto_detect);
  EXPECT_EQ(config.gpu_memory_limit, 0u);

  config.resolve(inputs());
  EXPECT_EQ(config.train_file, std::string(ZT_DATA_DIR) + "/train.tsv");
  EXPECT_EQ(config.validation_file, std::string(ZT_DATA_DIR) + "/dev.tsv");
  EXPECT_EQ(config.test_file, std::string(ZT_DATA_DIR) + "/test.tsv");
  EXPECT_EQ(config.train_batch_size, 8);
  EXPECT_EQ(config.num_update_steps_per_epoch, 459);  // ceil(3668 / 8)
  EXPECT_EQ(config.num_training_steps, 3 * 459);
  EXPECT_EQ(config.zero.stage, 0);
  EXPECT_FALSE(config.deepspeed_schedule.has_value());
  EXPECT_EQ(config.origin_of("learning_rate"), Origin::default_value);
  const LrSchedule schedule = config.hf_schedule();
  EXPECT_EQ(schedule.kind, ScheduleKind::linear);
  EXPECT_EQ(schedule.num_training_steps, 1377);
}

TEST(TrainConfigFlags, BothSyntaxesAndBareSwitches) {
  const TrainConfig config = TrainConfig::from_args(std::vector<std::string>{
      "--learning_rate", "3e-5", "--per_device_train_batch_size=16", "--pad_to_max_length", "--seed", "7",
      "--checkpointing_steps=epoch", "--gpu_memory_limit", "24GiB", "--dtype=f16", "--device", "cpu",
      "--ignore_mismatched_sizes=false", "--max_train_steps=100", "--data_dir", "/data/mrpc"});
  EXPECT_DOUBLE_EQ(config.learning_rate, 3e-5);
  EXPECT_EQ(config.per_device_train_batch_size, 16);
  EXPECT_TRUE(config.pad_to_max_length);
  EXPECT_EQ(config.seed, 7u);  // the switch did not swallow "--seed"
  EXPECT_EQ(config.checkpointing_steps.kind, CheckpointingSteps::Kind::epoch);
  EXPECT_EQ(config.gpu_memory_limit, size_t{24} << 30);
  EXPECT_EQ(config.dtype, ComputeDType::f16);
  EXPECT_EQ(config.device, DeviceChoice::cpu);
  EXPECT_FALSE(config.ignore_mismatched_sizes);
  EXPECT_EQ(config.max_train_steps, 100);
  EXPECT_EQ(config.origin_of("learning_rate"), Origin::flag);
  EXPECT_EQ(config.origin_of("per_device_train_batch_size"), Origin::flag);
  EXPECT_EQ(config.origin_of("weight_decay"), Origin::default_value);

  TrainConfig steps = TrainConfig::from_args(std::vector<std::string>{"--checkpointing_steps", "50"});
  EXPECT_EQ(steps.checkpointing_steps.kind, CheckpointingSteps::Kind::steps);
  EXPECT_EQ(steps.checkpointing_steps.every, 50);
}

TEST(TrainConfigFlags, DataDirMovesTheDefaultFiles) {
  TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--data_dir", "/data/mrpc", "--test_file", "/x/test.tsv"});
  config.resolve(inputs());
  EXPECT_EQ(config.train_file, "/data/mrpc/train.tsv");
  EXPECT_EQ(config.validation_file, "/data/mrpc/dev.tsv");
  EXPECT_EQ(config.test_file, "/x/test.tsv");
}

TEST(TrainConfigFlags, MaxTrainStepsOverridesEpochs) {
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--max_train_steps", "500"});
  config.resolve(inputs());
  EXPECT_EQ(config.num_training_steps, 500);
  EXPECT_EQ(config.num_train_epochs, 2);  // ceil(500 / 459), as run_glue_no_trainer.py recomputes it
  EXPECT_EQ(config.origin_of("num_train_epochs"), Origin::derived);
}

TEST(TrainConfigFlags, StepsCountEveryRanksShardAndAccumulation) {
  TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--per_device_train_batch_size", "40", "--gradient_accumulation_steps", "2"});
  config.resolve(inputs(2));
  // 1834 rows per rank -> 46 batches -> 23 optimizer steps per epoch.
  EXPECT_EQ(config.num_update_steps_per_epoch, 23);
  EXPECT_EQ(config.train_batch_size, 160);
}

TEST(TrainConfigFlags, UnknownFlagIsNamed) {
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--learning_rat", "1e-5"}),
                   "--learning_rat", "did you mean 'learning_rate'");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--push_to_hub"}), "--push_to_hub",
                   "does not support");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"stray"}), "stray");
}

TEST(TrainConfigFlags, MissingValueIsNamed) {
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--seed"}), "--seed needs a value");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--output_dir", "--seed", "3"}),
                   "--output_dir needs a value");
}

TEST(TrainConfigFlags, BadNumbersAreNamed) {
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--learning_rate", "fast"}),
                   "--learning_rate", "'fast'");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--max_length=12x"}), "--max_length",
                   "'12x'");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--per_device_train_batch_size", "0"}),
                   "--per_device_train_batch_size", "at least 1");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--adam_beta2", "1.0"}), "--adam_beta2");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--gpu_memory_limit", "lots"}),
                   "--gpu_memory_limit");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--dtype", "f8"}), "--dtype", "'f8'");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--checkpointing_steps", "often"}),
                   "--checkpointing_steps");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--pad_to_max_length=yes"}),
                   "--pad_to_max_length");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--lr_scheduler_type", "linaer"}),
                   "linaer");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--task_name", "squad"}), "--task_name",
                   "squad");
}

TEST(TrainConfigFlags, HelpListsEveryFlag) {
  const TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--help", "--bogus"});
  EXPECT_TRUE(config.show_help);
  const std::string help = TrainConfig::help_text();
  for (const char* flag : {"--model_name_or_path",
                           "--train_file",
                           "--validation_file",
                           "--test_file",
                           "--max_length",
                           "--pad_to_max_length",
                           "--per_device_train_batch_size",
                           "--per_device_eval_batch_size",
                           "--learning_rate",
                           "--weight_decay",
                           "--num_train_epochs",
                           "--max_train_steps",
                           "--gradient_accumulation_steps",
                           "--lr_scheduler_type",
                           "--num_warmup_steps",
                           "--seed",
                           "--output_dir",
                           "--checkpointing_steps",
                           "--resume_from_checkpoint",
                           "--deepspeed_config",
                           "--gpu_memory_limit",
                           "--dtype",
                           "--device",
                           "--max_grad_norm",
                           "--data_dir",
                           "--log_every",
                           "--task_name",
                           "--ignore_mismatched_sizes",
                           "--adam_beta1",
                           "--adam_beta2",
                           "--adam_epsilon",
                           "--world_size",
                           "--estimate_memory",
                           "--debug_collectives",
                           "--collective_timeout",
                           "--overwrite_output_dir",
                           "--help"}) {
    EXPECT_NE(help.find(str(flag, " ")), std::string::npos) << flag << " missing from --help:\n" << help;
  }
  EXPECT_NE(help.find("[default: 0]"), std::string::npos) << help;  // --num_warmup_steps
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

TEST(TrainConfigDescribe, MarksWhereValuesCameFrom) {
  const TrainConfig config =
      resolved({"--weight_decay", "0.01"}, R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-5}},
                                              "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})");
  const std::string text = config.describe();
  auto line_of = [&](const std::string& key) {
    const std::string line = optim::line_of(text, key);
    EXPECT_FALSE(line.empty()) << key << " missing from\n" << text;
    return line;
  };
  EXPECT_NE(line_of("learning_rate").find("[json optimizer.params.lr]"), std::string::npos) << text;
  EXPECT_NE(line_of("weight_decay").find("[flag]"), std::string::npos) << text;
  EXPECT_NE(line_of("adam_epsilon").find("[default]"), std::string::npos) << text;
  EXPECT_NE(line_of("zero_optimization.reduce_bucket_size").find("2359296 "), std::string::npos) << text;
  EXPECT_NE(line_of("zero_optimization.reduce_bucket_size").find("[json auto]"), std::string::npos) << text;
  EXPECT_NE(line_of("zero_optimization.stage").find("[json]"), std::string::npos) << text;
  EXPECT_NE(line_of("train_batch_size").find("[derived"), std::string::npos) << text;
}

// ---------------------------------------------------------------------------------------------------------
// New flags

TEST(TrainConfigFlags, RunFlagsAndTheirDefaults) {
  const TrainConfig defaults = TrainConfig::from_args(std::vector<std::string>{});
  EXPECT_EQ(defaults.world_size, 1);
  EXPECT_FALSE(defaults.estimate_memory);
  EXPECT_FALSE(defaults.debug_collectives);
  EXPECT_EQ(defaults.collective_timeout_seconds, 600);
  EXPECT_FALSE(defaults.overwrite_output_dir);

  const TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--world_size", "4", "--estimate_memory", "--debug_collectives",
                               "--collective_timeout=0", "--overwrite_output_dir"});
  EXPECT_EQ(config.world_size, 4);
  EXPECT_EQ(config.origin_of("world_size"), Origin::flag);
  EXPECT_TRUE(config.estimate_memory);
  EXPECT_TRUE(config.debug_collectives);
  EXPECT_EQ(config.collective_timeout_seconds, 0);
  EXPECT_TRUE(config.overwrite_output_dir);

  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--world_size", "0"}), "--world_size",
                   "at least 1");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--world_size", "65"}), "--world_size",
                   "at most 64");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--collective_timeout", "-1"}),
                   "--collective_timeout", "at least 0");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--collective_timeout", "99999999999"}),
                   "--collective_timeout", "at most");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--estimate_memory=maybe"}),
                   "--estimate_memory");
}

TEST(TrainConfigFlags, WorldSizeFlagCountsInTheBatchAndSteps) {
  TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--world_size", "4", "--per_device_train_batch_size", "8"});
  config.resolve(inputs(1));  // a single process running 4 in-process ranks
  EXPECT_EQ(config.world_size, 4);
  EXPECT_EQ(config.train_batch_size, 32);
  // Note [Optimizer steps of an epoch]: ceil(3668 / 8) = 459 micro-batches, floor(459 / 4) = 114 a rank.
  EXPECT_EQ(config.num_update_steps_per_epoch, 114);

  // DeepSpeed's train_batch_size derivation uses it too: 64 / (8 x 4) = 2 accumulation steps.
  EXPECT_EQ(
      resolved({"--world_size", "4", "--per_device_train_batch_size", "8"}, R"({"train_batch_size": 64})")
          .gradient_accumulation_steps,
      2);
  // A caller that already runs several ranks must agree with the flag.
  EXPECT_EQ(resolved({"--world_size", "2"}, "{}", 2).world_size, 2);
  EXPECT_ERROR_HAS(resolved({"--world_size", "4"}, "{}", 2), "--world_size 4", "2 ranks");
  // Without the flag the caller's world size is the run's.
  const TrainConfig launched = resolved({}, "{}", 3);
  EXPECT_EQ(launched.world_size, 3);
  EXPECT_EQ(launched.origin_of("world_size"), Origin::derived);
}

TEST(TrainConfigFlags, HelpShowsWhereEachRunDefaultApplies) {
  const std::string help = TrainConfig::help_text();
  auto help_line = [&](const std::string& flag) {
    const size_t start = help.find("  --" + flag + " ");
    EXPECT_NE(start, std::string::npos) << flag << " missing from --help:\n" << help;
    return start == std::string::npos ? std::string() : help.substr(start, help.find('\n', start) - start);
  };
  EXPECT_NE(help_line("learning_rate")
                .find("[default: 2e-05 on a GPU, 0.0001 on the CPU (embedded model); 5e-05 with "
                      "--model_name_or_path]"),
            std::string::npos)
      << help;
  EXPECT_NE(help_line("per_device_train_batch_size")
                .find("[default: 40 on a GPU, 32 on the CPU (embedded model); 8 with --model_name_or_path]"),
            std::string::npos)
      << help;
  EXPECT_NE(help_line("per_device_eval_batch_size").find("40 on a GPU, 64 on the CPU"), std::string::npos)
      << help;
  EXPECT_NE(help_line("dtype").find("[default: bf16 on a GPU, f32 on the CPU]"), std::string::npos) << help;
  EXPECT_NE(help_line("collective_timeout").find("[default: 600]"), std::string::npos) << help;
}

TEST(TrainConfigFlags, RunDefaultsFollowTheDeviceAndTheModel) {
  auto with_defaults = [](std::vector<std::string> flags, DeviceChoice device, bool embedded) {
    TrainConfig config = TrainConfig::from_args(flags);
    config.device = device;
    apply_run_defaults(config, embedded);
    return config;
  };
  const TrainConfig cpu = with_defaults({}, DeviceChoice::cpu, true);
  EXPECT_DOUBLE_EQ(cpu.learning_rate, 1e-4);
  EXPECT_EQ(cpu.per_device_train_batch_size, 32);
  EXPECT_EQ(cpu.per_device_eval_batch_size, 64);
  EXPECT_EQ(cpu.dtype, ComputeDType::f32);
  EXPECT_EQ(cpu.origin_of("learning_rate"), Origin::default_value);
  EXPECT_NE(line_of(cpu.describe(), "learning_rate").find("[default, on the CPU with the embedded model]"),
            std::string::npos)
      << cpu.describe();

  const TrainConfig gpu = with_defaults({}, DeviceChoice::cuda, true);
  EXPECT_DOUBLE_EQ(gpu.learning_rate, 2e-5);
  EXPECT_EQ(gpu.per_device_train_batch_size, 40);
  EXPECT_EQ(gpu.per_device_eval_batch_size, 40);
  EXPECT_EQ(gpu.dtype, ComputeDType::bf16);

  // A model of one's own keeps HF's defaults; the dtype still follows the device.
  const TrainConfig own_model = with_defaults({}, DeviceChoice::cpu, false);
  EXPECT_DOUBLE_EQ(own_model.learning_rate, 5e-5);
  EXPECT_EQ(own_model.per_device_train_batch_size, 8);
  EXPECT_EQ(own_model.dtype, ComputeDType::f32);

  // A flag always wins.
  const TrainConfig flagged = with_defaults({"--learning_rate", "3e-5"}, DeviceChoice::cuda, true);
  EXPECT_DOUBLE_EQ(flagged.learning_rate, 3e-5);
  EXPECT_EQ(flagged.per_device_train_batch_size, 40);

  EXPECT_ERROR_HAS(with_defaults({}, DeviceChoice::auto_detect, true), "device");
  // Every row names a flag whose parser takes both values (apply_run_defaults would throw otherwise).
  for (const RunDefault& row : run_defaults()) {
    SCOPED_TRACE(row.flag);
    for (const std::string_view value : {row.on_gpu, row.on_cpu}) {
      EXPECT_NO_THROW(
          TrainConfig::from_args(std::vector<std::string>{str("--", row.flag), std::string(value)}));
    }
  }
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

TEST(TrainConfigFlags, TrackingGoesToTensorBoardUnderTheOutputDir) {
  TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--with_tracking", "--report_to", "tensorboard", "--output_dir", "out"});
  config.resolve(inputs());
  EXPECT_TRUE(config.with_tracking);
  EXPECT_NE(line_of(config.describe(), "with_tracking").find("out/runs/glue_no_trainer"), std::string::npos);
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--report_to", "wandb"}),
                   "--report_to wandb", "tensorboard only");
  TrainConfig alone = TrainConfig::from_args(std::vector<std::string>{"--report_to", "tensorboard"});
  EXPECT_ERROR_HAS(alone.resolve(inputs()), "--report_to tensorboard needs --with_tracking");
  TrainConfig no_dir = TrainConfig::from_args(std::vector<std::string>{"--with_tracking"});
  EXPECT_ERROR_HAS(no_dir.resolve(inputs()), "--with_tracking", "--output_dir");
}

// ---------------------------------------------------------------------------------------------------------
// zero_optimization: Note [ZeRO keys] in app/config/train_config_zero.cpp

std::string zero_json(const std::string& keys) {
  return R"({"zero_optimization": {)" + keys + "}}";
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
  EXPECT_ERROR_HAS(
      resolved({}, zero_json(R"("stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3})")),
      "zero_optimization.offload_optimizer.ratio 0.3", "partial optimizer offload is not supported");
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
