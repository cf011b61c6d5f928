// train_mrpc --config_file: Accelerate's YAML (Note [Accelerate config files] in
// app/config/train_config_accelerate.cpp). The files below are what `accelerate config` writes for DeepSpeed
// ZeRO-2 and ZeRO-3 + CPU offload (accelerate's documented schema, keys sorted as it dumps them).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "app/run/resume_config.h"
#include "runtime/check.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::kMrpcTrainRows;
using config_test::kXlargeHidden;

const char* const kZero2Yaml = R"(compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 4
  gradient_clipping: 0.5
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
)";
// The DeepSpeed JSON and flags that say the same.
const char* const kZero2Json = R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none"},
  "offload_param": {"device": "none"}}, "gradient_accumulation_steps": 4, "gradient_clipping": 0.5,
  "bf16": {"enabled": true}})";

const char* const kZero3OffloadYaml = R"(compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 1.0
  offload_optimizer_device: cpu
  offload_param_device: cpu
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
dynamo_backend: 'NO'
fsdp_config: {}
machine_rank: 0
main_training_function: main
megatron_lm_config: {}
mixed_precision: bf16
num_machines: 1
num_processes: 2
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
)";
const char* const kZero3OffloadJson = R"({"zero_optimization": {"stage": 3,
  "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"},
  "stage3_gather_16bit_weights_on_model_save": true}, "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0, "bf16": {"enabled": true}})";

using config_test::inputs;
using config_test::write_temp;

// A GPU run (16-bit precision is refused on the CPU): the device is settled before resolve, as train_mrpc
// does.
TrainConfig from_yaml(const std::string& yaml, std::vector<std::string> flags = {}) {
  flags.insert(flags.begin(), {"--config_file", write_temp("accelerate.yaml", yaml)});
  TrainConfig config = TrainConfig::from_args(flags);
  if (config.device == DeviceChoice::auto_detect) config.device = DeviceChoice::cuda;
  return config;
}

// describe()'s settings, without the listing of the YAML's own keys.
std::map<std::string, std::string, std::less<>> settings_of(const TrainConfig& config) {
  auto keys = parse_described_config(config.describe());
  std::erase_if(keys, [](const auto& kv) { return kv.first.starts_with("accelerate."); });
  return keys;
}

// The YAML and its flags + JSON equivalent resolve to the same settings, or fail with the same message
// (CPU offload: refused until it lands, then resolved alike).
void expect_same_resolution(const std::string& yaml, const std::string& json,
                            const std::vector<std::string>& flags) {
  TrainConfig accelerate = from_yaml(yaml);
  TrainConfig equivalent = TrainConfig::from_args(flags);
  equivalent.device = DeviceChoice::cuda;
  const std::string accelerate_error = test::error_of([&] { accelerate.resolve(inputs()); });
  const std::string equivalent_error =
      test::error_of([&] { equivalent.resolve_with_json_text(json, "equivalent.json", inputs()); });
  // Messages name their source first ("DeepSpeed config '<source>': "); what follows must agree.
  auto after_source = [](const std::string& m) {
    return m.substr(m.rfind("': ") == std::string::npos ? 0 : m.rfind("': "));
  };
  EXPECT_EQ(after_source(accelerate_error), after_source(equivalent_error));
  if (!accelerate_error.empty() || !equivalent_error.empty()) return;
  EXPECT_EQ(settings_of(accelerate), settings_of(equivalent));
}

TEST(AccelerateConfig, DeepSpeedZero2ResolvesAsTheEquivalentFlagsAndJson) {
  expect_same_resolution(kZero2Yaml, kZero2Json, {"--world_size", "2", "--dtype", "bf16"});
  TrainConfig config = from_yaml(kZero2Yaml);
  config.resolve(inputs());
  EXPECT_EQ(config.zero.stage, 2);
  EXPECT_EQ(config.world_size, 2);
  EXPECT_EQ(config.gradient_accumulation_steps, 4);
  EXPECT_EQ(config.max_grad_norm, 0.5);
  EXPECT_EQ(config.dtype, ComputeDType::bf16);
  // Each setting says which YAML key set it; each YAML key says what it did.
  const std::string text = config.describe();
  for (const char* part :
       {"[accelerate, deepspeed_config.zero_stage]", "[accelerate, num_processes]",
        "[accelerate, mixed_precision]", "[accelerate, deepspeed_config.gradient_clipping]",
        "accelerate.machine_rank", "accelerate.zero3_init_flag"}) {
    if (std::string(part) == "accelerate.zero3_init_flag") continue;  // nested: listed with its parent's name
    EXPECT_NE(text.find(part), std::string::npos) << part << " missing from\n" << text;
  }
  EXPECT_NE(text.find("accelerate.deepspeed_config.zero3_init_flag"), std::string::npos);
  EXPECT_EQ(config.origin_of("zero_optimization.stage"), Origin::accelerate);
}

