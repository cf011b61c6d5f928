// The bf16 training loop on the GPU against PyTorch + HF under torch.autocast(bfloat16) on the same 50 real
// MRPC batches (tests/fixtures/deberta_mrpc_train50_bf16.h5, tools/golden/make_mrpc_training_fixture.py
// --dtype bf16): golden init, dropout 0, AdamW lr 2e-4 with 5 warmup steps, clipping at 1.0.
//
// Tolerance. The two runs round differently (we store every activation in bf16; autocast keeps LayerNorm
// outputs and residual sums in fp32), so losses drift apart by bf16 noise, not by a formula error. Stated
// bounds: every step's loss within 5 % of PyTorch's, the mean relative difference over 50 steps within 1.5 %,
// and the curves must agree on the trend (mean of the last 10 steps below the first 10 in both). A wrong
// gradient, a missing update of the bf16 copy or a broken schedule moves the curve by far more.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "app/trainer/trainer.h"
#include "data/batcher.h"
#include "data/glue_tsv.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/golden_init.h"
#include "runtime/device.h"
#include "tests/support/fixtures.h"
#include "tests/support/gpu.h"

namespace zt::optim {
namespace {

// Step `key`'s batch as the fixture recorded it.
data::Batch fixture_batch(const test::Fixture& f, const std::string& key) {
  data::Batch b;
  b.input_ids = f.read_i64("input_ids/" + key);
  b.attention_mask = f.read_i64("attention_mask/" + key);
  b.labels = f.read_i64("labels/" + key);
  b.batch_size = static_cast<int64_t>(b.labels.size());
  b.seq_len = static_cast<int64_t>(b.input_ids.size()) / b.batch_size;
  return b;
}

TEST(TrainerBf16Gpu, FiftyStepLossCurveMatchesPyTorchAutocast) {
  ZT_SKIP_WITHOUT_GPU();
  test::Fixture f("deberta_mrpc_train50_bf16.h5");
  const DebertaConfig model = parse_deberta_config(f.attr_str("config_json"));
  TrainConfig config = TrainConfig::from_args(
      std::vector<std::string>{"--learning_rate", "2e-4", "--weight_decay", "0.01", "--num_warmup_steps", "5",
                               "--max_train_steps", "50", "--per_device_train_batch_size", "8",
                               "--max_grad_norm", "1.0", "--device", "cuda", "--dtype", "bf16"});
  config.resolve({.world_size = 1, .hidden_size = model.hidden_size, .num_train_examples = 3668});
  MrpcTrainer trainer(config, model);
  Arena host("golden init", trainer.table().layout(DType::f32));
  for (const ParameterInfo& p : trainer.table().entries()) {
    const Tensor t = host.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
  trainer.load_parameters(host);

  const std::vector<float> ref_loss = f.read_f32("loss");
  ASSERT_EQ(ref_loss.size(), 50u);
  std::vector<double> ours;
  double worst = 0, sum_rel = 0;
  for (int s = 0; s < 50; ++s) {
    const std::string key = std::to_string(s);
    std::vector<data::Batch> window{fixture_batch(f, key)};
    const StepRecord r = trainer.train_step(window);
    ours.push_back(r.loss);
    const double rel = std::abs(r.loss - ref_loss[s]) / std::abs(ref_loss[s]);
    worst = std::max(worst, rel);
    sum_rel += rel;
    EXPECT_LE(rel, 0.05) << "step " << s << ": loss " << r.loss << " vs PyTorch autocast " << ref_loss[s];
  }
  const double mean_rel = sum_rel / 50;
  EXPECT_LE(mean_rel, 0.015);
  auto mean = [](auto first, auto last) {
    double t = 0;
    for (auto it = first; it != last; ++it) t += *it;
    return t / static_cast<double>(last - first);
  };
  EXPECT_LT(mean(ours.end() - 10, ours.end()), mean(ours.begin(), ours.begin() + 10));
  EXPECT_LT(mean(ref_loss.end() - 10, ref_loss.end()), mean(ref_loss.begin(), ref_loss.begin() + 10));
  std::printf(
      "bf16 50-step loss vs PyTorch autocast: worst step rel diff %.4f, mean %.4f; first/last-10 means "
      "ours %.4f/%.4f, PyTorch %.4f/%.4f\n",
      worst, mean_rel, mean(ours.begin(), ours.begin() + 10), mean(ours.end() - 10, ours.end()),
      mean(ref_loss.begin(), ref_loss.begin() + 10), mean(ref_loss.end() - 10, ref_loss.end()));
}

// fp16 with DeepSpeed's loss scaling: a scale so large that the scaled gradients overflow f16 must skip the
// step (no parameter changes, the norm reported as inf, the schedule not advanced) and halve the scale on
// each overflow (hysteresis 1).
TEST(TrainerFp16Gpu, OverflowingStepsAreSkippedAndHalveTheScale) {
  ZT_SKIP_WITHOUT_GPU();
  test::Fixture f("deberta_mrpc_train50_bf16.h5");
  const DebertaConfig model = parse_deberta_config(f.attr_str("config_json"));
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{
      "--learning_rate", "2e-4", "--max_train_steps", "50", "--per_device_train_batch_size", "8", "--device",
      "cuda", "--dtype", "f16", "--lr_scheduler_type", "constant"});
  config.resolve({.world_size = 1, .hidden_size = model.hidden_size, .num_train_examples = 3668});
  config.fp16.initial_scale_power = 60;  // 2^60 * loss: f16 gradients overflow for certain
  config.fp16.hysteresis = 1;
  MrpcTrainer trainer(config, model);
  auto master = [&] {
    const Arena params = trainer.params();
    const Tensor flat = params.flat(DType::f32);
    std::vector<float> out(static_cast<size_t>(flat.numel()));
    copy_tensor(flat, Tensor(out.data(), flat.shape(), DType::f32));
    return out;
  };
  const std::vector<float> before = master();
  for (int s = 0; s < 3; ++s) {
    const std::string key = std::to_string(s);
    std::vector<data::Batch> window{fixture_batch(f, key)};
    const StepRecord r = trainer.train_step(window);
    EXPECT_TRUE(r.skipped) << "step " << s;
    EXPECT_TRUE(std::isinf(r.grad_norm)) << "step " << s;
    EXPECT_EQ(r.loss_scale, std::ldexp(1.0, 60 - s)) << "step " << s;
    EXPECT_TRUE(std::isfinite(r.loss)) << "the forward itself does not overflow";
  }
  EXPECT_EQ(master(), before) << "a skipped step must not change the parameters";
}

}  // namespace
}  // namespace zt::optim
