// One optimizer step of MrpcTrainer: the window's micro-batches forward and backward on their ranks, then
// the engines' update.
#include <cmath>

#include "app/trainer/trainer.h"
#include "app/trainer/trainer_impl.h"
#include "runtime/step_profile.h"

namespace zt::optim {

DebertaBatch MrpcTrainer::Impl::upload(RankState& rank, data::Batch& batch) {
  // A regression head reads f32 targets (NaN: unlabeled), a classifier i64 labels.
  const bool regression = model_config.is_regression();
  if (device == DeviceKind::cpu) {
    return {batch.input_ids_tensor(), batch.attention_mask_tensor(),
            regression ? batch.scores_tensor() : batch.labels_tensor()};
  }
  auto slot = [&](const char* name, Shape shape) {
    return Tensor(rank.batch_arena->tensor(name).data(), shape, DType::i64, DeviceKind::cuda);
  };
  // The labels slot holds i64 labels or, in its first half, f32 targets.
  DebertaBatch out{slot("input_ids", {batch.batch_size, batch.seq_len}),
                   slot("attention_mask", {batch.batch_size, batch.seq_len}),
                   Tensor(rank.batch_arena->tensor("labels").data(), {batch.batch_size},
                          regression ? DType::f32 : DType::i64, DeviceKind::cuda)};
  copy_tensor(batch.input_ids_tensor(), out.input_ids);
  copy_tensor(batch.attention_mask_tensor(), out.attention_mask);
  copy_tensor(regression ? batch.scores_tensor() : batch.labels_tensor(), out.labels);
  return out;
}

StepRecord MrpcTrainer::train_step(std::vector<data::Batch>& micro_batches) {
  Impl& s = *impl_;
  const int W = s.world;
  ZT_CHECK(!micro_batches.empty() && micro_batches.size() % static_cast<size_t>(W) == 0, "train_step needs ",
           "a positive multiple of the world size (", W, ") of micro-batches, got ", micro_batches.size());
  // Micro-batch i of the window goes to rank i % W as its (i / W)-th micro-batch and draws the dropout masks
  // of global micro-step micro_step + i: world W with accumulation k sees the batches and masks of world 1
  // with accumulation W k, in the same order.
  const int64_t per_rank = static_cast<int64_t>(micro_batches.size()) / W;
  // run_glue_no_trainer divides each micro-batch loss by gradient_accumulation_steps (also on a short last
  // window at the end of an epoch), so the gradient is the mean over the configured window; the ranks'
  // gradients are then averaged. fp16 multiplies by the current loss scale as well.
  std::vector<double> losses(micro_batches.size(), 0.0);
  std::vector<ZeroStepResult> results(static_cast<size_t>(W));
  StepRecord record;
  record.step = s.counters.optimizer_step;
  record.lr = s.lr_at(s.counters.scheduler_step);
  record.loss_scale = s.local_rank().scaler.scale();
  StepProfile::global().mark_start();
  s.run_ranks([&](int r) {
    RankState& rank = s.at(r);
    // Segment marks (mark_wall_clock) anywhere below charge rank 0's breakdown; no-ops on other ranks.
    WallClockScope wall_clock(r == 0 ? s.reports.wall_clock.get() : nullptr);
    if (r == 0 && s.reports.wall_clock) s.reports.wall_clock->start_step();
    const float loss_scale =
        static_cast<float>(rank.scaler.scale()) / static_cast<float>(s.config.gradient_accumulation_steps);
    for (int64_t j = 0; j < per_rank; ++j) {
      const size_t i = static_cast<size_t>(j * W + r);
      const DebertaBatch inputs = s.upload(rank, micro_batches[i]);
      const float loss = rank.model->forward(
          rank.engine->parameter_handles(), inputs,
          {.training = true, .seed = s.config.seed, .step = static_cast<uint64_t>(s.counters.micro_step) + i},
          rank.engine.get());
      ZT_CHECK(std::isfinite(loss), "training diverged at optimizer step ", s.counters.optimizer_step + 1,
               ": the loss of its micro-batch ", s.counters.micro_step + static_cast<int64_t>(i), " (rank ",
               r, ") is ", loss, s.last_finite_step());
      mark_wall_clock("forward");
      rank.engine->begin_backward(j == 0, j + 1 == per_rank);
      rank.model->backward(rank.engine->parameter_handles(), rank.engine->gradient_handles(), loss_scale,
                           rank.engine.get());
      mark_wall_clock("backward");
      losses[i] = loss;
    }
    results[static_cast<size_t>(r)] = rank.engine->step(record.lr, rank.scaler);
    mark_wall_clock("optimizer");
  });
  s.counters.micro_step += static_cast<int64_t>(micro_batches.size());
  if (s.local_count < W) {
    // A process group: every process learns every micro-batch's loss (each nonzero on exactly one rank, so
    // the sum is exact) and whether any process was asked to stop, so all stop after the same step.
    std::vector<float> values(losses.begin(), losses.end());
    values.push_back(stop_requested() ? 1.0f : 0.0f);
    s.sum_over_processes(values);
    for (size_t i = 0; i < losses.size(); ++i) losses[i] = values[i];
    s.group_stop = values.back() > 0;
  }
  double loss_sum = 0;
  for (double l : losses) loss_sum += l;
  record.loss = loss_sum / static_cast<double>(micro_batches.size());
  // Every rank computes the same norm and overflow verdict.
  record.grad_norm = results[static_cast<size_t>(s.first_rank)].grad_norm;
  record.skipped = !results[static_cast<size_t>(s.first_rank)].applied;
  // fp16 skips an overflowing step and lowers its loss scale; in f32 and bf16 a gradient norm that is not
  // finite has already been applied to the weights.
  ZT_CHECK(std::isfinite(record.grad_norm) || s.compute == DType::f16, "training diverged at optimizer step ",
           s.counters.optimizer_step + 1, ": its gradient norm is ", record.grad_norm, " (loss ", record.loss,
           ")", s.last_finite_step());
  StepProfile::global().mark("optimizer");
  ++s.counters.optimizer_step;
  if (!record.skipped) ++s.counters.scheduler_step;
  s.reports.steps.push_back(record);
  if (s.reports.callback) s.reports.callback(record);
  return record;
}

}  // namespace zt::optim