TEST(AccelerateConfig, DeepSpeedZero3WithOffloadResolvesAsTheEquivalentFlagsAndJson) {
  expect_same_resolution(kZero3OffloadYaml, kZero3OffloadJson, {"--world_size", "2", "--dtype", "bf16"});
}

TEST(AccelerateConfig, MultiGpuAndNoMapToDataParallelAndOneRank) {
  TrainConfig ddp = from_yaml("distributed_type: MULTI_GPU\nnum_processes: 3\nmixed_precision: fp16\n");
  ddp.resolve(inputs());
  EXPECT_EQ(ddp.world_size, 3);
  EXPECT_EQ(ddp.zero.stage, 0);
  EXPECT_EQ(ddp.dtype, ComputeDType::f16);
  TrainConfig cpu = from_yaml("distributed_type: MULTI_CPU\nnum_processes: 2\nmixed_precision: 'no'\n");
  EXPECT_EQ(cpu.device, DeviceChoice::cpu);
  TrainConfig single = from_yaml("distributed_type: 'NO'\nuse_cpu: true\ndebug: true\n");
  EXPECT_EQ(single.device, DeviceChoice::cpu);
  EXPECT_TRUE(single.debug_collectives);
  EXPECT_ERROR_HAS(from_yaml("distributed_type: 'NO'\nnum_processes: 2\n"), "num_processes 2",
                   "distributed_type NO");
}

TEST(AccelerateConfig, KeysThatDoNotApplyAreRefusedByName) {
  EXPECT_ERROR_HAS(from_yaml("distributed_type: DEEPSPEED\nnum_procesess: 2\n"),
                   "unknown key 'num_procesess'", "did you mean 'num_processes'");
  EXPECT_ERROR_HAS(from_yaml("deepspeed_config:\n  zero_stag: 2\ndistributed_type: DEEPSPEED\n"),
                   "unknown key 'deepspeed_config.zero_stag'");
  EXPECT_ERROR_HAS(from_yaml("distributed_type: FSDP\n"), "distributed_type FSDP is not supported");
  EXPECT_ERROR_HAS(from_yaml("num_machines: 2\n"), "num_machines 2", "multi-node");
  EXPECT_ERROR_HAS(from_yaml("machine_rank: 1\n"), "machine_rank 1", "multi-node");
  EXPECT_ERROR_HAS(from_yaml("main_process_ip: 10.0.0.1\n"), "main_process_ip 10.0.0.1");
  EXPECT_ERROR_HAS(from_yaml("downcast_bf16: 'yes'\n"), "downcast_bf16 yes", "TPU only");
  EXPECT_ERROR_HAS(from_yaml("mixed_precision: fp8\n"), "mixed_precision fp8 is not supported");
  EXPECT_ERROR_HAS(from_yaml("fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"), "fsdp_config");
  EXPECT_ERROR_HAS(from_yaml("dynamo_backend: INDUCTOR\n"), "dynamo_backend INDUCTOR");
  EXPECT_ERROR_HAS(from_yaml("distributed_type: MULTI_GPU\ndeepspeed_config:\n  zero_stage: 2\n"),
                   "deepspeed_config is set but distributed_type is MULTI_GPU");
  EXPECT_ERROR_HAS(from_yaml("distributed_type: [a\n"), "accelerate config", "not valid YAML");
  EXPECT_ERROR_HAS(TrainConfig::from_args(std::vector<std::string>{"--config_file", "/nonexistent/cfg.yaml"}),
                   "--config_file: cannot open '/nonexistent/cfg.yaml'");
  // Offload to disk without a directory: the DeepSpeed JSON's error, naming the YAML key to set.
  TrainConfig nvme = from_yaml(
      "deepspeed_config:\n  offload_optimizer_device: nvme\n  zero_stage: 2\n"
      "distributed_type: DEEPSPEED\n");
  EXPECT_ERROR_HAS(nvme.resolve(inputs()), "deepspeed_config.offload_optimizer_nvme_path",
                   "nvme_path is required with device nvme");
  // Parameters on disk at stage 3 (offload_param_device nvme with its nvme_path).
  TrainConfig params = from_yaml(
      "deepspeed_config:\n  offload_optimizer_device: cpu\n  offload_param_device: nvme\n"
      "  offload_param_nvme_path: /local_nvme\n  zero_stage: 3\ndistributed_type: DEEPSPEED\n");
  params.resolve(inputs());
  EXPECT_TRUE(params.zero.offload_param.enabled);
  EXPECT_TRUE(params.zero.offload_param.nvme.enabled);
  EXPECT_EQ(params.zero.offload_param.nvme.nvme_path, "/local_nvme");
}

