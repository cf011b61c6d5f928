// Resuming with changed settings: every difference from the checkpoint's configuration is found, the ones
// that change the data order or the examples refused, the rest stated (Note [Resuming with changed
// settings]).
#include "app/run/resume_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "runtime/check.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

// describe() of a resolved run with these flags, as a checkpoint stores it.
std::string described(const std::vector<std::string>& flags, int world_size = 1) {
  TrainConfig config = TrainConfig::from_args(flags);
  config.resolve({.world_size = world_size, .hidden_size = 128, .num_train_examples = 3668});
  return config.describe();
}

const std::vector<std::string> kBase = {"--learning_rate",    "1e-4", "--per_device_train_batch_size", "32",
                                        "--num_train_epochs", "3"};

std::vector<std::string> with(std::vector<std::string> flags, const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

TEST(ResumeConfig, ParsesKeysValuesAndTheWorldSize) {
  const auto values = parse_described_config(
      "zerotrain configuration (world_size 4, DeepSpeed config ds.json)\n"
      "optimizer\n"
      "  learning_rate          0.0001         [flag]\n"
      "  max_grad_norm          0 (no clipping) [json gradient_clipping]\n"
      "  max_train_steps        (none)          [default]\n");
  EXPECT_EQ(values.at("world_size"), "4");
  EXPECT_EQ(values.at("learning_rate"), "0.0001");
  EXPECT_EQ(values.at("max_grad_norm"), "0 (no clipping)");
  EXPECT_EQ(values.at("max_train_steps"), "(none)");
  EXPECT_EQ(values.size(), 4u);
}

TEST(ResumeConfig, TheSameRunHasNoChanges) {
  EXPECT_TRUE(compare_resume_config(described(kBase), described(kBase)).empty());
  // Where output goes and how often it is logged or saved give the same numbers.
  const std::string moved =
      described(with(kBase, {"--output_dir", "/tmp/elsewhere", "--checkpointing_steps", "7", "--log_every",
                             "3", "--per_device_eval_batch_size", "5"}));
  EXPECT_TRUE(compare_resume_config(described(kBase), moved).empty());
  // Tracking and the keys of an Accelerate config file do not change the numbers either.
  const std::string tracked =
      described(with(kBase, {"--output_dir", "/tmp/x", "--with_tracking", "--wall_clock_breakdown"}));
  EXPECT_TRUE(compare_resume_config(described(kBase), tracked).empty());
  const std::string stored_with_accelerate =
      "zerotrain configuration (world_size 1)\n"
      "accelerate config (cfg.yaml)\n"
      "  accelerate.machine_rank   0   [accelerate]\n";
  EXPECT_TRUE(
      compare_resume_config(stored_with_accelerate, "zerotrain configuration (world_size 1)\n").empty());
}

TEST(ResumeConfig, ChangedOptimizerAndScheduleSettingsAreStated) {
  const std::string stored = described(kBase);
  const std::string now =
      described({"--learning_rate", "2e-4", "--per_device_train_batch_size", "32", "--num_train_epochs", "4",
                 "--lr_scheduler_type", "cosine", "--num_warmup_steps", "10", "--weight_decay", "0.01",
                 "--max_grad_norm", "0.5", "--max_train_steps", "50"});
  const std::vector<ConfigChange> changes = compare_resume_config(stored, now);
  std::vector<std::string> keys;
  for (const ConfigChange& c : changes) {
    keys.push_back(c.key);
    EXPECT_FALSE(c.refused) << c.key;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"learning_rate", "lr_scheduler_type", "max_grad_norm",
                                            "max_train_steps", "num_train_epochs", "num_warmup_steps",
                                            "weight_decay"}));
  const auto before = parse_described_config(stored), after = parse_described_config(now);
  EXPECT_EQ(changes[0].message(), "continuing with changed learning_rate " + before.at("learning_rate") +
                                      " -> " + after.at("learning_rate") + ", not bitwise the original run");
  const std::vector<std::string> lines = check_resume_config("step_10.h5", stored, now);
  EXPECT_EQ(lines.size(), changes.size());
}

