// The disk tier's keys (app/config/train_config_aio.cpp, Note [Disk tier keys]): DeepSpeed's aio block, the
// nvme keys of the offload sections and --host_memory_limit, each honoured or refused with a reason.
// (Training through the disk tier: tests/app/test_zero_training.cpp, ZeroDiskTierTraining.)
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "runtime/check.h"
#include "tests/app/config_test_support.h"

namespace zt::optim {
namespace {

using config_test::line_of;
using config_test::resolved;

TrainConfig resolve_json(const std::string& json, const std::vector<std::string>& flags = {}) {
  return resolved(flags, json);
}

// Expects resolving to fail with a message holding every part.
void expect_error(const std::vector<std::string>& flags, const std::string& json,
                  std::initializer_list<std::string> parts) {
  try {
    resolved(flags, json);
    ADD_FAILURE() << "expected an error for " << json;
  } catch (const Error& e) {
    for (const std::string& part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos)
          << "'" << part << "' missing from: " << e.message();
  }
}

const std::string kNvmeOptimizer = R"({"zero_optimization": {"stage": 3, "offload_optimizer": {
    "device": "nvme", "nvme_path": "/local_nvme", "buffer_count": 3, "pipeline_read": true,
    "pipeline_write": true}}, "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2,
    "single_submit": true, "overlap_events": false}})";

// offload_param device nvme: the stage-3 parameter shard on disk (with offload_optimizer cpu or nvme, as
// DeepSpeed). buffer_size and max_in_cpu are read but change nothing, which describe() says.
TEST(TrainConfigDiskTier, ParametersOnDiskAtStage3) {
  for (const std::string optimizer : {"cpu", "nvme"}) {
    const TrainConfig c =
        resolve_json(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": ")" + optimizer +
                     R"(", "nvme_path": "/n"},
        "offload_param": {"device": "nvme", "nvme_path": "/p", "buffer_count": 3, "pin_memory": true,
                          "buffer_size": 1000, "max_in_cpu": 0}}})");
    const OffloadSettings& param = c.zero.offload_param;
    EXPECT_TRUE(param.enabled) << optimizer;
    EXPECT_TRUE(param.pin_memory) << optimizer;
    EXPECT_TRUE(param.nvme.enabled) << optimizer;
    EXPECT_EQ(param.nvme.nvme_path, "/p");
    EXPECT_EQ(param.nvme.buffer_count, 3);
    EXPECT_EQ(c.zero.offload_optimizer.nvme.enabled, optimizer == "nvme");
    const std::string text = c.describe();
    EXPECT_NE(line_of(text, "zero_optimization.offload_param.device").find("nvme"), std::string::npos)
        << text;
    EXPECT_NE(line_of(text, "zero_optimization.offload_param.nvme_path").find("/p"), std::string::npos)
        << text;
    EXPECT_NE(line_of(text, "zero_optimization.offload_param.buffer_size").find("none"), std::string::npos)
        << text;
    EXPECT_NE(line_of(text, "zero_optimization.offload_param.max_in_cpu").find("none"), std::string::npos)
        << text;
  }
  // DeepSpeed's default buffer_count for parameters.
  EXPECT_EQ(resolve_json(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                   "offload_param": {"device": "nvme", "nvme_path": "/p"}}})")
                .zero.offload_param.nvme.buffer_count,
            5);
}

TEST(TrainConfigDiskTier, ParametersOnDiskRefusedWhereTheyCannotRun) {
  // The CPU update writes the shard: offload_optimizer is needed.
  expect_error(
      {}, R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/n"}}})",
      {"zero_optimization.offload_param.device nvme needs zero_optimization.offload_optimizer.device "
       "cpu or nvme"});
  expect_error({}, R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                   "offload_param": {"device": "nvme"}}})",
               {"zero_optimization.offload_param.nvme_path is required with device nvme"});
  expect_error({}, R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                   "offload_param": {"device": "nvme", "nvme_path": "/n", "buffer_count": 0}}})",
               {"zero_optimization.offload_param.buffer_count", "got 0"});
}

