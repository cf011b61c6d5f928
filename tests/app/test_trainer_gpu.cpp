// train_mrpc's loop on the GPU (f32) against the same loop on the CPU: same init, data order and dropout
// masks (counter-based), so per-step losses and the final parameters agree to f32 accumulation-order
// differences.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/trainer/trainer.h"
#include "model/config.h"
#include "runtime/device.h"
#include "tests/app/narrow_model.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace zt::optim {
namespace {

DebertaConfig small_model() {
  return test_models::narrow_model(64, 16);
}

std::vector<float> host_params(const MrpcTrainer& trainer) {
  const Arena params = trainer.params();
  const Tensor flat = params.flat(DType::f32);
  std::vector<float> out(static_cast<size_t>(flat.numel()));
  copy_tensor(flat, Tensor(out.data(), flat.shape(), DType::f32));
  return out;
}

TEST(TrainerGpu, F32StepsMatchTheCpuLoopWithDropoutOn) {
  ZT_SKIP_WITHOUT_GPU();
  auto run = [](const char* device) {
    TrainConfig config = TrainConfig::from_args(std::vector<std::string>{
        "--per_device_train_batch_size", "8", "--learning_rate", "5e-4", "--max_train_steps", "6", "--dtype",
        "f32", "--device", device, "--seed", "3", "--per_device_eval_batch_size", "32"});
    config.resolve({.world_size = 1, .hidden_size = 64, .num_train_examples = 3668});
    auto trainer = std::make_unique<MrpcTrainer>(config, small_model());
    trainer->train();
    return trainer;
  };
  const auto cpu = run("cpu");
  const auto gpu = run("cuda");
  ASSERT_EQ(cpu->steps().size(), 6u);
  ASSERT_EQ(gpu->steps().size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(gpu->steps()[i].loss, cpu->steps()[i].loss, 1e-4 * std::abs(cpu->steps()[i].loss))
        << "step " << i;
    EXPECT_NEAR(gpu->steps()[i].grad_norm, cpu->steps()[i].grad_norm, 1e-3 * cpu->steps()[i].grad_norm)
        << "step " << i;
  }
  // Adam normalises each update, so tiny gradient differences can move a parameter by up to ~lr; compare with
  // an absolute tolerance of a fraction of the learning rate.
  EXPECT_TRUE(
      test::all_close("parameters after 6 steps", host_params(*gpu), host_params(*cpu), {5e-5, 1e-3}));
}

// The whole bf16 loop on the GPU (training with dropout, evaluation, checkpoints, the fp32 master and its
// bf16 copy): a run interrupted after its step-3 checkpoint and resumed from it continues the uninterrupted
// run. Not bitwise: the GPU embedding backward adds duplicate ids' rows with float atomics (order
// unspecified), so the comparison allows Adam-sized differences (a fraction of lr = 5e-4 per element). A
// resume that lost the bf16 copy, the Adam state or the data position moves losses and parameters by far
// more.
TEST(TrainerGpu, Bf16ResumeFromCheckpointContinuesTheRun) {
  ZT_SKIP_WITHOUT_GPU();
  const auto dir =
      std::filesystem::temp_directory_path() / ("zt_test_trainer_gpu_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto config_with = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--per_device_train_batch_size",
                                     "8",
                                     "--learning_rate",
                                     "5e-4",
                                     "--max_train_steps",
                                     "6",
                                     "--dtype",
                                     "bf16",
                                     "--device",
                                     "cuda",
                                     "--seed",
                                     "5",
                                     "--per_device_eval_batch_size",
                                     "32"};
    args.insert(args.end(), extra.begin(), extra.end());
    TrainConfig config = TrainConfig::from_args(args);
    config.resolve({.world_size = 1, .hidden_size = 64, .num_train_examples = 3668});
    return config;
  };
  MrpcTrainer straight(config_with({}), small_model());
  const std::vector<EpochRecord> epochs = straight.train();
  ASSERT_EQ(straight.steps().size(), 6u);
  ASSERT_FALSE(epochs.empty());
  EXPECT_GT(epochs.back().eval.examples, 0);  // the dev set was evaluated on the GPU in bf16

  MrpcTrainer first_half(config_with({"--output_dir", (dir / "a").string(), "--checkpointing_steps", "3"}),
                         small_model());
  first_half.set_step_callback([](const StepRecord& r) {
    if (r.step == 3) throw std::runtime_error("simulated crash in step 4, after the step-3 checkpoint");
  });
  EXPECT_THROW(first_half.train(), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(dir / "a" / "step_3.h5"));

  MrpcTrainer resumed(config_with({"--resume_from_checkpoint", (dir / "a" / "step_3.h5").string()}),
                      small_model());
  resumed.train();
  ASSERT_EQ(resumed.steps().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(resumed.steps()[i].loss, straight.steps()[i + 3].loss,
                1e-2 * std::abs(straight.steps()[i + 3].loss))
        << "step " << i + 3;
  }
  EXPECT_TRUE(test::all_close("parameters after a resumed run", host_params(resumed), host_params(straight),
                              {1e-3, 1e-2}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zt::optim
