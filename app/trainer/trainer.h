// The GLUE / user-data fine-tuning loop of train_mrpc, as HF run_glue_no_trainer.py runs it (any task of
// data/task_data.h; MRPC by default):
//
//   for epoch: for each micro-batch:  loss = model(batch) / accumulation;  backward
//              every `accumulation` micro-batches (and at the end of an epoch):
//                  clip the global grad norm, AdamW step at lr = schedule(step), zero grads, step += 1
//              checkpoint every N steps (or each epoch); stop at max_train_steps
//   every log_every steps and after each epoch: metrics.jsonl lines (and TensorBoard scalars with
//   --with_tracking; app/tracking/run_tracker.h); after each epoch: the task's metrics on every
//   evaluation split (MRPC: dev accuracy / F1), a progress line
//   at the end: GLUE test predictions (the task's submission files, e.g. MRPC.tsv) and the final model
//
// The step is deterministic: dropout masks are pure functions of (seed, micro-step, layer, site), the data
// order of (seed, epoch), so a run resumed from a checkpoint continues bitwise identically on the CPU. On the
// GPU every kernel but one is deterministic too; the embedding backward adds the rows of repeated token ids
// with float atomics (kernels/embedding.h), so GPU runs agree to rounding, not bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/config/train_config.h"
#include "data/batcher.h"
#include "data/glue_tsv.h"
#include "data/task_data.h"
#include "model/config.h"
#include "model/parameters.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"
#include "runtime/device_allocator.h"

namespace zt::optim {

struct StepRecord {
  int64_t step = 0;       // optimizer step index (0-based) this record belongs to
  double loss = 0;        // mean loss over the step's micro-batches (unscaled by accumulation)
  double lr = 0;          // learning rate the update used
  double grad_norm = 0;   // global L2 norm before clipping (of the unscaled gradients; +inf when skipped)
  double loss_scale = 1;  // fp16 loss scale the step's backward used (1 without loss scaling)
  bool skipped = false;   // fp16 overflow: no update was applied
};

struct EvalResult {
  double loss = 0;
  double accuracy = 0;  // classification: accuracy and binary F1 (MRPC's metrics)
  double f1 = 0;
  int64_t examples = 0;
  std::vector<int64_t> predictions;  // argmax per example, dataset order (classification)
  std::vector<double> scores;        // the single logit per example, dataset order (regression)
  // The task's metrics under run_glue's keys ("accuracy", "matthews_correlation", ...), labeled splits only.
  std::vector<std::pair<std::string, double>> metrics;
};

struct EpochRecord {
  int64_t epoch = 0;
  double train_loss = 0;                // mean over the epoch's optimizer steps
  EvalResult eval;                      // the first evaluation split
  std::vector<EvalResult> eval_splits;  // every evaluation split, in task order (MNLI: matched, mismatched)
  double train_samples_per_s = 0;
  double seconds = 0;
  int64_t optimizer_steps = 0;  // total so far
};

// A model file path, a directory holding model.h5, or an HF checkpoint directory (converted on first use
// into hf_conversion_cache(dir), model/model_source.h); throws naming what is missing.
std::string resolve_model_path(const std::string& file_or_dir);
// Where an HF checkpoint directory's conversion is kept: $ZT_HF_CACHE, else ~/.cache/zerotrain/hf, then
// <name>-<hash of its absolute path>.
std::string hf_conversion_cache(const std::string& hf_dir);

// The storage dtype of parameters and activations a run computes in: --dtype with --device cuda; f32 on
// the CPU backend (call after the device is resolved).
DType compute_dtype_for_run(const TrainConfig& config);

// The architecture a run trains: the embedded default (xlarge with --device cuda, the small CPU model
// otherwise; call after the device is resolved), or the config stored in --model_name_or_path
// with its label count set to `num_labels` when --ignore_mismatched_sizes allows replacing the classifier.
DebertaConfig model_config_for_run(const TrainConfig& config, int64_t num_labels = 2,
                                   const std::string& task = "MRPC");

// The model `train_mrpc --calibrate` times on the GPU: the one this run trains, as model_config_for_run
// resolves it (the device left to --device auto is the GPU when `gpu`), a checkpoint's with its own head
// (the head's size is not the encoder's cost; no task data is read).
DebertaConfig model_config_for_calibration(TrainConfig config, bool gpu);

// What to read for a run: --task_name (MRPC's shipped folder when neither --data_dir nor files are given),
// --data_dir, the files, and `model`'s label2id (user files take the checkpoint's ids when the names match).
data::TaskDataRequest task_data_request(const TrainConfig& config, const DebertaConfig& model);

// model_config_for_run for `task`: the head gets the task's label count (num_labels 1 and MSE for
// regression; a checkpoint head of another size needs --ignore_mismatched_sizes) and, when the head is new,
// the task's label names as id2label (as run_glue sets them).
DebertaConfig model_config_for_task(const TrainConfig& config, const data::TaskData& task);

class MrpcTrainer {
 public:
  // `config` must be resolved (TrainConfig::resolve). `model_config` is the architecture to train; the
  // parameters start from --model_name_or_path when given, else from a seeded HF-style random init.
  MrpcTrainer(TrainConfig config, DebertaConfig model_config);
  // One rank of a group of processes (mpirun -np N, one process per GPU; runtime/mpi_launch.h
  // make_launch_communicator): the run's world size is the group's and this process runs rank
  // process_group->rank() (config resolved with the launch's world size, as train_mrpc does). Every process
  // reads the same data and trains the micro-batches of its rank; process 0 alone evaluates below stage 3 and
  // writes metrics, model.h5, the test predictions and single-file checkpoints (sharded checkpoints: each
  // process its own file); the processes agree after every step on whether a signal asked them to stop.
  MrpcTrainer(TrainConfig config, DebertaConfig model_config, std::unique_ptr<Communicator> process_group);
  ~MrpcTrainer();

