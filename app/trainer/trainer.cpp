// MrpcTrainer::train: the run from its output directory to the model file, epoch by epoch (the loop of
// app/trainer/trainer.h), and the scalars each logged step records.
#include "app/trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "app/run/checkpoint.h"
#include "app/run/run_directory.h"
#include "app/trainer/trainer_impl.h"
#include "runtime/device_allocator.h"

namespace zt::optim {

using trainer_internal::Clock;
using trainer_internal::seconds_since;

namespace {

// Locks --output_dir for this run: a directory of another run is refused unless --overwrite_output_dir or
// resuming that run; temp files of dead writers are removed.
OutputDirLock claim_output_dir(const TrainConfig& c) {
  const std::string checkpoint =
      c.resume_from_checkpoint.empty() ? std::string() : resolve_checkpoint_path(c.resume_from_checkpoint);
  OutputDirReport report =
      prepare_output_dir(c.output_dir, c.overwrite_output_dir, !c.resume_from_checkpoint.empty(), checkpoint);
  for (const std::string& f : report.removed_stale_temp_files)
    std::printf("removed %s (left by a writer that died)\n", f.c_str());
  for (const std::string& f : report.removed_for_overwrite)
    std::printf("removed %s (--overwrite_output_dir)\n", f.c_str());
  return std::move(report.lock);
}

// Whether a resumed run has nothing left to do. model.h5 is the run's last output: with it written the run
// is finished, and nothing is trained, evaluated or written (metrics.jsonl stays as it is). Without it the
// attempt that reached the last step died before its final evaluation and outputs, which this one writes.
bool run_is_finished(const TrainConfig& c, const std::string& resumed_from, int64_t optimizer_step,
                     const std::string& model_path) {
  if (resumed_from.empty() || optimizer_step < c.num_training_steps) return false;
  if (model_path.empty() || std::filesystem::exists(model_path)) {
    std::printf("the run is finished: %s is at optimizer step %lld of %lld%s; nothing to do\n",
                resumed_from.c_str(), static_cast<long long>(optimizer_step),
                static_cast<long long>(c.num_training_steps),
                model_path.empty() ? "" : str(" and ", model_path, " is written").c_str());
    std::fflush(stdout);
    return true;
  }
  std::printf("training is complete at optimizer step %lld; writing the run's final evaluation and outputs\n",
              static_cast<long long>(optimizer_step));
  return false;
}

}  // namespace

std::vector<EpochRecord> MrpcTrainer::train() {
  Impl& s = *impl_;
  if (!s.input.train_set) s.load_data();
  const TrainConfig& c = s.config;
  // The first SIGINT/SIGTERM finishes the current optimizer step, writes a checkpoint and returns.
  ScopedStopSignals stop_signals("train_mrpc");
  // Held until train() returns: Note [The output directory's lock] (app/run/run_directory.h). In a process
  // group process 0 alone prepares the directory; the others wait for it.
  OutputDirLock output_dir_lock;
  if (!c.output_dir.empty() && s.main_process()) output_dir_lock = claim_output_dir(c);
  if (s.local_count < s.world) s.comms.front()->barrier();
  if (!c.resume_from_checkpoint.empty() && s.counters.optimizer_step == 0)
    load_checkpoint(c.resume_from_checkpoint);
  const std::string model_path =
      c.output_dir.empty() ? "" : (std::filesystem::path(c.output_dir) / "model.h5").string();
  if (run_is_finished(c, s.resumed_from, s.counters.optimizer_step, model_path)) return {};
  std::vector<EpochRecord> epochs;
  // metrics.jsonl and, with --with_tracking, TensorBoard (app/tracking/run_tracker.h). A resumed run
  // drops what a killed run logged after its checkpoint and continues the same TensorBoard run. The epoch
  // the checkpoint is in is logged again (also when the checkpoint holds every step: that epoch still ends
  // with its evaluation below), so only the epochs before it keep their lines.
  TrainRun run{.tracker = tracking::RunTracker({.output_dir = s.main_process() ? c.output_dir : std::string(),
                                                .tensorboard = c.with_tracking,
                                                .resumed = s.counters.optimizer_step > 0,
                                                .resumed_step = s.counters.optimizer_step,
                                                .finished_epochs = s.input.train_batcher->position().epoch}),
               .log_window = StepLogWindow{},
               .plan = EpochSteps{}};
  run.tracker.log_text("config", c.describe(), s.counters.optimizer_step);
  if (!c.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(c.output_dir, error);
    ZT_CHECK(!error, "--output_dir ", c.output_dir, ": cannot create it (", error.message(), ")");
  }
  // Note [Optimizer steps of an epoch] (optim/epoch_steps.h): the resolved step counts come from the same
  // rule, so the loop ends each epoch after the steps the schedule was planned for.
  run.plan = s.epoch_plan();
  for (int64_t epoch = s.input.train_batcher->position().epoch; epoch < c.num_train_epochs; ++epoch) {
    // Past the last step no epoch starts; one under way (resumed from a checkpoint of its last step) still
    // ends with its evaluation, as it does in an uninterrupted run.
    const bool under_way =
        s.input.train_batcher->position().epoch == epoch && s.input.train_batcher->position().batch > 0;
    if (s.counters.optimizer_step >= c.num_training_steps && !under_way) break;
    if (s.input.train_batcher->position().epoch != epoch) s.input.train_batcher->set_epoch(epoch);
    const auto start = Clock::now();
    int64_t samples = 0;
    if (!train_epoch(run, epoch, samples)) return epochs;  // a signal stopped the run
    epochs.push_back(finish_epoch(run, epoch, seconds_since(start), samples));
    if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::epoch && !c.output_dir.empty()) {
      s.input.train_batcher->set_epoch(epoch + 1);  // resume starts the next epoch, not this one's evaluation
      save_checkpoint(c.output_dir);
    }
  }
  write_test_predictions();
  // Written last: a model.h5 says the run finished (a resume of it has nothing to do).
  if (!model_path.empty()) write_model(model_path);
  return epochs;
}

