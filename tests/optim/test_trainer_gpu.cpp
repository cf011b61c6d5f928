// train_mrpc's loop on the GPU (f32) against the same loop on the CPU: same init, data order and dropout
// masks (counter-based), so per-step losses and the final parameters agree to f32 accumulation-order
// differences.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/config.h"
#include "optim/trainer.h"
#include "runtime/device.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace zt::optim {
namespace {

DebertaConfig small_model() {
  DebertaConfig c = deberta_small_cpu_config();
  c.hidden_size = 64;
  c.num_attention_heads = 2;
  c.attention_head_size = 32;
  c.intermediate_size = 128;
  c.pooler_hidden_size = 64;
  c.embedding_size = 64;
  c.position_buckets = 16;
  return c;
}

std::vector<float> host_params(const MrpcTrainer& trainer) {
  const Tensor flat = trainer.params().flat(DType::f32);
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

}  // namespace
}  // namespace zt::optim
