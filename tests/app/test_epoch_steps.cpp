// Note [Optimizer steps of an epoch] (optim/epoch_steps.h): the step count of an epoch, its windows, and the
// resolved configuration that counts with it, at world sizes 1-4 x accumulation 1-3 x micro-batch sizes 1-4
// over dataset sizes that do and do not divide, against a direct count of what the training loop does.
#include "optim/epoch_steps.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "runtime/check.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

// The loop, one micro-batch at a time: rows are cut into micro-batches of B; a window fills with W·k of them;
// at the end of the epoch the window keeps a multiple of W (every rank the same count) and runs if any are
// left. Returns the windows' micro-batch counts.
std::vector<int64_t> direct_windows(int64_t rows, int64_t batch, int64_t accumulation, int64_t world) {
  std::vector<int64_t> windows;
  int64_t in_window = 0;
  for (int64_t first_row = 0; first_row < rows; first_row += batch) {
    ++in_window;
    const bool last = first_row + batch >= rows;
    if (in_window < world * accumulation && !last) continue;
    in_window -= in_window % world;
    if (in_window > 0) windows.push_back(in_window);
    in_window = 0;
  }
  return windows;
}

TEST(EpochSteps, AgreeWithADirectCountOfTheLoop) {
  int checked = 0, refused = 0;
  for (int64_t world = 1; world <= 4; ++world) {
    for (int64_t accumulation = 1; accumulation <= 3; ++accumulation) {
      for (int64_t batch = 1; batch <= 4; ++batch) {
        for (int64_t rows = 1; rows <= 50; ++rows) {
          SCOPED_TRACE(testing::Message() << "rows " << rows << ", micro-batch " << batch << ", accumulation "
                                          << accumulation << ", world " << world);
          const std::vector<int64_t> windows = direct_windows(rows, batch, accumulation, world);
          if (windows.empty()) {
            EXPECT_ERROR_HAS(epoch_steps(rows, batch, accumulation, world), "--world_size", "leaves ranks",
                             "fewer than the");
            ++refused;
            continue;
          }
          const EpochSteps e = epoch_steps(rows, batch, accumulation, world);
          ASSERT_EQ(e.steps, static_cast<int64_t>(windows.size()));
          int64_t used = 0;
          for (int64_t s = 0; s < e.steps; ++s) {
            EXPECT_EQ(e.window(s), windows[static_cast<size_t>(s)]) << "step " << s;
            EXPECT_EQ(e.window(s) % world, 0) << "step " << s;
            used += e.window(s);
          }
          EXPECT_EQ(e.used_micro_batches(), used);
          EXPECT_EQ(e.micro_batches, (rows + batch - 1) / batch);
          EXPECT_THROW(e.window(e.steps), Error);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(checked, 2000);
}

// The resolved configuration counts with the same rule: steps per epoch, the total, the epochs a step budget
// needs, and the schedules' totals (HF's and DeepSpeed's "auto").
TEST(EpochSteps, TheResolvedConfigurationAndSchedulesUseThem) {
  for (int world = 1; world <= 4; ++world) {
    for (int accumulation = 1; accumulation <= 3; ++accumulation) {
      for (const int64_t rows : {24, 25, 29, 200, 3668}) {
        SCOPED_TRACE(testing::Message()
                     << "rows " << rows << ", accumulation " << accumulation << ", world " << world);
        const int64_t per_epoch = static_cast<int64_t>(direct_windows(rows, 3, accumulation, world).size());
        const std::vector<std::string> flags = {"--world_size",
                                                std::to_string(world),
                                                "--per_device_train_batch_size",
                                                "3",
                                                "--gradient_accumulation_steps",
                                                std::to_string(accumulation),
                                                "--num_train_epochs",
                                                "2"};
        TrainConfig by_epochs = TrainConfig::from_args(flags);
        by_epochs.resolve({.world_size = 1, .hidden_size = 128, .num_train_examples = rows});
        EXPECT_EQ(by_epochs.num_update_steps_per_epoch, per_epoch);
        EXPECT_EQ(by_epochs.num_training_steps, 2 * per_epoch);
        EXPECT_EQ(by_epochs.hf_schedule().num_training_steps, 2 * per_epoch);
        TrainConfig deepspeed = TrainConfig::from_args(flags);
        deepspeed.resolve_with_json_text(
            R"({"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": "auto"}}})", "ds.json",
            {.world_size = 1, .hidden_size = 128, .num_train_examples = rows});
        ASSERT_TRUE(deepspeed.deepspeed_schedule.has_value());
        EXPECT_EQ(deepspeed.deepspeed_schedule->total_num_steps, 2 * per_epoch);

        std::vector<std::string> budget = flags;
        budget.insert(budget.end(), {"--max_train_steps", std::to_string(per_epoch + 1)});
        TrainConfig by_steps = TrainConfig::from_args(budget);
        by_steps.resolve({.world_size = 1, .hidden_size = 128, .num_train_examples = rows});
        EXPECT_EQ(by_steps.num_train_epochs, 2);  // one more step than an epoch holds starts a second
        EXPECT_EQ(by_steps.num_training_steps, per_epoch + 1);
      }
    }
  }
}

// 200 rows of 8 at world 64: 25 micro-batches cannot give 64 ranks one each.
TEST(EpochSteps, AWorldSizeLeavingARankWithoutDataIsRefusedWhenResolving) {
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--world_size", "64"});
  EXPECT_ERROR_HAS(config.resolve({.world_size = 1, .hidden_size = 128, .num_train_examples = 200}),
                   "--world_size 64 leaves ranks without data",
                   "200 training rows make 25 micro-batches of 8", "use at most 25 ranks");
}

}  // namespace
}  // namespace zt::optim
