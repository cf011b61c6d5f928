// DeepSpeed configs as real projects write them (issue 38 item 11): every key DeepSpeed has is honoured,
// explained or refused by name, never "unknown"; what has no effect when off or at its default is accepted
// with the reason in describe().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::inputs;

TrainConfig resolved(std::vector<std::string> flags, const std::string& json) {
  TrainConfig config = TrainConfig::from_args(flags);
  config.resolve_with_json_text(json, "test.json", inputs());
  return config;
}

// The verdict of `path` in the resolved config ("" if it has none), as "honoured: note" or "explained: why".
std::string verdict(const TrainConfig& config, const std::string& path) {
  for (const JsonKeyVerdict& key : config.deepspeed_keys.verdicts) {
    if (key.path == path) {
      return str(key.use == JsonKeyVerdict::Use::honoured ? "honoured" : "explained", ": ", key.note);
    }
  }
  return "";
}

TEST(DeepSpeedKeys, DisabledSectionsAreAcceptedAndExplained) {
  const TrainConfig config = resolved({}, R"({
    "tensorboard": {"enabled": false, "output_path": "/tb/", "job_name": "x"},
    "flops_profiler": {"enabled": false, "profile_step": 1},
    "comms_logger": {"enabled": false},
    "hybrid_engine": {"enabled": false, "max_out_tokens": 512},
    "comms_config": {"verbose": false},
    "monitor_config": {"enabled": true, "tag": "DeepSpeedMonitor", "csv_monitor": {"enabled": false}},
    "prescale_gradients": false,
    "zero_optimization": {"stage": 3, "reduce_bucket_size": 0, "round_robin_gradients": true}})");
  EXPECT_TRUE(verdict(config, "tensorboard.output_path").starts_with("explained: tensorboard is disabled"));
  EXPECT_TRUE(verdict(config, "flops_profiler.profile_step").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "hybrid_engine.max_out_tokens").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "comms_config.verbose").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "monitor_config.csv_monitor.enabled").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "prescale_gradients").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "zero_optimization.round_robin_gradients").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "zero_optimization.reduce_bucket_size").starts_with("honoured"));
  EXPECT_EQ(config.zero.reduce_bucket_size, 0);
  // describe() prints every key with its verdict.
  const std::string text = config.describe();
  EXPECT_NE(text.find("deepspeed config keys\n"), std::string::npos);
  EXPECT_NE(text.find("  hybrid_engine.enabled  explained: hybrid_engine is disabled"), std::string::npos)
      << text;
}

TEST(DeepSpeedKeys, EnabledOrNonDefaultValuesAreRefusedByName) {
  EXPECT_ERROR_HAS(resolved({}, R"({"tensorboard": {"enabled": true}})"), "'tensorboard.enabled' is true",
                   "--with_tracking");
  EXPECT_ERROR_HAS(resolved({}, R"({"hybrid_engine": {"enabled": true}})"), "'hybrid_engine.enabled'");
  EXPECT_ERROR_HAS(resolved({}, R"({"prescale_gradients": true})"), "'prescale_gradients' is true",
                   "not implemented");
  EXPECT_ERROR_HAS(resolved({}, R"({"comms_config": {"verbose": true}})"), "'comms_config'");
  // A key in no row is still unknown, with the closest name of its section.
  EXPECT_ERROR_HAS(resolved({}, R"({"zero_optimization": {"stage": 2, "round_robin_gradient": true}})"),
                   "unknown key 'zero_optimization.round_robin_gradient'",
                   "did you mean 'round_robin_gradients'");
}

TEST(DeepSpeedKeys, RealKeysAreNeverUnknown) {
  for (const char* json :
       {R"({"data_types": {"grad_accum_dtype": "bf16"}})", R"({"autotuning": {"enabled": true}})",
        R"({"zero_optimization": {"zero_quantized_weights": true}})", R"({"compression_training": {}})"}) {
    const std::string message = test::error_of([&] { resolved({}, json); });
    EXPECT_FALSE(message.empty()) << json;
    EXPECT_EQ(message.find("unknown"), std::string::npos) << message;
  }
  EXPECT_TRUE(verdict(resolved({}, R"({"zero_optimization": {"zero_quantized_weights": false}})"),
                      "zero_optimization.zero_quantized_weights")
                  .starts_with("explained"));
  // Gradients accumulate in f32 here: fp32 (as bf16 configs ask) is what runs.
  EXPECT_TRUE(
      verdict(resolved({}, R"({"data_types": {"grad_accum_dtype": "fp32"}})"), "data_types.grad_accum_dtype")
          .starts_with("explained"));
  EXPECT_ERROR_HAS(resolved({}, R"({"data_types": {"grad_accum_dtype": "bf16"}})"),
                   "'data_types.grad_accum_dtype' is \"bf16\"", "f32");
}

