// The MRPC training loop: a resumed run continues bitwise identically, and the loss curve on real MRPC
// batches matches PyTorch + HF (tests/fixtures/deberta_mrpc_train50.h5,
// tools/golden/make_mrpc_training_fixture.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "app/trainer/trainer.h"
#include "data/batcher.h"
#include "data/glue_tsv.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/golden_init.h"
#include "model/init.h"
#include "model/model_file.h"
#include "tests/app/narrow_model.h"
#include "tests/support/fixtures.h"

namespace zt::optim {
namespace {

DebertaConfig small_model() {
  return test_models::narrow_model(32, 16);
}

TrainConfig resolved(std::vector<std::string> args, int64_t train_rows = 3668) {
  TrainConfig config = TrainConfig::from_args(args);
  config.resolve({.world_size = 1, .hidden_size = 32, .num_train_examples = train_rows});
  return config;
}

// Batch 4, accumulation 2, lr 1e-3, f32, seed 7, `steps` optimizer steps: the runs the tests below compare.
std::vector<std::string> small_run_args(int steps) {
  return {"--per_device_train_batch_size",
          "4",
          "--gradient_accumulation_steps",
          "2",
          "--learning_rate",
          "1e-3",
          "--max_train_steps",
          std::to_string(steps),
          "--dtype",
          "f32",
          "--seed",
          "7"};
}

// `common` then `extra`, resolved.
TrainConfig resolved_with(const std::vector<std::string>& common, const std::vector<std::string>& extra) {
  std::vector<std::string> args = common;
  args.insert(args.end(), extra.begin(), extra.end());
  return resolved(args);
}

std::string temp_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("zt_test_trainer_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

bool same_bytes(const Arena& a, const Arena& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Dropout on (the small config keeps 0.1 everywhere) and gradient accumulation 2: a run stopped at step 3 and
// resumed from its checkpoint ends with exactly the parameters of an uninterrupted 6-step run.
TEST(Trainer, ResumeFromCheckpointIsBitwiseIdentical) {
  const std::string dir = temp_dir("resume");
  std::vector<std::string> common = small_run_args(6);
  common.insert(common.end(), {"--per_device_eval_batch_size", "64"});
  auto with = [&](const std::vector<std::string>& extra) { return resolved_with(common, extra); };

  MrpcTrainer straight(with({}), small_model());
  straight.train();
  ASSERT_EQ(straight.steps().size(), 6u);

  MrpcTrainer first_half(with({"--output_dir", dir + "/a", "--checkpointing_steps", "3"}), small_model());
  first_half.set_step_callback([](const StepRecord& r) {
    if (r.step == 3) throw std::runtime_error("simulated crash in step 4, after the step-3 checkpoint");
  });
  EXPECT_THROW(first_half.train(), std::runtime_error);
  ASSERT_TRUE(std::filesystem::exists(dir + "/a/step_3.h5"));

  MrpcTrainer resumed(with({"--resume_from_checkpoint", dir + "/a/step_3.h5"}), small_model());
  resumed.train();
  ASSERT_EQ(resumed.steps().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed.steps()[i].step, straight.steps()[i + 3].step);
    EXPECT_EQ(resumed.steps()[i].loss, straight.steps()[i + 3].loss) << "step " << i + 3;
    EXPECT_EQ(resumed.steps()[i].grad_norm, straight.steps()[i + 3].grad_norm) << "step " << i + 3;
  }
  EXPECT_TRUE(same_bytes(resumed.params(), straight.params()));
  // A run that trained differently is caught by the same comparison (the check can fail).
  MrpcTrainer other_seed(
      resolved({"--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "2", "--learning_rate",
                "1e-3", "--max_train_steps", "6", "--dtype", "f32", "--seed", "8"}),
      small_model());
  other_seed.train();
  EXPECT_FALSE(same_bytes(other_seed.params(), straight.params()));
  std::filesystem::remove_all(dir);
}

// --gradient_checkpointing (HF's flag) recomputes every encoder layer in the backward: the same run bit for
// bit (losses, gradient norms, parameters), with dropout on and gradient accumulation 2; the trainer turns
// it on in the model's config and plans one layer of saved activations.
TEST(Trainer, GradientCheckpointingTrainsBitForBitTheSame) {
  const std::vector<std::string> common = small_run_args(4);
  auto with = [&](const std::vector<std::string>& extra) { return resolved_with(common, extra); };
  MrpcTrainer stored(with({}), small_model());
  stored.train();
  MrpcTrainer checkpointed(with({"--gradient_checkpointing"}), small_model());
  EXPECT_TRUE(checkpointed.model_config().gradient_checkpointing);
  EXPECT_FALSE(stored.model_config().gradient_checkpointing);
  checkpointed.train();
  ASSERT_EQ(checkpointed.steps().size(), stored.steps().size());
  ASSERT_EQ(stored.steps().size(), 4u);
  for (size_t i = 0; i < stored.steps().size(); ++i) {
    EXPECT_EQ(checkpointed.steps()[i].loss, stored.steps()[i].loss) << "step " << i + 1;
    EXPECT_EQ(checkpointed.steps()[i].grad_norm, stored.steps()[i].grad_norm) << "step " << i + 1;
  }
  EXPECT_TRUE(same_bytes(checkpointed.params(), stored.params()));
}

TEST(Trainer, ResumeRejectsAnotherSeed) {
  const std::string dir = temp_dir("seed");
  MrpcTrainer first(resolved({"--per_device_train_batch_size", "4", "--max_train_steps", "1", "--dtype",
                              "f32", "--output_dir", dir, "--checkpointing_steps", "1"}),
                    small_model());
  first.train();
  MrpcTrainer second(resolved({"--per_device_train_batch_size", "4", "--max_train_steps", "2", "--dtype",
                               "f32", "--seed", "1", "--resume_from_checkpoint", dir}),
                     small_model());
  try {
    second.train();
    FAIL() << "resuming with another seed must fail";
  } catch (const Error& e) {
    // Refused before anything is loaded or trained (app/run/resume_config.h), naming the checkpoint.
    EXPECT_NE(std::string(e.what()).find("cannot resume from " + dir + "/step_1.h5"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("\n  seed "), std::string::npos) << e.what();
  }
  EXPECT_TRUE(second.steps().empty());
  std::filesystem::remove_all(dir);
}

TEST(Trainer, UnwritableOutputDirIsAClearError) {
  MrpcTrainer trainer(
      resolved({"--max_train_steps", "1", "--dtype", "f32", "--output_dir", "/proc/zt_cannot_write"}),
      small_model());
  try {
    trainer.train();
    FAIL() << "an unwritable output_dir must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--output_dir /proc/zt_cannot_write"), std::string::npos)
        << e.what();
  }
}

// --model_name_or_path starts from a model file; a 3-label (MNLI-like) file needs --ignore_mismatched_sizes,
// which keeps every tensor but the classifier (re-initialized as HF does: N(0, 0.02^2), bias 0).
TEST(Trainer, StartsFromAModelFileAndReplacesAMismatchedClassifier) {
  const std::string dir = temp_dir("model_file");
  std::filesystem::create_directories(dir);
  DebertaConfig mnli = small_model();
  mnli.num_labels = 3;
  mnli.id2label = {"CONTRADICTION", "NEUTRAL", "ENTAILMENT"};
  mnli.label2id = {{"CONTRADICTION", 0}, {"NEUTRAL", 1}, {"ENTAILMENT", 2}};
  ParameterTable mnli_table(mnli);
  Arena stored("stored", mnli_table.layout(DType::f32));
  for (const ParameterInfo& p : mnli_table.entries()) {
    const Tensor t = stored.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
  save_model_file(dir + "/model.h5", mnli, mnli_table, stored);

  TrainConfig strict = resolved({"--model_name_or_path", dir, "--dtype", "f32"});
  EXPECT_THROW(model_config_for_run(strict), Error);

  TrainConfig config = resolved({"--model_name_or_path", dir, "--ignore_mismatched_sizes", "--dtype", "f32"});
  const DebertaConfig model = model_config_for_run(config);
  ASSERT_EQ(model.num_labels, 2);
  MrpcTrainer trainer(config, model);
  const Arena params = trainer.params();
  for (const ParameterInfo& p : trainer.table().entries()) {
    const Tensor got = params.tensor(p.name);
    if (p.name.rfind("classifier.", 0) == 0) continue;
    const Tensor want = stored.tensor(p.name);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), want.nbytes()), 0) << p.name;
  }
  const Tensor bias = params.tensor("classifier.bias");
  EXPECT_EQ(bias.numel(), 2);
  EXPECT_EQ(bias.data_as<float>()[0], 0.0f);
  EXPECT_EQ(bias.data_as<float>()[1], 0.0f);
  std::filesystem::remove_all(dir);
}