TEST(TrainConfigDiskTier, EveryKeyReachesTheSettings) {
  const TrainConfig c = resolve_json(kNvmeOptimizer);
  const NvmeOffloadSettings& nvme = c.zero.offload_optimizer.nvme;
  EXPECT_TRUE(nvme.enabled);
  EXPECT_EQ(nvme.nvme_path, "/local_nvme");
  EXPECT_EQ(nvme.buffer_count, 3);
  EXPECT_TRUE(nvme.pipeline_read);
  EXPECT_TRUE(nvme.pipeline_write);
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.queue_depth, 16);
  EXPECT_EQ(c.aio.thread_count, 2);
  EXPECT_TRUE(c.aio.single_submit);
  EXPECT_FALSE(c.aio.overlap_events);
  const std::string text = c.describe();
  EXPECT_NE(line_of(text, "zero_optimization.offload_optimizer.device").find("nvme"), std::string::npos)
      << text;
  EXPECT_NE(line_of(text, "zero_optimization.offload_optimizer.nvme_path").find("/local_nvme"),
            std::string::npos)
      << text;
  EXPECT_NE(line_of(text, "aio.queue_depth").find("16"), std::string::npos) << text;
  EXPECT_EQ(line_of(text, "aio.queue_depth").find("effective"), std::string::npos) << text;

  EXPECT_TRUE(c.zero.offload_optimizer.enabled);  // offloaded, through host buffers to disk
}

TEST(TrainConfigDiskTier, DeepSpeedDefaults) {
  const TrainConfig c = resolve_json(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/a"},
      "offload_param": {"device": "cpu", "nvme_path": "/b"}}})");
  EXPECT_EQ(c.zero.offload_optimizer.nvme.buffer_count, 4);
  EXPECT_FALSE(c.zero.offload_optimizer.nvme.pipeline_read);
  EXPECT_FALSE(c.zero.offload_optimizer.nvme.pipeline_write);
  EXPECT_EQ(c.zero.offload_param.nvme.buffer_count, 5);
  EXPECT_EQ(c.zero.offload_param.nvme.buffer_size, 100'000'000);
  EXPECT_FALSE(c.zero.offload_param.nvme.enabled);
  EXPECT_EQ(c.aio.block_size, 1 << 20);
  EXPECT_EQ(c.aio.queue_depth, 8);
  EXPECT_EQ(c.aio.thread_count, 1);
  EXPECT_FALSE(c.aio.single_submit);
  EXPECT_TRUE(c.aio.overlap_events);
}

TEST(TrainConfigDiskTier, BadValuesAreErrorsNamingTheKey) {
  const auto optimizer = [](const std::string& keys) {
    return R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme")" + keys + "}}}";
  };
  expect_error({}, optimizer(""),
               {"zero_optimization.offload_optimizer.nvme_path is required with device nvme"});
  expect_error(
      {},
      optimizer(R"(, "nvme_path": "/n", "buffer_count": 2, "pipeline_read": true, "pipeline_write": true)"),
      {"zero_optimization.offload_optimizer.buffer_count = 2 is too few", "needs 3"});
  expect_error({}, optimizer(R"(, "nvme_path": "/n", "buffer_count": 0)"),
               {"zero_optimization.offload_optimizer.buffer_count", "got 0"});
  expect_error({}, optimizer(R"(, "nvme_path": 5)"),
               {"zero_optimization.offload_optimizer.nvme_path", "a string"});
  // pipeline_* are offload_optimizer keys (DeepSpeed has none for parameters); fast_init exists but is not
  // implemented.
  expect_error({},
               R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                   "offload_param": {"device": "cpu", "pipeline_read": true}}})",
               {"unknown key 'zero_optimization.offload_param.pipeline_read'"});
  expect_error({}, optimizer(R"(, "nvme_path": "/n", "fast_init": true)"),
               {"zero_optimization.offload_optimizer.fast_init true", "not implemented"});
  const std::string nvme = optimizer(R"(, "nvme_path": "/n")");
  const auto with_aio = [&](const std::string& aio) {
    return nvme.substr(0, nvme.size() - 1) + R"(, "aio": )" + aio + "}";
  };
  expect_error({}, with_aio(R"({"block_size": 1000000})"),
               {"aio.block_size must be a multiple of 4096", "got 1000000"});
  expect_error({}, with_aio(R"({"block_size": 1024})"), {"aio.block_size", "got 1024"});
  expect_error({}, with_aio(R"({"queue_depth": 0})"), {"aio.queue_depth", "got 0"});
  expect_error({}, with_aio(R"({"thread_count": 65})"), {"aio.thread_count", "got 65"});
  expect_error({}, with_aio(R"({"thread_count": 2, "intra_op_parallelism": 2})"),
               {"aio.thread_count and aio.intra_op_parallelism"});
  expect_error({}, with_aio(R"({"use_gds": true})"),
               {"aio.use_gds true: GPUDirect Storage is not supported"});
  expect_error({}, with_aio(R"({"queue_dept": 4})"), {"unknown key 'aio.queue_dept'", "queue_depth"});
  // The newer name of thread_count, and use_gds false, are accepted.
  const TrainConfig newer = resolve_json(with_aio(R"({"intra_op_parallelism": 4, "use_gds": false})"));
  EXPECT_EQ(newer.aio.thread_count, 4);
  EXPECT_NE(line_of(newer.describe(), "aio.thread_count").find("aio.intra_op_parallelism"), std::string::npos)
      << newer.describe();
}

