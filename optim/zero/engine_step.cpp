// ZeroEngine::step: the gradient norm, the clip factor, the AdamW on the owned blocks (on the device, or on
// the host through the offload's pipeline), and the compute copy's all-gather; the delayed update's end.
#include "optim/zero/engine_impl.h"

namespace zt::optim {

ZeroStepResult ZeroEngine::step(double lr, LossScaler& scaler) {
  Impl& s = *impl_;
  const int W = world_size();
  const bool cpu = s.device == DeviceKind::cpu;
  StepProfile& prof = StepProfile::global();  // offload segment marks: no-ops unless profiling is on
  compute_waits_for_comm();                   // overlap_comm: every reduction before the norm reads them
  s.land_all();                               // a step without a forward since the last
  // The previous step's delayed update lands before this step's starts: after this step's norm, which reads
  // only gradients (unit by unit beside the CPU update's end), or here, whole.
  const bool land_after_norm = s.plan->delayed && options_.offload.delayed_landing != DelayedLanding::whole;
  if (s.plan->delayed && !land_after_norm) {
    finish_delayed_update();
    prof.mark("optimizer.offload_delayed_land");
  }
  const GradientNorm gradient_norm(*s.plan, partition_, comm_, s.blocks, *s.reducer, s.offloaded.get(),
                                   s.streams, s.device);
  if (cpu && W > 1) gradient_norm.average_over_ranks();
  const GradientSums sums = gradient_norm.sums();
  const double total = sums.total;
  const double loss_scale = scaler.scale();
  const double norm = cpu ? std::sqrt(total) : std::sqrt(total) / (loss_scale * W);
  // 4. fp16 overflow: every rank sees the same sums, so all skip together.
  if (s.plan->compute == DType::f16) {
    const bool overflow = sums.non_finite > 0 || !std::isfinite(total);
    if (!scaler.update(overflow)) {
      ZT_LOG(info) << "fp16 overflow: step skipped, loss scale " << loss_scale << " -> " << scaler.scale();
      if (land_after_norm) finish_delayed_update();  // the next forward reads it as without the overflow
      if (s.offloaded) s.offloaded->drop_downloads();
      s.reducer->clear_after_step();
      return {std::numeric_limits<double>::infinity(), false};
    }
  }
  ZT_CHECK(std::isfinite(norm), "gradient norm is not finite (", norm, ")");

  if (land_after_norm) {
    prof.mark("optimizer.grad_norm");
    finish_delayed_update();  // before begin_step: the update in flight reads the AdamW's step count
    prof.mark("optimizer.offload_delayed_land");
  }

  // 5-6. Clip and update the owned blocks.
  const double coef = options_.max_grad_norm > 0 ? clip_coefficient(norm, options_.max_grad_norm) : 1.0;
  adamw_.begin_step();
  if (s.offloaded) {
    if (!land_after_norm) prof.mark("optimizer.grad_norm");
    // The factor the CPU update applies to the gradients: on the CPU backend the clip (1/W was divided in
    // step 2; scale_in_place's float product), on the GPU 1/(loss_scale W) and the clip (the kernel's).
    float grad_scale = 1.0f;
    if (cpu) {
      if (coef < 1.0) grad_scale = static_cast<float>(coef);
    } else {
      grad_scale = static_cast<float>(device_gradient_factor(coef, loss_scale, W));
    }
    // Partial offload: the device part's AdamW first (on the GPU queued, running while the CPU updates the
    // host part; it writes other elements than the host part's downloads and uploads read and write); the
    // gradients are cleared once, after both.
    if (s.resident) s.resident->update(lr, coef, loss_scale, /*clear_gradients=*/false);
    s.offloaded->update(lr, grad_scale, [&] { s.reducer->clear_after_step(); });
    if (s.offloaded->overlapped_update() || s.plan->delayed) return {norm, true};
  } else if (s.resident->update(lr, coef, loss_scale, /*clear_gradients=*/true)) {
    return {norm, true};  // on the optimizer stream: nothing follows it (no all-gather at world size 1)
  }
  // 7. Stages 1/2: everyone's updated slices into everyone's compute copy.
  gather_updated_compute_copy();
  return {norm, true};
}

void ZeroEngine::gather_updated_compute_copy() {
  Impl& s = *impl_;
  if (!((s.plan->stage == 1 || s.plan->stage == 2) && world_size() > 1)) return;
  compute_waits_for_comm();  // overlap_comm: the rank's collectives never run on two streams at once
  const auto& units = partition_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    const OwnedBlock& b = s.blocks[u];
    comm_.all_gather(
        view(*s.device_state->compute_copy, s.plan->compute, b.compute, b.numel),
        view(*s.device_state->compute_copy, s.plan->compute, units[u].flat_begin, units[u].numel),
        work_comm_stream());
  }
}

void ZeroEngine::finish_delayed_update() {
  Impl& s = *impl_;
  s.land_all();
  if (!s.offloaded ||
      !s.offloaded->publish_delayed(options_.offload.delayed_landing != DelayedLanding::whole))
    return;
  gather_updated_compute_copy();
}

}  // namespace zt::optim
