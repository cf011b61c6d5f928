// TrainConfig: run_glue_no_trainer.py flags, describe() and the errors a user meets on the command line.
#include "app/config/train_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::inputs;
using config_test::line_of;
using config_test::resolved;

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

}  // namespace
}  // namespace zt::optim