TEST(AccelerateConfig, ConflictsWithFlagsOrTheDeepSpeedJsonAreErrors) {
  EXPECT_ERROR_HAS(from_yaml(kZero2Yaml, {"--dtype", "f16"}), "--dtype f16 contradicts accelerate config",
                   "mixed_precision (bf16)");
  EXPECT_ERROR_HAS(from_yaml(kZero2Yaml, {"--world_size", "4"}),
                   "--world_size 4 contradicts accelerate config", "num_processes (2)");
  // Agreeing flags are fine, and keep their origin.
  EXPECT_EQ(from_yaml(kZero2Yaml, {"--world_size", "2"}).origin_of("world_size"), Origin::flag);
  TrainConfig accumulation = from_yaml(kZero2Yaml, {"--gradient_accumulation_steps", "8"});
  EXPECT_ERROR_HAS(accumulation.resolve(inputs()), "--gradient_accumulation_steps 8 contradicts",
                   "gradient_accumulation_steps = 4");
  // Launched with another number of ranks than num_processes.
  TrainConfig launched = from_yaml(kZero2Yaml);
  EXPECT_ERROR_HAS(launched.resolve(inputs(4)), "num_processes 2 contradicts the 4 ranks");
  // Inline DeepSpeed keys and a DeepSpeed JSON: one of them (as Accelerate).
  const std::string json = write_temp("ds.json", kZero2Json);
  EXPECT_ERROR_HAS(from_yaml(kZero2Yaml, {"--deepspeed_config", json}), "has its settings inline",
                   "--deepspeed_config");
  EXPECT_ERROR_HAS(from_yaml(std::string("deepspeed_config:\n  deepspeed_config_file: ") + json +
                             "\n  zero_stage: 2\ndistributed_type: DEEPSPEED\n"),
                   "deepspeed_config.zero_stage together with deepspeed_config.deepspeed_config_file");
  EXPECT_ERROR_HAS(from_yaml(std::string("deepspeed_config:\n  deepspeed_config_file: ") + json +
                             "\ndistributed_type: DEEPSPEED\nmixed_precision: fp16\n"),
                   "mixed_precision fp16 with a DeepSpeed config file");
}

TEST(AccelerateConfig, DeepSpeedConfigFileBecomesTheDeepSpeedConfig) {
  const std::string json = write_temp("ds_file.json", kZero2Json);
  TrainConfig config =
      from_yaml(std::string("deepspeed_config:\n  deepspeed_config_file: ") + json +
                "\n  zero3_init_flag: false\ndistributed_type: DEEPSPEED\nmixed_precision: 'no'\n"
                "num_processes: 2\n");
  EXPECT_EQ(config.deepspeed_config, json);
  EXPECT_EQ(config.origin_of("deepspeed_config"), Origin::accelerate);
  config.resolve(inputs());
  EXPECT_EQ(config.zero.stage, 2);
  EXPECT_EQ(config.dtype, ComputeDType::bf16);  // from the file's bf16 section
  EXPECT_EQ(config.origin_of("zero_optimization.stage"), Origin::json);
}

}  // namespace
}  // namespace zt::optim