// One rule for the global batch: another world size that changes it (1 -> 2 ranks of 32 examples each) is
// refused like the batch-size change with the same effect.
TEST(ResumeConfig, AWorldSizeThatChangesTheGlobalBatchIsRefusedLikeTheBatchSize) {
  const std::vector<ConfigChange> changes = compare_resume_config(described(kBase, 1), described(kBase, 2));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].key, "train_batch_size");
  EXPECT_EQ(changes[1].key, "world_size");
  EXPECT_TRUE(changes[1].refused);
  EXPECT_ERROR_HAS(check_resume_config("step_10.h5", described(kBase, 1), described(kBase, 2)),
                   "cannot resume from step_10.h5",
                   "world_size 1 -> 2: that changes which examples form each step");
  // The batch-size change with the same global batch: refused alike.
  const std::vector<ConfigChange> batch = compare_resume_config(
      described(kBase, 1), described(with(kBase, {"--per_device_train_batch_size", "64"}), 1));
  ASSERT_FALSE(batch.empty());
  EXPECT_EQ(batch.front().key, "per_device_train_batch_size");
  EXPECT_TRUE(batch.front().refused);
}

// Resharding: world 2 with accumulation 3 and world 3 with accumulation 2 take the same six micro-batches per
// step, so the accumulation change is allowed with the world size; alone it is refused.
TEST(ResumeConfig, AccumulationMayChangeWithTheWorldSizeWhenAStepKeepsItsMicroBatches) {
  const std::string stored = described(with(kBase, {"--gradient_accumulation_steps", "3"}), 2);
  const std::vector<ConfigChange> resharded =
      compare_resume_config(stored, described(with(kBase, {"--gradient_accumulation_steps", "2"}), 3));
  std::vector<std::string> keys;
  for (const ConfigChange& c : resharded) {
    keys.push_back(c.key);
    EXPECT_FALSE(c.refused) << c.key;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"gradient_accumulation_steps", "world_size"}));
  const std::vector<ConfigChange> fewer =
      compare_resume_config(stored, described(with(kBase, {"--gradient_accumulation_steps", "2"}), 2));
  ASSERT_FALSE(fewer.empty());
  EXPECT_EQ(fewer[0].key, "gradient_accumulation_steps");
  EXPECT_TRUE(fewer[0].refused);
}

// Settings that give the same numbers are not compared: collective checks, the memory estimate, overwriting.
TEST(ResumeConfig, RunControlsAreNotCompared) {
  EXPECT_TRUE(compare_resume_config(described(kBase),
                                    described(with(kBase, {"--debug_collectives", "--overwrite_output_dir"})))
                  .empty());
}

TEST(ResumeConfig, ChangesToTheDataOrderOrTheExamplesAreRefused) {
  const std::string stored = described(kBase);
  for (const std::vector<std::string>& change :
       std::vector<std::vector<std::string>>{{"--per_device_train_batch_size", "16"},
                                             {"--gradient_accumulation_steps", "2"},
                                             {"--seed", "7"},
                                             {"--max_length", "64"},
                                             {"--pad_to_max_length"},
                                             {"--train_file", "/data/other_train.tsv"}}) {
    const std::string key = change[0].substr(2);
    std::vector<std::string> flags = kBase;
    if (key == "per_device_train_batch_size") flags.resize(2);
    flags.insert(flags.end(), change.begin(), change.end());
    const std::string now = described(flags);
    const std::vector<ConfigChange> changes = compare_resume_config(stored, now);
    bool found = false;
    for (const ConfigChange& c : changes) {
      if (c.key == key) found = c.refused;
    }
    EXPECT_TRUE(found) << key;
    try {
      check_resume_config("out/step_10.h5", stored, now);
      ADD_FAILURE() << "resuming with changed " << key << " was allowed";
    } catch (const Error& e) {
      const std::string message = e.message();
      EXPECT_NE(message.find("cannot resume from out/step_10.h5"), std::string::npos) << message;
      EXPECT_NE(message.find("\n  " + key + " "), std::string::npos) << message;
      EXPECT_NE(message.find("resume with " + key), std::string::npos) << message;
    }
  }
}

}  // namespace
}  // namespace zt::optim
