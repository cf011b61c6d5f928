#include "optim/zero/zero_streams.h"

#include <string>

#include "runtime/check.h"

#ifdef ZT_WITH_CUDA
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#endif

namespace zt::optim {

#ifdef ZT_WITH_CUDA
struct ZeroStreams::Comm {
  Stream stream;  // non-blocking, on the rank's device
  Event compute_done, comm_done, gathered;
  Event bucket_free[4];
  ~Comm() { (void)cudaStreamSynchronize(stream.get()); }
};

struct ZeroStreams::Optimizer {
  Stream stream;  // non-blocking, on the rank's device
  Event step_ready;
  std::vector<Event> unit_updated;
  std::vector<char> pending;  // per unit: the compute stream has not waited for its update yet
  ~Optimizer() { (void)cudaStreamSynchronize(stream.get()); }
};

struct ZeroStreams::EarlyNorm {
  Stream stream;  // non-blocking, on the rank's device
  Event unit_final, stats_done;
  size_t queued = 0;
  // The block partials of the units' statistics, for as long as the engine lives: scratch from the
  // allocator, released when queued, could be handed to the compute stream's next request while this
  // stream's kernels still write it (runtime/stream.h). One buffer, sized for the largest unit, serves
  // every unit: this one stream orders each unit's kernels after the previous unit's.
  DeviceBuffer partials;
  ~EarlyNorm() { (void)cudaStreamSynchronize(stream.get()); }
};
#else
struct ZeroStreams::Comm {};
struct ZeroStreams::Optimizer {};
struct ZeroStreams::EarlyNorm {};
#endif

ZeroStreams::ZeroStreams() = default;
ZeroStreams::~ZeroStreams() = default;

bool ZeroStreams::comm_overlap() const {
  return comm_ != nullptr;
}
bool ZeroStreams::optimizer_overlap() const {
  return optimizer_ != nullptr;
}
bool ZeroStreams::early_norm() const {
  return early_ != nullptr;
}

#ifdef ZT_WITH_CUDA

void ZeroStreams::make_comm_stream() {
  comm_ = std::make_unique<Comm>();
}

void ZeroStreams::make_optimizer_stream(size_t units) {
  optimizer_ = std::make_unique<Optimizer>();
  optimizer_->unit_updated.resize(units);
  optimizer_->pending.assign(units, 0);
}

void ZeroStreams::make_early_norm_stream(int64_t largest_slice) {
  early_ = std::make_unique<EarlyNorm>();
  early_->partials =
      device_allocator().allocate(gpu::grad_stats_scratch_bytes(largest_slice), MemoryCategory::scratch,
                                  "gradient norm block partials (early)");
}

void ZeroStreams::comm_waits_for_compute() {
  if (!comm_) return;
  comm_->compute_done.record(current_stream());
  comm_->stream.wait(comm_->compute_done);
}

void ZeroStreams::on_comm(const std::function<void()>& work) {
  if (!comm_) return work();
  // Collectives, kernels and copies that follow the current stream go on the comm stream.
  StreamScope scope(comm_->stream);
  work();
}

void ZeroStreams::record_bucket_free(size_t slot) {
  if (comm_) comm_->bucket_free[slot].record(comm_->stream);
}

void ZeroStreams::compute_waits_for_bucket_free(size_t slot) {
  if (comm_) ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), comm_->bucket_free[slot].get(), 0));
}

void ZeroStreams::compute_waits_for_comm() {
  if (!comm_) return;
  comm_->comm_done.record(comm_->stream);
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), comm_->comm_done.get(), 0));
}

void ZeroStreams::compute_waits_for_gather() {
  if (!comm_) return;
  comm_->gathered.record(comm_->stream);
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), comm_->gathered.get(), 0));
}

cudaStream_t ZeroStreams::optimizer_stream_after_compute() {
  ZT_CHECK(optimizer_ != nullptr, "ZeRO engine: no optimizer stream");
  optimizer_->step_ready.record(current_stream());
  optimizer_->stream.wait(optimizer_->step_ready);
  return optimizer_->stream.get();
}

void ZeroStreams::record_unit_updated(size_t unit) {
  optimizer_->unit_updated[unit].record(optimizer_->stream.get());
  optimizer_->pending[unit] = 1;
}

void ZeroStreams::compute_waits_for_update(size_t unit) {
  if (!optimizer_ || !optimizer_->pending[unit]) return;
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), optimizer_->unit_updated[unit].get(), 0));
  optimizer_->pending[unit] = 0;
}

void ZeroStreams::compute_waits_for_all_updates() {
  if (!optimizer_) return;
  for (size_t u = 0; u < optimizer_->pending.size(); ++u) compute_waits_for_update(u);
}

void ZeroStreams::queue_unit_norm(const Tensor& slice, gpu::GradStats* result, const std::string& unit) {
  EarlyNorm& e = *early_;
  e.unit_final.record(current_stream());
  e.stream.wait(e.unit_final);
  ZT_CHECK(gpu::grad_stats_scratch_bytes(slice.numel()) <= e.partials.size(),
           "ZeRO engine: the early norm's partials were sized for the largest unit's slice, not unit ", unit,
           "'s");
  gpu::grad_stats_async(slice, result, e.stream.get(), e.partials.data());
  ++e.queued;
}

bool ZeroStreams::take_early_norm(size_t units) {
  if (!early_) return false;
  const bool all = early_->queued == units;
  early_->queued = 0;
  if (all) {
    early_->stats_done.record(early_->stream.get());
    ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), early_->stats_done.get(), 0));
  }
  return all;
}

#else  // the CPU backend has no streams: work runs in order

void ZeroStreams::make_comm_stream() {}
void ZeroStreams::make_optimizer_stream(size_t) {}
void ZeroStreams::make_early_norm_stream(int64_t) {}
void ZeroStreams::comm_waits_for_compute() {}
void ZeroStreams::on_comm(const std::function<void()>& work) {
  work();
}
void ZeroStreams::record_bucket_free(size_t) {}
void ZeroStreams::compute_waits_for_bucket_free(size_t) {}
void ZeroStreams::compute_waits_for_comm() {}
void ZeroStreams::compute_waits_for_gather() {}
void ZeroStreams::compute_waits_for_update(size_t) {}
void ZeroStreams::compute_waits_for_all_updates() {}

#endif

}  // namespace zt::optim
