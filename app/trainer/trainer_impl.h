// MrpcTrainer's state, shared by the files of app/trainer/ that implement it: the run setup
// (trainer_setup.cpp), the optimizer step (trainer_step.cpp), the epoch loop (trainer.cpp), evaluation and
// the run's outputs (trainer_evaluation.cpp), checkpoints and the model file (trainer_checkpoint.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/tracking/run_tracker.h"
#include "app/trainer/trainer.h"
#include "data/batcher.h"
#include "data/task_data.h"
#include "data/tokenizer.h"
#include "kernels/elementwise.h"
#include "model/deberta.h"
#include "optim/epoch_steps.h"
#include "optim/zero/engine.h"
#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/progress.h"
#include "runtime/rank_device.h"
#include "runtime/signals.h"
#include "runtime/wall_clock_breakdown.h"

namespace zt::optim {

namespace trainer_internal {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// --gradient_checkpointing turns it on in the model's config whatever the caller built (a config already
// asking for it keeps it).
inline DebertaConfig checkpointed_if_asked(DebertaConfig model, const TrainConfig& config) {
  model.gradient_checkpointing = model.gradient_checkpointing || config.gradient_checkpointing;
  return model;
}

inline ArenaLayout flat_f32_layout(int64_t n) {
  return ArenaLayout({{"values", {n}, DType::f32}});
}

inline ArenaOptions state_arena(DeviceKind device, MemoryCategory category, bool zero) {
  return {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
          .category = category,
          .zero_fill = zero};
}

}  // namespace trainer_internal

// The optimizer steps since the last logged one: their mean loss and throughput are what a step line shows.
struct StepLogWindow {
  double loss_sum = 0;
  int64_t steps = 0;
  int64_t samples = 0;
  trainer_internal::Clock::time_point since = trainer_internal::Clock::now();
  void add(const StepRecord& record, int64_t window_samples) {
    loss_sum += record.loss;
    ++steps;
    samples += window_samples;
  }
};

// One rank of the data-parallel group: its communicator, optimizer-state engine, model activations and
// batch buffer. In-process ranks are threads of this process (world_size > 1); rank r's state is built,
// used and destroyed on rank r's thread only. Ranks sharing one GPU each have a RankDevice (own capped
// allocator and compute stream) that their thread enters around all of its work.
struct RankState {
  std::unique_ptr<RankDevice> gpu;  // GPU and world_size > 1 only; destroyed last, after what it allocated
  Communicator* comm = nullptr;
  // The model before the engine: destroyed after it, as the engine's gradients may live in the model's
  // activation arena (ZeroEngineOptions::gradient_memory).
  std::unique_ptr<DebertaForSequenceClassification> model;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<Arena> batch_arena;          // GPU: the current batch (ids, mask [B, L], labels [B])
  LossScaler scaler = LossScaler::disabled();  // identical on every rank (they see the same overflow)
};

// What a run reads: the tokenizer, the task's splits encoded, and the training batcher over the train set.
struct TaskInputs {
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::EncodedDataset> train_set;
  // The task's evaluation splits (MNLI: matched, mismatched) and test splits, encoded in task order.
  std::vector<std::unique_ptr<data::EncodedDataset>> eval_sets, test_sets;
  std::optional<data::TaskData> task;  // set_task_data, or read by load_data
  std::unique_ptr<data::Batcher> train_batcher;
  std::optional<data::GlueDataset> given_train_rows;  // set_train_rows: the train file as already read
};

// Where training stands: what a checkpoint saves, beside the engines' state, to resume bit for bit.
struct TrainingCounters {
  int64_t optimizer_step = 0;         // optimizer steps taken so far, fp16 overflow-skipped ones included
  int64_t scheduler_step = 0;         // learning-rate schedule steps: applied updates only (DeepSpeed)
  int64_t micro_step = 0;             // micro-batches consumed so far over all ranks (keys the dropout masks)
  double epoch_loss_sum = 0;          // of the epoch under way: step losses summed, for its train_loss
  int64_t epoch_optimizer_steps = 0;  // optimizer steps of the epoch under way
};

// What the optimizer steps report: their records, the step callback, the wall_clock_breakdown segments.
struct StepReports {
  std::vector<StepRecord> steps;
  std::function<void(const StepRecord&)> callback;
  // wall_clock_breakdown: marked on rank 0's thread (runtime/wall_clock_breakdown.h); null when off.
  std::unique_ptr<WallClockBreakdown> wall_clock;
  ProgressMetrics shown_wall_clock;  // the last logged segment times, shown on the progress line
};

struct MrpcTrainer::Impl {
  TrainConfig config;
  DebertaConfig model_config;
  ParameterTable table;
  DeviceKind device;
  DType compute;    // storage dtype of the model's parameters and activations
  int world;        // ranks in the run
  int first_rank;   // the first of this process's ranks
  int local_count;  // ranks this process runs (threads): the world, or 1 in a process group
  // --host_memory_limit: every rank's engine charges its offload buffers; declared before the ranks so that
  // it outlives their engines.
  HostMemoryBudget host_budget;
  std::vector<RankState> ranks;
  // Declared after `ranks`, so destroyed before them: a device group's scratch buffer belongs to its rank's
  // allocator, which ends with the rank's state.
  std::vector<std::unique_ptr<Communicator>> comms;
  TaskInputs input;
  TrainingCounters counters;
  StepReports reports;
  bool group_stop = false;   // a process group agreed to stop (see should_stop)
  std::string resumed_from;  // the checkpoint load_checkpoint loaded, if any

