#include "optim/zero/gradient_reducer.h"

#include "kernels/elementwise.h"
#include "optim/zero/buffer_views.h"

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

GradientReducer::GradientReducer(const ZeroPlan& plan, const ZeroPartition& partition, Communicator& comm,
                                 const std::vector<OwnedBlock>& blocks, bool reduce_scatter,
                                 const ArenaOptions& device, void* gradient_memory)
    : plan_(plan), partition_(partition), comm_(comm), blocks_(blocks), reduce_scatter_(reduce_scatter) {
  const auto& units = partition.units();
  if (gradient_memory != nullptr) {
    grads_ = std::make_unique<Arena>(Arena::over("gradients (on the activations)",
                                                 partition.layout(DType::f32), gradient_memory, device.kind));
    kernels::fill(grads_->flat(DType::f32), 0.0f);  // the shared unit and the gaps start at zero
    // Per overwritten unit, the elements between its tensors (alignment and unit padding), which the forward
    // may overwrite and the gradient norm reads whole.
    gaps_.resize(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      if (!overwritten_by_backward(u)) continue;
      int64_t at = 0;
      for (const TensorRange& r : partition.unit_ranges(u)) {
        if (r.offset > at) gaps_[u].push_back({units[u].flat_begin + at, r.offset - at});
        at = r.offset + r.numel;
      }
      if (units[u].numel > at) gaps_[u].push_back({units[u].flat_begin + at, units[u].numel - at});
    }
  } else if (!plan.streamed_gradients) {
    ArenaOptions options = device;
    options.category = MemoryCategory::gradients;
    grads_ = std::make_unique<Arena>(
        "gradients",
        plan.full_gradients() ? partition.layout(DType::f32) : flat_layout(plan.shard, DType::f32), options);
  }
#ifdef ZT_WITH_CUDA
  if (plan.streamed_gradients && device.kind == MemoryKind::device)
    allocate_unit_stats("streamed gradient norm partials");
#endif
  if (plan.buckets()) {
    ArenaOptions options = device;
    options.category = MemoryCategory::communication;
    buckets_ = UnitBuffers(partition, "gradient bucket", DType::f32, options);
  }
}

#ifdef ZT_WITH_CUDA
void GradientReducer::allocate_unit_stats(const char* what) {
  unit_stats_ = device_allocator().allocate(partition_.units().size() * sizeof(gpu::GradStats),
                                            MemoryCategory::scratch, what);
}
#endif

Tensor GradientReducer::block_gradients(const OwnedBlock& b) const {
  return view(*grads_, DType::f32, b.grad, b.numel);
}

bool GradientReducer::overwritten_by_backward(size_t unit) const {
  return plan_.stage == 0 && unit != partition_.shared_unit();
}

void GradientReducer::zero_gaps(size_t unit) {
  if (gaps_.empty()) return;
  for (const auto& [begin, numel] : gaps_[unit]) kernels::fill(view(*grads_, DType::f32, begin, numel), 0.0f);
}

void GradientReducer::send_down(size_t unit) {
  if (offloaded_ != nullptr) offloaded_->download(unit);
}

void GradientReducer::reduce(size_t unit, bool first_micro, bool last_micro) {
  const ZeroUnit& u = partition_.units()[unit];
  const int W = comm_.world_size();
  const int r = comm_.rank();
  if (plan_.stage <= 1) {
    if (!last_micro) return;  // local accumulation until the window's last micro-batch
    if (W > 1) {
      const Tensor all = view(*grads_, DType::f32, u.flat_begin, u.numel);
      if (plan_.stage == 0 || !reduce_scatter_) {
        comm_.all_reduce_sum(all, work_comm_stream());
      } else {
        comm_.reduce_scatter_sum(all,
                                 view(*grads_, DType::f32, partition_.slice_begin(unit, r), u.slice_numel),
                                 work_comm_stream());
      }
    }
    send_down(unit);
    return;
  }
  if (plan_.direct_gradients) {  // world size 1: backward accumulated into the shard itself
    if (last_micro) send_down(unit);
    return;
  }
  // Stages 2/3: reduce this micro-batch's bucket, fold the rank's slice into the shard accumulator, clear
  // the bucket for the next use.
  const Arena& bucket = buckets_.at(partition_, unit);
  const Tensor all = view(bucket, DType::f32, 0, u.numel);
  const Tensor mine = view(bucket, DType::f32, r * u.slice_numel, u.slice_numel);
  if (W > 1) {
    if (reduce_scatter_) {
      comm_.reduce_scatter_sum(all, mine, work_comm_stream());
    } else {
      comm_.all_reduce_sum(all, work_comm_stream());
    }
  }
  if (plan_.streamed_gradients) {  // one micro-batch: the slice is final; down from the bucket, which is
                                   // zeroed once it landed
#ifdef ZT_WITH_CUDA
    if (bucket.device() == DeviceKind::cuda) gpu::grad_stats_async(mine, unit_stats() + unit, work_stream());
#endif
    offloaded_->download_and_zero(unit, UnitBuffers::slot(partition_, unit), mine, all);
    return;
  }
  const Tensor accumulator = view(*grads_, DType::f32, u.shard_begin, u.slice_numel);
  if (first_micro) {
    kernels::copy(mine, accumulator);
  } else {
    kernels::add_inplace(accumulator, mine);
  }
  kernels::fill(all, 0.0f);
  if (last_micro) send_down(unit);
}

void GradientReducer::clear_after_step() {
  // Only the buffers backward accumulates into (the others are overwritten, and so are stage 0's units that
  // the next window's first backward writes).
  if (!(plan_.stage <= 1 || plan_.direct_gradients)) return;
  if (plan_.stage != 0) return kernels::fill(grads_->flat(DType::f32), 0.0f);
  const auto& units = partition_.units();
  for (size_t u = 0; u < units.size(); ++u)
    if (!overwritten_by_backward(u))
      kernels::fill(view(*grads_, DType::f32, units[u].flat_begin, units[u].numel), 0.0f);
}

}  // namespace zt::optim