// 50 optimizer steps on the first 400 MRPC train rows in file order (batches of 8, dynamic padding), from the
// golden init, dropout 0: every step's loss within 0.5 % of PyTorch + HF's, and our batcher must build
// exactly the batches the fixture recorded.
TEST(Trainer, FiftyStepLossCurveMatchesPyTorch) {
  test::Fixture f("deberta_mrpc_train50.h5");
  const DebertaConfig model = parse_deberta_config(f.attr_str("config_json"));
  TrainConfig config = resolved({"--learning_rate", "2e-4", "--weight_decay", "0.01", "--num_warmup_steps",
                                 "5", "--max_train_steps", "50", "--per_device_train_batch_size", "8",
                                 "--max_grad_norm", "1.0", "--dtype", "f32"});
  MrpcTrainer trainer(config, model);
  Arena golden("golden init", trainer.table().layout(DType::f32));
  for (const ParameterInfo& p : trainer.table().entries()) {
    const Tensor t = golden.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
  trainer.load_parameters(golden);

  data::Tokenizer tokenizer(std::string(ZT_DATA_DIR) + "/spm8k.model");
  data::EncodedDataset train(data::read_glue_mrpc_tsv(data::mrpc_split_path(ZT_DATA_DIR, "train")), tokenizer,
                             128);
  data::BatcherOptions options;
  options.batch_size = 8;
  options.shuffle = false;
  data::Batcher batcher(train, options);

  const std::vector<float> ref_loss = f.read_f32("loss");
  const std::vector<float> ref_lr = f.read_f32("lr");
  ASSERT_EQ(ref_loss.size(), 50u);
  double worst = 0;
  for (int s = 0; s < 50; ++s) {
    std::vector<data::Batch> window(1);
    ASSERT_TRUE(batcher.next(window[0]));
    const std::string key = std::to_string(s);
    ASSERT_EQ(window[0].input_ids, f.read_i64("input_ids/" + key))
        << "batch " << s << " differs from the fixture's";
    ASSERT_EQ(window[0].attention_mask, f.read_i64("attention_mask/" + key));
    ASSERT_EQ(window[0].labels, f.read_i64("labels/" + key));
    const StepRecord r = trainer.train_step(window);
    EXPECT_NEAR(r.lr, ref_lr[s], 1e-12 + 1e-6 * ref_lr[s]) << "step " << s;
    const double rel = std::abs(r.loss - ref_loss[s]) / std::abs(ref_loss[s]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 0.005) << "step " << s << ": loss " << r.loss << " vs PyTorch " << ref_loss[s];
  }
  RecordProperty("max_relative_loss_error", std::to_string(worst));
  std::printf("max relative loss error over 50 steps: %.3g\n", worst);
}

// The head follows the task: the embedded default keeps MRPC's, STS-B gets one regression output (MSE),
// MNLI three labels named as HF datasets names them, a user file its own label strings.
TEST(ModelConfigForTask, HeadFollowsTheTask) {
  const TrainConfig config = resolved({"--dtype", "f32"});
  const DebertaConfig mrpc_default = model_config_for_run(config);
  data::TaskData mrpc;
  mrpc.task_name = "mrpc";
  mrpc.labels = {"0", "1"};
  mrpc.label_names = {"not_equivalent", "equivalent"};
  EXPECT_EQ(model_config_for_task(config, mrpc), mrpc_default);

  data::TaskData stsb;
  stsb.task_name = "stsb";
  stsb.regression = true;
  const DebertaConfig regression = model_config_for_task(config, stsb);
  EXPECT_EQ(regression.num_labels, 1);
  EXPECT_TRUE(regression.is_regression());
  EXPECT_EQ(regression.problem_type.value_or(""), "regression");
  EXPECT_EQ(ParameterTable(regression).at("classifier.weight").shape,
            (Shape{1, regression.pooler_hidden_size}));

  data::TaskData mnli;
  mnli.task_name = "mnli";
  mnli.labels = {"entailment", "neutral", "contradiction"};
  mnli.label_names = mnli.labels;
  const DebertaConfig three = model_config_for_task(config, mnli);
  EXPECT_EQ(three.num_labels, 3);
  EXPECT_FALSE(three.is_regression());
  EXPECT_EQ(three.id2label, mnli.labels);
  EXPECT_EQ(three.label2id.at("contradiction"), 2);
}

}  // namespace
}  // namespace zt::optim