bool MrpcTrainer::train_epoch(TrainRun& run, int64_t epoch, int64_t& samples) {
  Impl& s = *impl_;
  const TrainConfig& c = s.config;
  const EpochSteps& plan = run.plan;
  const int64_t full_window = plan.world_size * plan.accumulation;
  Progress progress(str("epoch ", epoch + 1, "/", c.num_train_epochs),
                    std::min(plan.used_micro_batches() * c.per_device_train_batch_size,
                             static_cast<int64_t>(s.input.train_set->size())));
  progress.update(std::min(s.input.train_batcher->position().batch, plan.used_micro_batches()) *
                  c.per_device_train_batch_size);
  std::vector<data::Batch> window;
  // Windows start at multiples of W·k micro-batches (checkpoints are written between steps).
  while (s.counters.optimizer_step < c.num_training_steps &&
         s.input.train_batcher->position().batch < plan.used_micro_batches()) {
    const int64_t window_size = plan.window(s.input.train_batcher->position().batch / full_window);
    for (int64_t i = 0; i < window_size; ++i) {
      data::Batch batch;
      ZT_CHECK(s.input.train_batcher->next(batch), "the epoch ended after ",
               s.input.train_batcher->position().batch, " micro-batches; its plan has ",
               plan.used_micro_batches());
      window.push_back(std::move(batch));
    }
    const StepRecord record = train_step(window);
    int64_t window_samples = 0;
    for (const data::Batch& b : window) window_samples += b.batch_size;
    samples += window_samples;
    window.clear();
    s.counters.epoch_loss_sum += record.loss;
    ++s.counters.epoch_optimizer_steps;
    run.log_window.add(record, window_samples);
    if (s.counters.optimizer_step % c.log_every == 0) {
      run.tracker.log_step(s.counters.optimizer_step, s.step_scalars(record, run.log_window));
      run.log_window = StepLogWindow{};
    }
    ProgressMetrics shown = {{"loss", record.loss}, {"lr", record.lr}};
    shown.insert(shown.end(), s.reports.shown_wall_clock.begin(), s.reports.shown_wall_clock.end());
    progress.update(window_samples, shown);
    if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::steps &&
        s.counters.optimizer_step % c.checkpointing_steps.every == 0 && !c.output_dir.empty()) {
      save_checkpoint(c.output_dir);
      if (s.should_stop()) {
        stop_after_signal(/*checkpoint_written=*/true);
        return false;
      }
    }
    if (s.should_stop()) {
      stop_after_signal(/*checkpoint_written=*/false);
      return false;
    }
  }
  progress.finish();
  return true;
}

void MrpcTrainer::stop_after_signal(bool checkpoint_written) {
  const Impl& s = *impl_;
  const TrainConfig& c = s.config;
  if (!c.output_dir.empty() && !checkpoint_written) save_checkpoint(c.output_dir);
  std::printf("stopped by signal %d after optimizer step %lld%s\n", stop_signal(),
              static_cast<long long>(s.counters.optimizer_step),
              c.output_dir.empty() ? " (no --output_dir: nothing saved)"
                                   : str("; resume with --resume_from_checkpoint ", c.output_dir).c_str());
  std::fflush(stdout);
}

std::vector<tracking::Scalar> MrpcTrainer::Impl::step_scalars(const StepRecord& record,
                                                              const StepLogWindow& window) {
  std::vector<tracking::Scalar> scalars = {
      {"train/loss", window.loss_sum / static_cast<double>(std::max<int64_t>(window.steps, 1))},
      {"train/learning_rate", record.lr}};
  if (std::isfinite(record.grad_norm)) scalars.push_back({"train/grad_norm", record.grad_norm});
  if (compute == DType::f16) {
    scalars.push_back({"train/loss_scale", record.loss_scale});
    scalars.push_back({"train/skipped_steps", static_cast<double>(local_rank().scaler.skipped_steps())});
  }
  scalars.push_back({"train/samples_per_s",
                     static_cast<double>(window.samples) / std::max(seconds_since(window.since), 1e-9)});
  if (device == DeviceKind::cuda) {
    // Rank 0's allocator: the one its thread allocates from (a rank's scoped allocator, if any).
    DeviceMemoryStats memory;
    run_ranks([&](int r) {
      if (r == 0) memory = device_allocator().stats();
    });
    for (int k = 0; k < kMemoryCategoryCount; ++k) {
      const std::string name(memory_category_name(static_cast<MemoryCategory>(k)));
      scalars.push_back({"memory/" + name + "_mib", static_cast<double>(memory.in_use[k]) / (1 << 20)});
    }
    scalars.push_back({"memory/cached_mib", static_cast<double>(memory.cached) / (1 << 20)});
  }
  if (reports.wall_clock) {
    reports.shown_wall_clock.clear();
    for (const auto& [segment, ms] : reports.wall_clock->take_mean_ms()) {
      scalars.push_back({"time/" + segment + "_ms", ms});
      reports.shown_wall_clock.emplace_back(segment + "_ms", ms);
    }
  }
  return scalars;
}

}  // namespace zt::optim
