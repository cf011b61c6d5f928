// The trainer as one rank of a group of processes — what train_mrpc does under mpirun, one process per GPU
// with NCCL — emulated on the CPU: W trainers, each given one communicator of an in-process group and run on
// its own thread, stand for W processes. They must train exactly what one trainer with W in-process ranks
// trains (same batches and dropout masks per rank, the same reductions in the same order: bitwise), and
// process 0 alone writes the run's files while every process writes its own checkpoint shard.
#include <gtest/gtest.h>

#include <exception>
#include <filesystem>
#include <string>
#include <thread>

#include "app/run/sharded_checkpoint.h"
#include "runtime/communicator.h"
#include "tests/app/zero_training_harness.h"

namespace zt::optim {
namespace {

using namespace zero_harness;  // NOLINT: the harness is this test's vocabulary

// Runs `spec` as spec.world single-rank trainers over one in-process group; returns process 0's result.
RunResult run_as_processes(const RunSpec& spec) {
  auto comms = make_in_process_group(spec.world, {.timeout = std::chrono::seconds(120)});
  std::vector<RunResult> results(static_cast<size_t>(spec.world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(spec.world));
  std::vector<std::thread> processes;
  for (int r = 0; r < spec.world; ++r) {
    processes.emplace_back([&, r] {
      try {
        Communicator& comm = *comms[static_cast<size_t>(r)];
        MrpcTrainer trainer(config_for(spec), tiny_model(), std::move(comms[static_cast<size_t>(r)]));
        try {  // a failing process aborts the group, so the others fail instead of waiting for it
          trainer.train();
          RunResult& out = results[static_cast<size_t>(r)];
          for (const StepRecord& s : trainer.steps()) {
            out.losses.push_back(s.loss);
            out.grad_norms.push_back(s.grad_norm);
          }
          const Arena params = trainer.params();  // collective: every process joins the gathers
          const Tensor flat = params.flat(DType::f32);
          out.weights.assign(flat.data_as<float>(), flat.data_as<float>() + flat.numel());
        } catch (const std::exception& e) {
          comm.abort(e.what());  // the trainer, which owns it, is alive until this scope ends
          throw;
        }
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : processes) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  // Every process saw every micro-batch's loss (exchanged after each step).
  for (const RunResult& r : results) EXPECT_EQ(r.losses, results.front().losses);
  return results.front();
}

class ProcessGroupTraining : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ProcessGroupTraining, TrainsBitwiseLikeInProcessRanks) {
  const auto [world, stage] = GetParam();
  const RunSpec spec{.stage = stage, .world = world, .steps = 8};
  const RunResult threads = run(spec);
  const RunResult processes = run_as_processes(spec);
  ASSERT_EQ(processes.losses.size(), 8u);
  EXPECT_TRUE(bitwise_equal(processes, threads)) << "world " << world << " stage " << stage;
}

INSTANTIATE_TEST_SUITE_P(WorldsAndStages, ProcessGroupTraining,
                         ::testing::Values(std::tuple{2, 0}, std::tuple{2, 3}, std::tuple{3, 2}),
                         [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_stage" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The model file a run ends with holds exactly the trained parameters (written tensor by tensor as the
// engine gathers them, with no whole-model host copy): from a process group and from in-process ranks with
// the stage-3 state and parameters offloaded.
TEST(ProcessGroupTrainingFiles, TheModelFileHoldsTheTrainedParameters) {
  const std::string processes = temp_dir("model_file_processes");
  expect_model_file_holds(processes + "/model.h5",
                          run_as_processes({.stage = 3, .world = 2, .steps = 4, .output_dir = processes}));
  const std::string threads = temp_dir("model_file_offload");
  expect_model_file_holds(threads + "/model.h5", run({.stage = 3,
                                                      .world = 2,
                                                      .steps = 4,
                                                      .output_dir = threads,
                                                      .offload_optimizer = true,
                                                      .offload_param = true}));
}

TEST(ProcessGroupTrainingFiles, ProcessZeroWritesTheRunsFilesEachProcessItsShard) {
  const std::string dir = temp_dir("process_group_files");
  run_as_processes({.stage = 2, .world = 2, .steps = 4, .output_dir = dir, .checkpoint_every = 4});
  EXPECT_TRUE(std::filesystem::exists(dir + "/model.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/metrics.jsonl"));
  const std::string checkpoint = sharded_checkpoint_path(dir, 4);
  EXPECT_TRUE(std::filesystem::exists(checkpoint + "/rank_0_of_2.h5"));
  EXPECT_TRUE(std::filesystem::exists(checkpoint + "/rank_1_of_2.h5"));
  // A resume of that checkpoint by in-process ranks continues from it.
  const RunResult resumed = run({.stage = 2, .world = 2, .steps = 6, .resume = checkpoint});
  EXPECT_EQ(resumed.losses.size(), 2u);
  std::filesystem::remove_all(dir);
}

// Processes launched with different settings (here rank 1 with another learning rate) are refused on every
// process before training, naming the rank that differs.
TEST(ProcessGroupTrainingConfig, ProcessesWithDifferentSettingsAreRefused) {
  auto comms = make_in_process_group(2, {.timeout = std::chrono::seconds(60)});
  std::vector<std::string> errors(2);
  std::vector<std::thread> processes;
  for (int r = 0; r < 2; ++r) {
    processes.emplace_back([&, r] {
      TrainConfig config = config_for({.stage = 1, .world = 2, .steps = 2});
      if (r == 1) config.learning_rate *= 2;
      try {
        MrpcTrainer trainer(config, tiny_model(), std::move(comms[static_cast<size_t>(r)]));
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (std::thread& t : processes) t.join();
  for (const std::string& e : errors)
    EXPECT_NE(e.find("ranks 1 were started with settings other than rank 0's"), std::string::npos) << e;
}

}  // namespace
}  // namespace zt::optim