  // The training rows, already read from config.train_file (train_mrpc reads the file once, to count its
  // rows for TrainConfig::resolve and to train on; a FIFO can be read only once). Without it the trainer
  // reads config.train_file itself. Call before train().
  void set_train_rows(data::GlueDataset rows);
  // The whole task, already read (load_task_data): train_mrpc reads it once to count the training rows.
  // Without it (and without set_train_rows) the trainer reads task_data_request(config) itself.
  void set_task_data(data::TaskData task);

  // Runs the whole job: training, per-epoch evaluation, checkpoints, metrics, test predictions, and last
  // the model file. With --resume_from_checkpoint: settings changed since the checkpoint are said or
  // refused (app/run/resume_config.h); a run whose checkpoint is at its last step and whose model.h5 is
  // written is finished, and train() says so and returns no epochs without writing anything.
  std::vector<EpochRecord> train();

  // One optimizer step over world_size x accumulation micro-batches (micro-batch i goes to rank i % W);
  // returns its record. Exposed for tests that replay
  // fixed batches (e.g. the PyTorch loss-curve fixture).
  StepRecord train_step(std::vector<data::Batch>& micro_batches);

  EvalResult evaluate(const data::EncodedDataset& dataset);

  // Saves everything a bitwise-identical resume needs into `output_dir`: step_<N>.h5 at stage 0 (rank 0
  // writes), step_<N>.zero/ (a file per rank) at stages 1-3. Collective over the in-process ranks.
  void save_checkpoint(const std::string& output_dir);
  // Restores from a checkpoint file or directory of any stage and world size
  // (app/run/sharded_checkpoint.h).
  void load_checkpoint(const std::string& path);

  // Replaces the parameters (fp32 master and, in mixed precision, its 16-bit copy) with `host`, an f32 host
  // arena laid out by table().layout(DType::f32). For tests and tools that start from given weights.
  void load_parameters(const Arena& host);

  // The fp32 master weights consolidated from every rank's shard into a host arena (table().layout(f32)).
  Arena params() const;
  const ParameterTable& table() const;
  const DebertaConfig& model_config() const;
  const std::vector<StepRecord>& steps() const;
  // Each rank's device memory (in use, peaks by category, cap): in-process ranks sharing a GPU have their
  // own allocators; a single GPU rank reports the process allocator. Empty on the CPU.
  std::vector<DeviceMemoryStats> rank_memory() const;
  // Whether the ranks' offloaded CPU update overlaps the next forward
  // (ZeroEngine::overlaps_offloaded_update).
  bool overlaps_offloaded_update() const;
  // The first rank's ZeroEngine::offloaded_update_ms: the CPU update's host time (0 without offload).
  double offloaded_update_ms() const;
  // Restarts every rank's peaks from its current in-use bytes (measure a steady state after warm-up).
  void reset_memory_peaks();
  // Called after every optimizer step (progress, tests stopping a run early).
  void set_step_callback(std::function<void(const StepRecord&)> callback);

 private:
  struct Impl;
  struct TrainRun;  // what one call of train() keeps across its parts (app/trainer/trainer_impl.h)

  // The parts of train(): an epoch's optimizer steps (false when a signal stopped the run), the checkpoint
  // and message of such a stop, the epoch's evaluation and report, the test predictions, the model file.
  bool train_epoch(TrainRun& run, int64_t epoch, int64_t& samples);
  void stop_after_signal(bool checkpoint_written);
  EpochRecord finish_epoch(TrainRun& run, int64_t epoch, double seconds, int64_t samples);
  void write_test_predictions();
  void write_model(const std::string& model_path);

  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::optim
