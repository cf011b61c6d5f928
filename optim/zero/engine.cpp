// ZeroEngine as the model's unit hooks: each hook sequences the pieces (the overlapped updates landed, the
// streams' waits, the gather, the reduction, the early norm). Construction is in engine_build.cpp, the step
// in engine_step.cpp, the state piece by piece in engine_state.cpp, the private state in engine_impl.h.
#include "optim/zero/engine_impl.h"

namespace zt::optim {

const SwappedParameterStats* ZeroEngine::parameter_swap_stats() const {
  return impl_->device_state->param_file ? &impl_->device_state->param_file->stats() : nullptr;
}

const swap::SwappedStateStats* ZeroEngine::optimizer_swap_stats() const {
  const auto* swapped =
      impl_->offloaded ? dynamic_cast<const SwappedHostOptimizerStore*>(&impl_->offloaded->store()) : nullptr;
  return swapped != nullptr ? &swapped->store().stats() : nullptr;
}

bool ZeroEngine::overlaps_offloaded_update() const {
  return impl_->offloaded && impl_->offloaded->overlapped_update();
}

DelayedLanding delayed_landing_named(std::string_view name) {
  if (name == "whole") return DelayedLanding::whole;
  if (name == "after_norm") return DelayedLanding::after_norm;
  ZT_CHECK(name == "in_backward", "delayed landing \"", name,
           "\": expected whole, after_norm or in_backward");
  return DelayedLanding::in_backward;
}

double ZeroEngine::offloaded_update_ms() const {
  return impl_->offloaded ? impl_->offloaded->last_update_ms() : 0.0;
}

ZeroStateBytes ZeroEngine::state_bytes() const {
  return impl_->plan->bytes();
}

void ZeroEngine::begin_backward(bool first, bool last) {
  // A reduction still deferred (a backward that ended on a layer) runs with the previous micro-batch's flags.
  if (impl_->deferred_reduction) {
    comm_waits_for_compute();
    reduce_deferred_on_comm();
  }
  // Stages 0/1 reduce the gradient buffer in place, which this backward accumulates into (step() waited
  // already after a window's last micro-batch; this covers a backward without a step in between).
  if (impl_->plan->stage <= 1) compute_waits_for_comm();
  ZT_CHECK(!impl_->plan->streamed_gradients || (first && last),
           "ZeRO offload with streamed gradients (stream_gradients) takes one micro-batch per step; with "
           "gradient accumulation the gradient shard must stay on the device (stream_gradients false)");
  impl_->first_micro = first;
  impl_->last_micro = last;
}

GradientLayout stage0_gradient_layout(const ZeroPartition& partition) {
  GradientLayout layout;
  for (const ZeroUnit& u : partition.units())
    layout.unit_begin.push_back(static_cast<size_t>(u.flat_begin) * 4);
  layout.bytes = partition.layout(DType::f32).total_bytes();
  return layout;
}

bool gradients_on_activations(const DebertaConfig& model, int stage, int64_t micro_batches_per_step) {
  return stage == 0 && micro_batches_per_step == 1 && !model.gradient_checkpointing;
}

bool ZeroEngine::overwrites_gradients(size_t unit) const {
  return impl_->reducer->overwritten_by_backward(unit);
}

kernels::GradWrite ZeroEngine::gradient_write(size_t unit) {
  return impl_->first_micro && overwrites_gradients(unit) ? kernels::GradWrite::overwrite
                                                          : kernels::GradWrite::accumulate;
}

void ZeroEngine::comm_waits_for_compute() {
  impl_->streams.comm_waits_for_compute();
}

void ZeroEngine::reduce_on_comm(size_t unit) {
  Impl& s = *impl_;
  // Collectives (work_comm_stream), the fold, the zero fill and the offload download's "after the work
  // queued so far" (OffloadCopies::down) all follow the current stream: the comm stream here.
  s.streams.on_comm([&] { reduce_unit_gradients(unit); });
  if (s.plan->stage >= 2) s.streams.record_bucket_free(UnitBuffers::slot(partition_, unit));
}

void ZeroEngine::reduce_deferred_on_comm() {
  Impl& s = *impl_;
  if (!s.deferred_reduction) return;
  const size_t unit = *s.deferred_reduction;
  s.deferred_reduction.reset();
  reduce_on_comm(unit);
}

void ZeroEngine::compute_waits_for_comm() {
  Impl& s = *impl_;
  if (!s.streams.comm_overlap()) return;
  if (s.deferred_reduction) {
    comm_waits_for_compute();
    reduce_deferred_on_comm();
  }
  s.streams.compute_waits_for_comm();
}

void ZeroEngine::acquire(size_t unit, Pass pass) {
  Impl& s = *impl_;
  s.land_unit(unit);  // an overlapped update of this unit, before anything reads its parameters
  // Streamed gradients: the bucket's previous slice has gone down and the bucket is zeroed (on the copy
  // stream: backward runs on while the copy of the layer before last is in flight).
  if (s.plan->streamed_gradients && pass == Pass::backward) {
    s.offloaded->current_stream_waits_for_bucket(UnitBuffers::slot(partition_, unit));
  }
  // Backward is about to write the unit's bucket: its previous reduction must have read and zeroed it.
  if (s.streams.comm_overlap() && pass == Pass::backward && s.plan->stage >= 2)
    s.streams.compute_waits_for_bucket_free(UnitBuffers::slot(partition_, unit));
  if (s.plan->stage != 3) return;
  if (!s.streams.comm_overlap()) {
    gather_unit(unit, pass);
    return;
  }
  // With overlap the gather goes on the comm stream as well (after the compute work that last read the
  // gather buffer or wrote the shard), so the rank's collectives stay on one stream in one order; the
  // reduction deferred by gradients_ready is queued behind it and overlaps this unit's backward.
  comm_waits_for_compute();
  s.streams.on_comm([&] { gather_unit(unit, pass); });
  s.streams.compute_waits_for_gather();
  reduce_deferred_on_comm();
}

void ZeroEngine::gather_unit(size_t unit, Pass pass) {
  impl_->gatherer->gather(unit, pass == Pass::forward ? UnitPhase::forward : UnitPhase::backward,
                          impl_->last_micro);
}

void ZeroEngine::release(size_t, Pass) {}

void ZeroEngine::gradients_ready(size_t unit) {
  Impl& s = *impl_;
  s.land_unit(unit);  // an overlapped update no longer reads the gradients this reduction rewrites
  // The backward queued so far has read the unit's parameters for the last time this step.
  if (s.offloaded && s.last_micro && options_.offload.delayed_landing == DelayedLanding::in_backward)
    s.offloaded->land_delayed_unit_if_updated(unit);
  s.reducer->zero_gaps(unit);
#ifdef ZT_WITH_CUDA
  // The early gradient norm: the unit's gradients are final on the last micro-batch; its sum of squares (the
  // slice step() would take) goes on its own stream beside the rest of backward.
  if (s.streams.early_norm() && s.last_micro) {
    const ZeroUnit& u = partition_.units()[unit];
    const Tensor slice = s.plan->stage == 0 ? view(*s.reducer->gradients(), DType::f32,
                                                   partition_.slice_begin(unit, 0), u.slice_numel)
                                            : s.reducer->block_gradients(s.blocks[unit]);
    s.streams.queue_unit_norm(slice, s.reducer->unit_stats() + unit, u.name);
  }
#endif
  if (!s.streams.comm_overlap()) {
    reduce_unit_gradients(unit);
    return;
  }
  if (s.plan->stage <= 1 && !s.last_micro) return;  // local accumulation: nothing to reduce yet
  comm_waits_for_compute();  // the unit's gradients (and any deferred unit's) are written
  reduce_deferred_on_comm();
  const bool layer = unit != partition_.embeddings_unit() && unit != partition_.shared_unit();
  if (s.plan->stage == 3 && layer) {
    s.deferred_reduction = unit;  // queued after the next unit's gather (acquire), or the next wait
    return;
  }
  reduce_on_comm(unit);
}

void ZeroEngine::reduce_unit_gradients(size_t unit) {
  impl_->reducer->reduce(unit, impl_->first_micro, impl_->last_micro);
}

}  // namespace zt::optim
