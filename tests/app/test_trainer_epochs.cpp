// The training loop runs the optimizer steps its configuration planned (Note [Optimizer steps of an epoch],
// optim/epoch_steps.h): at world sizes 1-4 (in-process ranks) x accumulation 1-3 over train sets whose
// micro-batches do and do not divide among the ranks, every epoch ends after the planned steps, the
// linear schedule's last step is the planned last, and a step budget that ends mid-epoch is met exactly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "app/trainer/trainer.h"
#include "data/glue_tsv.h"
#include "model/config.h"
#include "optim/epoch_steps.h"
#include "runtime/check.h"
#include "tests/app/narrow_model.h"

namespace zt::optim {
namespace {

DebertaConfig tiny_model() {
  DebertaConfig c = test_models::narrow_model(32, 16);
  c.num_hidden_layers = 1;
  return c;
}

// The first `rows` rows of `path` as a file of their own (header kept).
std::string first_rows(const std::string& path, int rows, const std::string& name) {
  const std::string out = testing::TempDir() + "zt_" + std::to_string(::getpid()) + "_" + name + ".tsv";
  std::ifstream in(path);
  std::ofstream file(out);
  std::string line;
  for (int i = 0; i <= rows && std::getline(in, line); ++i) file << line << '\n';
  return out;
}

// Optimizer steps of one epoch, counted as the loop deals micro-batches out: windows of W·k, the last cut to
// a multiple of W.
int64_t direct_steps(int64_t rows, int64_t batch, int64_t accumulation, int64_t world) {
  int64_t steps = 0, in_window = 0;
  for (int64_t first_row = 0; first_row < rows; first_row += batch) {
    ++in_window;
    if (in_window < world * accumulation && first_row + batch < rows) continue;
    if (in_window - in_window % world > 0) ++steps;
    in_window = 0;
  }
  return steps;
}

struct Case {
  int rows;
  int world;
  int accumulation;
  bool budget;  // --max_train_steps one step past the first epoch instead of 2 epochs
};

std::vector<std::string> flags_of(const Case& c, const std::string& dev, int64_t max_steps) {
  std::vector<std::string> flags = {"--world_size",
                                    std::to_string(c.world),
                                    "--per_device_train_batch_size",
                                    "2",
                                    "--per_device_eval_batch_size",
                                    "8",
                                    "--gradient_accumulation_steps",
                                    std::to_string(c.accumulation),
                                    "--learning_rate",
                                    "1e-4",
                                    "--max_length",
                                    "32",
                                    "--validation_file",
                                    dev,
                                    "--test_file",
                                    dev,
                                    "--seed",
                                    "3"};
  if (max_steps > 0) {
    flags.insert(flags.end(), {"--max_train_steps", std::to_string(max_steps)});
  } else {
    flags.insert(flags.end(), {"--num_train_epochs", "2"});
  }
  return flags;
}

TEST(TrainerEpochs, EveryEpochRunsThePlannedStepsAtEveryWorldSizeAndAccumulation) {
  const std::string data = ZT_DATA_DIR;
  const std::string dev = first_rows(data + "/dev.tsv", 8, "dev8");
  const data::GlueDataset all_rows = data::read_glue_mrpc_tsv(data + "/train.tsv");
  // 24 rows: 12 micro-batches, divisible by every W and k here; 13: 7, by none but 1; 10: 5; 5: 3 (world 4
  // is refused).
  for (const int rows : {24, 13, 10, 5}) {
    for (int world = 1; world <= 4; ++world) {
      for (int accumulation = 1; accumulation <= 3; ++accumulation) {
        for (const bool budget : {false, true}) {
          const Case c{rows, world, accumulation, budget};
          SCOPED_TRACE(testing::Message() << rows << " rows, world " << world << ", accumulation "
                                          << accumulation << (budget ? ", step budget" : ", 2 epochs"));
          const int64_t per_epoch = direct_steps(rows, 2, accumulation, world);
          TrainConfig config = TrainConfig::from_args(flags_of(c, dev, budget ? per_epoch + 1 : 0));
          if (per_epoch == 0) {
            EXPECT_THROW(config.resolve({.world_size = 1, .hidden_size = 32, .num_train_examples = rows}),
                         Error);
            continue;
          }
          config.resolve({.world_size = 1, .hidden_size = 32, .num_train_examples = rows});
          const int64_t total = budget ? per_epoch + 1 : 2 * per_epoch;
          ASSERT_EQ(config.num_update_steps_per_epoch, per_epoch);
          ASSERT_EQ(config.num_training_steps, total);
          ASSERT_EQ(config.num_train_epochs, 2);

          MrpcTrainer trainer(config, tiny_model());
          data::GlueDataset train = all_rows;
          train.rows.resize(static_cast<size_t>(rows));
          trainer.set_train_rows(std::move(train));
          const std::vector<EpochRecord> epochs = trainer.train();
          ASSERT_EQ(epochs.size(), 2u);
          EXPECT_EQ(epochs[0].optimizer_steps, per_epoch);
          EXPECT_EQ(epochs[1].optimizer_steps, total);
          ASSERT_EQ(static_cast<int64_t>(trainer.steps().size()), total);
          // The linear schedule decays to 0 at the planned total: its last step is the planned last one.
          const LrSchedule schedule = config.hf_schedule();
          EXPECT_EQ(trainer.steps().back().lr, schedule.lr_at(total - 1));
          EXPECT_GT(trainer.steps().back().lr, 0.0);
          EXPECT_EQ(schedule.lr_at(total), 0.0);
        }
      }
    }
  }
  std::filesystem::remove(dev);
}

}  // namespace
}  // namespace zt::optim
