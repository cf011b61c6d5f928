// MrpcTrainer's evaluation and what it reports: the task's metrics on a split, the end-of-epoch line and
// scalars, and the test predictions (the task's GLUE submission files).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "app/trainer/trainer.h"
#include "app/trainer/trainer_impl.h"
#include "data/glue_metrics.h"

namespace zt::optim {

namespace {

// "%.4f", as the epoch line prints every metric.
std::string format_fixed4(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", value);
  return text;
}

data::Batcher make_eval_batcher(const data::EncodedDataset& dataset, int64_t batch_size) {
  data::BatcherOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.drop_last = false;
  return data::Batcher(dataset, options);
}

}  // namespace

EvalResult MrpcTrainer::evaluate(const data::EncodedDataset& dataset) {
  Impl& s = *impl_;
  // A delayed CPU update (--offload_delayed_update) lands first; collective, so on every rank.
  s.run_ranks([&](int r) { s.at(r).engine->finish_delayed_update(); });
  EvalResult result;
  data::Batcher batcher = make_eval_batcher(dataset, s.config.per_device_eval_batch_size);
  data::Batch batch;
  std::vector<int64_t> labels;
  std::vector<double> targets;
  const bool regression = s.model_config.is_regression();
  double loss_sum = 0;
  int64_t labeled = 0;
  // Stage 3 gathers parameters inside forward (collectives), so every rank runs the evaluation; below stage
  // 3 rank 0 alone does. Rank 0's logits are the result.
  const bool all_ranks = s.config.zero.stage == 3;
  while (batcher.next(batch)) {
    float loss = 0;
    std::vector<float> host;
    Shape logits_shape;
    s.run_ranks([&](int r) {
      if (r != 0 && !all_ranks) return;
      RankState& rank = s.at(r);
      const float rank_loss = rank.model->forward(rank.engine->parameter_handles(), s.upload(rank, batch),
                                                  {.training = false}, rank.engine.get());
      if (r != 0) return;
      loss = rank_loss;
      const Tensor logits = rank.model->logits();
      logits_shape = logits.shape();
      host.resize(static_cast<size_t>(logits.numel()));
      copy_tensor(logits, Tensor(host.data(), logits.shape(), DType::f32));
    });
    if (!s.main_process()) continue;  // rank 0's process holds the logits; the others only joined
    int64_t batch_labeled = 0;
    if (regression) {
      // The head's single logit is the predicted score; NaN targets are unlabeled rows.
      for (int64_t i = 0; i < logits_shape[0]; ++i) result.scores.push_back(host[static_cast<size_t>(i)]);
      targets.insert(targets.end(), batch.scores.begin(), batch.scores.end());
      batch_labeled =
          std::count_if(batch.scores.begin(), batch.scores.end(), [](float t) { return !std::isnan(t); });
    } else {
      for (int64_t p : data::argmax_predictions(Tensor(host.data(), logits_shape, DType::f32))) {
        result.predictions.push_back(p);
      }
      labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
      batch_labeled =
          std::count_if(batch.labels.begin(), batch.labels.end(), [](int64_t l) { return l >= 0; });
    }
    loss_sum += static_cast<double>(loss) * batch_labeled;  // the batch loss is a mean over its labeled rows
    labeled += batch_labeled;
  }
  result.examples = static_cast<int64_t>(regression ? result.scores.size() : result.predictions.size());
  if (labeled > 0) {
    result.loss = loss_sum / static_cast<double>(labeled);
    if (!regression) {
      const data::GlueMetrics metrics = data::glue_metrics(result.predictions, labels);
      result.accuracy = metrics.accuracy;
      result.f1 = metrics.f1;
    }
    if (s.input.task && labeled == result.examples) {
      result.metrics =
          data::task_metrics(*s.input.task, {.classes = result.predictions, .scores = result.scores},
                             {.classes = labels, .scores = targets});
    } else if (!regression) {
      result.metrics = {{"accuracy", result.accuracy}, {"f1", result.f1}};
    }
  }
  return result;
}

EpochRecord MrpcTrainer::finish_epoch(TrainRun& run, int64_t epoch, double seconds, int64_t samples) {
  Impl& s = *impl_;
  EpochRecord record;
  record.epoch = epoch;
  record.seconds = seconds;
  record.train_loss = s.counters.epoch_optimizer_steps > 0
                          ? s.counters.epoch_loss_sum / static_cast<double>(s.counters.epoch_optimizer_steps)
                          : 0;
  s.counters.epoch_loss_sum = 0;
  s.counters.epoch_optimizer_steps = 0;
  record.train_samples_per_s = samples / std::max(record.seconds, 1e-9);
  // Every evaluation split (MNLI: matched, then mismatched with keys suffixed _mm, as run_glue's).
  std::string shown_metrics;
  std::vector<tracking::Scalar> eval_scalars;
  for (size_t k = 0; k < s.input.eval_sets.size(); ++k) {
    const EvalResult eval = evaluate(*s.input.eval_sets[k]);
    if (k == 0) record.eval = eval;
    const std::string suffix = s.input.task->eval[k].key_suffix;
    for (const auto& [name, value] : eval.metrics) {
      shown_metrics += str("dev_", name, suffix, " ", format_fixed4(value), "  ");
      eval_scalars.push_back({"eval_" + name + suffix, value});
    }
    shown_metrics += str("dev_loss", suffix, " ", format_fixed4(eval.loss), "  ");
    eval_scalars.push_back({"eval_loss" + suffix, eval.loss});
    record.eval_splits.push_back(eval);
  }
  // The weights of the last step are checked here only: a step whose update overflowed them has finite
  // loss and gradient norm itself. Nothing more is written from them (no model.h5, no MRPC.tsv). In a
  // process group process 0 evaluates; every process learns its verdict, so all stop together.
  if (s.local_count < s.world) {
    std::vector<float> diverged = {std::isfinite(record.eval.loss) ? 0.0f : 1.0f};
    s.sum_over_processes(diverged);
    if (diverged.front() > 0) record.eval.loss = std::numeric_limits<double>::quiet_NaN();
  }
  ZT_CHECK(std::isfinite(record.eval.loss), "training diverged at optimizer step ", s.counters.optimizer_step,
           ": the evaluation of its weights on ", s.input.task->eval.front().rows.source, " gives loss ",
           record.eval.loss,
           s.reports.steps.empty()
               ? std::string()
               : str(" (the step had loss ", s.reports.steps.back().loss, ", gradient norm ",
                     s.reports.steps.back().grad_norm, " and learning rate ", s.reports.steps.back().lr, ")"),
           "; model.h5 and the predictions are not written");
  record.optimizer_steps = s.counters.optimizer_step;
  std::printf("epoch %lld: train_loss %.4f  %s%.1f samples/s  %.1f s\n", static_cast<long long>(epoch + 1),
              record.train_loss, shown_metrics.c_str(), record.train_samples_per_s, record.seconds);
  if (s.compute == DType::f16) {
    std::printf("  fp16 loss scale %g, %lld overflow-skipped steps so far\n", s.local_rank().scaler.scale(),
                static_cast<long long>(s.local_rank().scaler.skipped_steps()));
  }
  std::fflush(stdout);
  std::vector<tracking::Scalar> epoch_scalars = {{"train_loss", record.train_loss}};
  epoch_scalars.insert(epoch_scalars.end(), eval_scalars.begin(), eval_scalars.end());
  epoch_scalars.push_back({"train_samples_per_s", record.train_samples_per_s});
  epoch_scalars.push_back({"epoch_seconds", record.seconds});
  if (s.compute == DType::f16) {
    epoch_scalars.push_back({"loss_scale", s.local_rank().scaler.scale()});
    epoch_scalars.push_back({"skipped_steps", static_cast<double>(s.local_rank().scaler.skipped_steps())});
  }
  run.tracker.log_epoch(epoch + 1, s.counters.optimizer_step, epoch_scalars);
  return record;
}

void MrpcTrainer::write_test_predictions() {
  Impl& s = *impl_;
  const TrainConfig& c = s.config;
  for (size_t k = 0; k < s.input.test_sets.size(); ++k) {
    const data::TaskSplit& split = s.input.task->test[k];
    const EvalResult test = evaluate(*s.input.test_sets[k]);
    if (!test.metrics.empty() &&
        s.input.task->task_name == "mrpc") {  // the shipped test.tsv is GLUE's labeled set
      std::printf("test: accuracy %.4f  F1 %.4f  (%lld examples)\n", test.accuracy, test.f1,
                  static_cast<long long>(test.examples));
    } else if (!test.metrics.empty()) {
      std::string shown;
      for (const auto& [name, value] : test.metrics) shown += str(name, " ", format_fixed4(value), "  ");
      std::printf("%s: %s(%lld examples)\n", split.name.c_str(), shown.c_str(),
                  static_cast<long long>(test.examples));
    }
    if (!c.output_dir.empty() && s.main_process()) {
      data::write_task_submission(c.output_dir, *s.input.task, split,
                                  {.classes = test.predictions, .scores = test.scores});
      std::printf("GLUE test predictions: %s\n",
                  (std::filesystem::path(c.output_dir) / split.submission).string().c_str());
    }
  }
}

}  // namespace zt::optim