  // process_group: this process is one rank of that group (mpirun, one process per GPU); null: every rank
  // of config.world_size is a thread of this process.
  Impl(TrainConfig c, DebertaConfig mc, std::unique_ptr<Communicator> process_group);

  ~Impl();

  static constexpr int kSharedGpu = 0;  // in-process GPU ranks all run on device 0

  // Runs fn(rank) for every rank of this process (global rank numbers): inline for one, else on one thread
  // per rank. A rank that throws aborts the group (the others leave their collectives with "group
  // aborted"; in a process group the peers' NCCL calls fail instead of hanging); the first error that is not
  // such a consequence is rethrown.
  void run_ranks(const std::function<void(int)>& fn);

  // Global rank r's state; r must be one of this process's ranks.
  RankState& at(int r) { return ranks[static_cast<size_t>(r - first_rank)]; }
  // Any of this process's ranks, for what every rank holds alike (the loss scaler, Adam's step count).
  RankState& local_rank() { return ranks.front(); }
  // Process 0 (rank 0) evaluates below stage 3, prints the results and writes the run's files.
  bool main_process() const { return first_rank == 0; }

  // Whether to stop after this step (SIGINT/SIGTERM): in a process group the agreed answer of the last
  // step, so every process stops after the same one.
  bool should_stop() const { return local_count < world ? group_stop : stop_requested(); }

  // Each process's fingerprint of its resolved configuration (TrainConfig::describe()), gathered by all: a
  // mismatch is an error naming the processes that differ from rank 0, on every process alike.
  void check_same_config_on_every_process();

  // Element-wise sum of `values` over the processes of a process group (one rank each), in place.
  void sum_over_processes(std::vector<float>& values) {
    const auto n = static_cast<int64_t>(values.size());
    const Tensor host(values.data(), {n}, DType::f32);
    Arena buffer("process exchange", trainer_internal::flat_f32_layout(n),
                 trainer_internal::state_arena(device, MemoryCategory::communication, false));
    const Tensor on_device = buffer.tensor("values");
    copy_tensor(host, on_device);
    comms.front()->all_reduce_sum(on_device);
    copy_tensor(on_device, host);
  }

  // Note [Optimizer steps of an epoch] for the train set as read; a configuration resolved for another
  // number of rows would plan another schedule, so that is an error.
  EpochSteps epoch_plan() const {
    const EpochSteps plan =
        epoch_steps(static_cast<int64_t>(input.train_set->size()), config.per_device_train_batch_size,
                    config.gradient_accumulation_steps, world);
    ZT_CHECK(config.num_update_steps_per_epoch == 0 || config.num_update_steps_per_epoch == plan.steps,
             "the configuration was resolved for ", config.num_update_steps_per_epoch,
             " optimizer steps an epoch, but the ", input.train_set->size(), " rows of ", config.train_file,
             " make ", plan.steps, " (resolve with num_train_examples = the train file's rows)");
    return plan;
  }

  // "; the step before it (N) had loss ..." for a divergence message; step numbers are metrics.jsonl's
  // (1-based).
  std::string last_finite_step() const {
    if (reports.steps.empty()) return "";
    const StepRecord& last = reports.steps.back();
    return str("; the step before it (", last.step + 1, ") had loss ", last.loss, ", gradient norm ",
               last.grad_norm, " and learning rate ", last.lr);
  }

  int64_t max_batch() const {
    return std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size);
  }

  // The batch as the model wants it: views of the host batch on the CPU, a copy in the rank's batch arena on
  // the GPU.
  DebertaBatch upload(RankState& rank, data::Batch& batch);

  // The full f32 parameters on the host (collective over the ranks' shards).
  Arena consolidated_parameters();

  // Initializes every tensor on the host (init_parameter: a pure function of seed, name and index), loads
  // --model_name_or_path over it, and hands it to the ranks' engines, one tensor at a time: the host stages
  // the largest tensor (the word embeddings), never the whole model, which would sit next to the offloaded
  // state. With --ignore_mismatched_sizes a classifier whose label count differs from the run's is left at
  // its fresh init (HF's N(0, 0.02^2), bias 0); the pooler is kept.
  void initialize_parameters();

  // The scalars of a logged step (metrics.jsonl "step" lines, TensorBoard): the mean loss and samples/s of
  // the steps since the last logged one; learning rate, gradient norm and fp16 loss scale of this step; the
  // device memory in use by category (GPU); the wall_clock_breakdown segments, mean ms per step.
  std::vector<tracking::Scalar> step_scalars(const StepRecord& record, const StepLogWindow& window);

  double lr_at(int64_t step) const {
    if (config.deepspeed_schedule) return config.deepspeed_schedule->lr_at(step, config.learning_rate);
    return config.hf_schedule().lr_at(step);
  }

  void load_data();
};

// What one call of MrpcTrainer::train keeps across its parts.
struct MrpcTrainer::TrainRun {
  tracking::RunTracker tracker;  // metrics.jsonl and TensorBoard
  StepLogWindow log_window;      // the steps since the last logged one
  EpochSteps plan;               // Note [Optimizer steps of an epoch] for the train set
};

}  // namespace zt::optim
