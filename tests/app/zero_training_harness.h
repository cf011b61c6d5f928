// The ZeRO training harness shared by the CPU tests (test_zero_training.cpp) and the shared-GPU rank tests
// (test_zero_training_gpu.cpp): a tiny DeBERTa on real MRPC batches with dropout on, run by MrpcTrainer at a
// given stage, world size and accumulation; the losses and the consolidated final weights come back.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/run/checkpoint.h"
#include "app/trainer/trainer.h"
#include "model/config.h"
#include "model/model_file.h"
#include "tests/app/narrow_model.h"

// RunSpec is filled with designated initializers; the members left out keep their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace zt::optim::zero_harness {

constexpr int kSteps = 20;

// A small model so 4 stages x 4 worlds x 2 accumulations x 20 steps run in CI (~35k parameters in the
// encoder; the word embeddings of the 8k-piece vocabulary dominate).
inline DebertaConfig tiny_model() {
  return test_models::narrow_model(16, 8);
}

struct RunSpec {
  int stage = 0;
  int world = 1;
  int accumulation = 1;
  int steps = kSteps;
  std::string output_dir;
  int checkpoint_every = 0;
  std::string resume;
  int crash_after = 0;  // > 0: the run throws in step crash_after + 1 (after step crash_after's checkpoint)
  bool offload_optimizer = false;               // zero_optimization.offload_optimizer.device cpu
  bool offload_param = false;                   // zero_optimization.offload_param.device cpu (stage 3)
  double max_grad_norm = 1.0;                   // small: every step clips
  bool delayed_update = false;                  // --offload_delayed_update
  std::string delayed_landing = "in_backward";  // whole, after_norm, in_backward (DelayedLanding)
  bool pin_memory = false;                      // offload_optimizer and offload_param pin_memory
  int layers = 0;               // > 0: the model's layers (its units: layers + 2); 0: tiny_model's
  bool overlap_update = false;  // --offload_overlap_update
  // zero_optimization.offload_optimizer.device nvme with this nvme_path (the disk tier); empty: none.
  std::string nvme_path;
  int nvme_buffers = 4;
  bool nvme_pipeline = false;              // pipeline_read and pipeline_write
  int64_t sub_group_size = 1'000'000'000;  // zero_optimization.sub_group_size (the offloaded state's cut)
  // zero_optimization.offload_param.device nvme with this nvme_path (the stage-3 parameter shard on disk;
  // sets offload_param, and needs offload_optimizer or nvme_path); empty: none.
  std::string param_nvme_path;
  int param_nvme_buffers = 5;
  size_t host_memory_limit = 0;  // --host_memory_limit
  bool gpu = false;              // in-process ranks over the one GPU (RankDevice each) instead of the CPU
  std::string dtype = "f32";     // the GPU also trains in bf16
  bool overlap_comm = false;  // zero_optimization.overlap_comm (GPU, world > 1: reductions on a comm stream)
  bool overlap_optimizer = false;       // --overlap_optimizer (GPU: the AdamW on its own stream)
  bool gradient_checkpointing = false;  // --gradient_checkpointing
  double offload_ratio = 1.0;           // zero_optimization.offload_optimizer.ratio (partial offload)
};

inline TrainConfig config_for(const RunSpec& r) {
  std::vector<std::string> args = {"--per_device_train_batch_size",
                                   "2",
                                   "--gradient_accumulation_steps",
                                   std::to_string(r.accumulation),
                                   "--learning_rate",
                                   "1e-3",
                                   "--max_train_steps",
                                   std::to_string(r.steps),
                                   "--max_length",
                                   "48",
                                   "--dtype",
                                   r.dtype,
                                   "--seed",
                                   "11",
                                   "--num_train_epochs",
                                   "1"};
  if (r.gpu) args.insert(args.end(), {"--device", "cuda"});
  if (!r.output_dir.empty()) args.insert(args.end(), {"--output_dir", r.output_dir});
  if (r.checkpoint_every > 0)
    args.insert(args.end(), {"--checkpointing_steps", std::to_string(r.checkpoint_every)});
  if (!r.resume.empty()) args.insert(args.end(), {"--resume_from_checkpoint", r.resume});
  TrainConfig config = TrainConfig::from_args(args);
  config.resolve({.world_size = r.world, .hidden_size = 16, .num_train_examples = 3668});
  config.zero.stage = r.stage;
  config.zero.overlap_comm = r.overlap_comm;
  config.zero.offload_optimizer.enabled = r.offload_optimizer;
  config.zero.offload_param.enabled = r.offload_param;
  config.zero.offload_optimizer.ratio = r.offload_ratio;
  config.max_grad_norm = r.max_grad_norm;
  config.offload_delayed_update = r.delayed_update;
  config.offload_delayed_landing = r.delayed_landing;
  config.zero.offload_optimizer.pin_memory = r.pin_memory;
  config.zero.offload_param.pin_memory = r.pin_memory;
  config.offload_overlap_update = r.overlap_update;
  config.overlap_optimizer = r.overlap_optimizer;
  config.gradient_checkpointing = r.gradient_checkpointing;
  if (!r.nvme_path.empty()) {
    config.zero.offload_optimizer.enabled = true;
    config.zero.offload_optimizer.nvme = {.enabled = true,
                                          .nvme_path = r.nvme_path,
                                          .buffer_count = r.nvme_buffers,
                                          .pipeline_read = r.nvme_pipeline,
                                          .pipeline_write = r.nvme_pipeline};
  }
  if (!r.param_nvme_path.empty()) {
    config.zero.offload_param.enabled = true;
    config.zero.offload_param.nvme = {
        .enabled = true, .nvme_path = r.param_nvme_path, .buffer_count = r.param_nvme_buffers};
  }
  config.zero.sub_group_size = r.sub_group_size;
  config.host_memory_limit = r.host_memory_limit;
  return config;
}