TEST(DeepSpeedKeys, LegacyOffloadKeysMapToTheirSections) {
  const TrainConfig two = resolved({}, R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
                                            "cpu_offload_use_pin_memory": false}})");
  EXPECT_TRUE(two.zero.offload_optimizer.enabled);
  EXPECT_FALSE(two.zero.offload_optimizer.pin_memory);
  EXPECT_TRUE(verdict(two, "zero_optimization.cpu_offload").find("legacy name") != std::string::npos);
  const TrainConfig three =
      resolved({}, R"({"zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_params": true}})");
  EXPECT_TRUE(three.zero.offload_optimizer.enabled);
  EXPECT_TRUE(three.zero.offload_param.enabled);
  EXPECT_ERROR_HAS(
      resolved({}, R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
                                      "offload_optimizer": {"device": "none"}}})"),
      "zero_optimization.cpu_offload true contradicts zero_optimization.offload_optimizer.device");
}

TEST(DeepSpeedKeys, OffloadParamBelowStage3IsExplainedAndIgnored) {
  // DeepSpeed-Chat's generator writes offload_param at stage 2; DeepSpeed ignores it there.
  const TrainConfig config = resolved({}, R"({"zero_optimization": {"stage": 2,
      "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_FALSE(config.zero.offload_param.enabled);
  EXPECT_TRUE(config.zero.offload_optimizer.enabled);
  EXPECT_TRUE(verdict(config, "zero_optimization.offload_param.device").find("stage 3 only") !=
              std::string::npos);
}

TEST(DeepSpeedKeys, StepsPerPrintIsTheConsoleIntervalNotTheMetricsCadence) {
  const TrainConfig config = resolved({"--log_every", "1"}, R"({"steps_per_print": 2000})");
  EXPECT_EQ(config.log_every, 1);
  EXPECT_TRUE(verdict(config, "steps_per_print").find("console") != std::string::npos);
  EXPECT_EQ(resolved({}, R"({"steps_per_print": 2000})").log_every, 10);
}

TEST(DeepSpeedKeys, KeysWithoutEffectSaySo) {
  const TrainConfig config = resolved({"--device", "cpu"}, R"({"zero_allow_untested_optimizer": true,
      "fp16": {"enabled": false, "auto_cast": false},
      "optimizer": {"type": "AdamW", "params": {"torch_adam": true}},
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_TRUE(verdict(config, "zero_allow_untested_optimizer").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "fp16.auto_cast").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "optimizer.params.torch_adam").starts_with("explained"));
  EXPECT_TRUE(verdict(config, "zero_optimization.offload_optimizer.pin_memory").find("CPU backend") !=
              std::string::npos);
}

TEST(DeepSpeedKeys, SchedulerWarmupBoundsFollowDeepSpeed) {
  EXPECT_ERROR_HAS(resolved({}, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})"),
                   "scheduler.params.warmup_num_steps must be a positive integer");
  EXPECT_ERROR_HAS(resolved({}, R"({"scheduler": {"type": "WarmupDecayLR",
                                     "params": {"warmup_num_steps": 10, "total_num_steps": 5}}})"),
                   "scheduler.params.total_num_steps 5 is less than scheduler.params.warmup_num_steps 10");
  const TrainConfig equal = resolved({}, R"({"scheduler": {"type": "WarmupDecayLR",
                                           "params": {"warmup_num_steps": 5, "total_num_steps": 5}}})");
  ASSERT_TRUE(equal.deepspeed_schedule.has_value());
  EXPECT_EQ(equal.deepspeed_schedule->total_num_steps, 5);
  const TrainConfig one =
      resolved({}, R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1}}})");
  EXPECT_TRUE(verdict(one, "scheduler.params.warmup_num_steps").find("at least 2 steps") !=
              std::string::npos);
}

TEST(DeepSpeedKeys, SixteenBitYamlOnTheCpuNamesTheYamlKey) {
  // trl's deepspeed_zero3.yaml on the CPU: the refusal names the YAML's key, not a flag never given.
  const std::string yaml = config_test::write_temp(
      "fp16.yaml",
      "distributed_type: DEEPSPEED\nmixed_precision: 'fp16'\ndeepspeed_config:\n  zero_stage: 3\n");
  TrainConfig config = TrainConfig::from_args({"--config_file", yaml, "--device", "cpu"});
  EXPECT_ERROR_HAS(config.resolve(inputs()), "fp16.yaml' mixed_precision f16", "set it to 'no'");
}

}  // namespace
}  // namespace zt::optim