// zero_optimization.sub_group_size (DeepSpeed reads it at stage 3) is honoured wherever the optimizer state
// is offloaded: the sub-groups the CPU AdamW updates and, with nvme, the disk tier's records. Without offload
// it changes nothing, said. At least 1 element.
TEST(TrainConfigDiskTier, SubGroupSizeCutsTheOffloadedStateAndSaysWhere) {
  const auto zero = [](const std::string& device, const std::string& extra) {
    return R"({"zero_optimization": {"stage": 2, "sub_group_size": 2e7)" +
           (device.empty() ? std::string()
                           : R"(, "offload_optimizer": {"device": ")" + device + "\"" + extra + "}") +
           "}}";
  };
  const TrainConfig nvme = resolve_json(zero("nvme", R"(, "nvme_path": "/n")"));
  EXPECT_EQ(nvme.zero.sub_group_size, 20'000'000);
  const std::string key = "zero_optimization.sub_group_size";
  EXPECT_NE(line_of(nvme.describe(), key).find("the disk tier's records"), std::string::npos)
      << nvme.describe();
  const TrainConfig cpu = resolve_json(zero("cpu", ""));
  EXPECT_NE(line_of(cpu.describe(), key).find("no change in host memory"), std::string::npos)
      << cpu.describe();
  const TrainConfig none = resolve_json(zero("", ""));
  EXPECT_NE(line_of(none.describe(), key).find("none without offload_optimizer"), std::string::npos)
      << none.describe();
  expect_error({}, R"({"zero_optimization": {"stage": 2, "sub_group_size": 0}})",
               {"zero_optimization.sub_group_size", "at least 1"});
}

// DeepSpeed ignores disk-tier keys without device nvme; so do we, and describe() says that they do nothing.
TEST(TrainConfigDiskTier, KeysWithoutNvmeChangeNothingAndSaySo) {
  const TrainConfig c =
      resolved({}, R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "none",
      "nvme_path": "/n", "buffer_count": 8}}, "aio": {"queue_depth": 32}})");
  EXPECT_FALSE(c.zero.offload_optimizer.nvme.enabled);
  const std::string text = c.describe();
  EXPECT_NE(line_of(text, "zero_optimization.offload_optimizer.nvme_path")
                .find("effective: none; the device is not nvme"),
            std::string::npos)
      << text;
  EXPECT_NE(line_of(text, "aio.queue_depth").find("effective: none; nothing is offloaded to disk"),
            std::string::npos)
      << text;
  // Keys the JSON did not give stay out of the description.
  EXPECT_EQ(line_of(text, "zero_optimization.offload_optimizer.pipeline_read"), "") << text;
  // And a config without any disk tier prints no aio group.
  EXPECT_EQ(resolved({}, "{}").describe().find("aio."), std::string::npos);
}

TEST(TrainConfigDiskTier, HostMemoryLimit) {
  TrainConfig flags = TrainConfig::from_args(std::vector<std::string>{"--host_memory_limit", "32GiB"});
  EXPECT_EQ(flags.host_memory_limit, size_t{32} << 30);
  EXPECT_NE(TrainConfig::help_text().find("--host_memory_limit SIZE"), std::string::npos);
  try {
    TrainConfig::from_args(std::vector<std::string>{"--host_memory_limit", "32"});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--host_memory_limit 32 is below 1 MiB: a unit is missing? (e.g. 32GiB)"),
              std::string::npos)
        << e.message();
  }
  EXPECT_THROW(TrainConfig::from_args(std::vector<std::string>{"--host_memory_limit", "lots"}), Error);
  // A cap on offloaded state needs something offloaded.
  expect_error({"--host_memory_limit", "32GiB"}, "{}",
               {"--host_memory_limit 32 GiB", "nothing is offloaded"});
  const TrainConfig capped = resolve_json(kNvmeOptimizer, {"--host_memory_limit", "32GiB"});
  EXPECT_EQ(capped.host_memory_limit, size_t{32} << 30);
  EXPECT_NE(line_of(capped.describe(), "host_memory_limit").find("32 GiB"), std::string::npos);
}

}  // namespace
}  // namespace zt::optim