struct RunResult {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // what clipping saw: below max_grad_norm it changes no weight
  std::vector<float> weights;
};

inline DebertaConfig model_for(const RunSpec& spec) {
  DebertaConfig model = tiny_model();
  if (spec.layers > 0) model.num_hidden_layers = spec.layers;
  return model;
}

inline RunResult run(const RunSpec& spec) {
  MrpcTrainer trainer(config_for(spec), model_for(spec));
  if (spec.crash_after > 0) {
    trainer.set_step_callback([&](const StepRecord& r) {
      if (r.step == spec.crash_after) throw std::runtime_error("simulated crash");
    });
    EXPECT_THROW(trainer.train(), std::runtime_error);
    return {};
  }
  trainer.train();
  RunResult out;
  for (const StepRecord& s : trainer.steps()) {
    out.losses.push_back(s.loss);
    out.grad_norms.push_back(s.grad_norm);
  }
  const Arena params = trainer.params();
  const Tensor flat = params.flat(DType::f32);
  out.weights.assign(flat.data_as<float>(), flat.data_as<float>() + flat.numel());
  return out;
}

// `straight`'s losses and norms from step `done` on, with its final weights: what a run resumed there must
// give.
inline RunResult steps_after(const RunResult& straight, int done) {
  const auto skip = static_cast<std::ptrdiff_t>(done);
  return RunResult{{straight.losses.begin() + skip, straight.losses.end()},
                   {straight.grad_norms.begin() + skip, straight.grad_norms.end()},
                   straight.weights};
}

// `crashed` (already run) stopped after its checkpoint at step crashed.crash_after; `resumed` resumes from it
// at the same world size and stage and must continue `straight`'s curve bit for bit.
inline bool resumes_bitwise(const RunResult& straight, const RunSpec& crashed, RunSpec resumed);

inline bool bitwise_equal(const RunResult& a, const RunResult& b) {
  return a.losses == b.losses && a.grad_norms == b.grad_norms && a.weights.size() == b.weights.size() &&
         std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)) == 0;
}

inline void expect_close(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * std::abs(b.losses[i])) << what << ": step " << i;
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < a.weights.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::abs(a.weights[i] - b.weights[i])));
  EXPECT_LT(worst, 2e-5) << what << ": largest weight difference";
}

// `crashed` (already run) stopped after its checkpoint at step crashed.crash_after in crashed.output_dir;
// `resumed` resumes from that checkpoint and must continue `straight`'s curve — the run that never stopped —
// for the remaining steps, within expect_close's cross-world tolerance.
inline void expect_resume_continues(const RunResult& straight, const RunSpec& crashed, RunSpec resumed,
                                    const std::string& what) {
  resumed.resume = resolve_checkpoint_path(crashed.output_dir);
  const RunResult after = run(resumed);
  const RunResult tail = steps_after(straight, crashed.crash_after);
  expect_close(after, tail, what);
}

inline bool resumes_bitwise(const RunResult& straight, const RunSpec& crashed, RunSpec resumed) {
  resumed.resume = resolve_checkpoint_path(crashed.output_dir);
  const RunResult after = run(resumed);
  const RunResult tail = steps_after(straight, crashed.crash_after);
  return bitwise_equal(after, tail);
}

// The model file at `path` (a run's model.h5, a consolidated checkpoint) holds exactly `run`'s final weights
// (the params arena's flat f32 layout, padding zero).
inline void expect_model_file_holds(const std::string& path, const RunResult& run) {
  const ModelFile file(path);
  const ParameterTable table(tiny_model());
  const Arena stored("stored", table.layout(DType::f32), {.zero_fill = true});
  for (const ParameterInfo& p : table.entries()) file.read_param(p.name, stored.tensor(p.name));
  ASSERT_EQ(stored.bytes(), run.weights.size() * sizeof(float)) << path;
  EXPECT_EQ(std::memcmp(stored.data(), run.weights.data(), stored.bytes()), 0) << path;
}

inline std::string temp_dir(const std::string& name) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("zt_test_zero_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace zt::optim::zero_harness
