#include "optim/zero/offloaded_optimizer.h"

#include <algorithm>
#include <utility>

#include "optim/zero/buffer_views.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/step_profile.h"

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

OverlappedUnitUpdate::~OverlappedUnitUpdate() = default;

void OverlappedUnitUpdate::start(size_t units, std::vector<size_t> order,
                                 std::function<void(size_t)> update) {
  updated_.assign(units, 0);
  landed_.assign(units, 0);
  failed_ = false;
  future_ = std::async(std::launch::async, [this, order = std::move(order), update = std::move(update)] {
    try {
      for (const size_t unit : order) {
        update(unit);
        const std::lock_guard<std::mutex> lock(mutex_);
        updated_[unit] = 1;
        changed_.notify_all();
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
      changed_.notify_all();
      throw;
    }
  });
}

bool OverlappedUnitUpdate::pending(size_t unit) const {
  return future_.valid() && !landed_[unit];
}

void OverlappedUnitUpdate::wait_until_updated(size_t unit) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return updated_[unit] || failed_; });
  }
  if (failed_) {
    landed_.assign(landed_.size(), 1);
    future_.get();  // rethrows the update's error
  }
}

void OverlappedUnitUpdate::mark_landed(size_t unit) {
  landed_[unit] = 1;
  if (std::all_of(landed_.begin(), landed_.end(), [](char x) { return x != 0; })) future_.get();
}

// The delayed update in flight: the gradient shard it reads, while the next step's backward downloads into
// the other (the two swap at each update), and whether its parameters still have to be published.
struct OffloadedOptimizer::DelayedUpdate {
  std::unique_ptr<Arena> gradients_in_update;
  bool publish_pending = false;
  std::future<void> pending;  // last: the thread ends before the shard goes
};

OffloadedOptimizer::OffloadedOptimizer(const ZeroPlan& plan, const ZeroPartition& partition,
                                       std::vector<OwnedBlock>& blocks,
                                       std::unique_ptr<HostOptimizerStore> store,
                                       std::vector<HostBlockExtent> extents, MemoryKind host_kind,
                                       std::unique_ptr<OffloadCopies> copies, AdamW& adamw, Places places)
    : plan_(plan),
      partition_(partition),
      blocks_(blocks),
      adamw_(adamw),
      places_(std::move(places)),
      forward_order_(UnitOrder(partition).order(UnitPhase::forward)),
      sub_groups_(owned_sub_groups(blocks, extents)),
      store_(std::move(store)),
      copies_(std::move(copies)),
      downloaded_(blocks.size(), false) {
  const ArenaOptions host{.kind = host_kind, .category = MemoryCategory::other, .zero_fill = true};
  // The host part of the shard (all of it, or a partial offload's first host_shard elements).
  host_gradients_ =
      std::make_unique<Arena>("offloaded gradients", flat_layout(plan.host_shard, DType::f32), host);
  if (plan.delayed) {
    delayed_ = std::make_unique<DelayedUpdate>();
    delayed_->gradients_in_update = std::make_unique<Arena>("offloaded gradients (delayed update)",
                                                            flat_layout(plan.host_shard, DType::f32), host);
  }
  if (plan.host_staging())
    host_params_ =
        std::make_unique<Arena>("parameter staging", flat_layout(plan.host_shard, plan.compute), host);
}

OffloadedOptimizer::~OffloadedOptimizer() = default;

void OffloadedOptimizer::enable_overlapped_update() {
  overlapped_ = std::make_unique<OverlappedUnitUpdate>();
}

// Block b's compute-dtype values on the host: the staging shard, or the stage-3 shard itself when the update
// may write it directly (offload_param without a delayed update). Not with the shard on disk and no delayed
// update: begin_params_write.
Tensor OffloadedOptimizer::params_on_host(const OwnedBlock& b) const {
  return view(plan_.offload_param && !delayed_ ? *places_.compute_copy : *host_params_, plan_.compute,
              b.master, b.numel);
}

bool OffloadedOptimizer::params_in_file() const {
  return places_.param_file != nullptr && !delayed_;
}

// Where the CPU writes block b's compute-dtype values, until end_params_write(b): params_on_host, or with the
// shard on disk (and no delayed update) the buffer of b's record, read first when `keep_unwritten` (the
// AdamW writes only the block's tensor ranges, not the padding between units).
Tensor OffloadedOptimizer::begin_params_write(const OwnedBlock& b, bool keep_unwritten) {
  if (!params_in_file()) return params_on_host(b);
  const Tensor values = places_.param_file->acquire(b.unit, keep_unwritten);
  if (keep_unwritten) places_.prefetch_after_update(b.unit);
  return values;
}

void OffloadedOptimizer::end_params_write(const OwnedBlock& b) {
  if (params_in_file()) places_.param_file->release(b.unit, /*modified=*/true);
}

// Block b's updated values to where the model reads them (H2D, or into the stage-3 host shard, or its
// record in the parameter file). Without a delayed update the stage-3 shard was written in place.
void OffloadedOptimizer::publish(const OwnedBlock& b) {
  if (plan_.offload_param && !delayed_) return;
  if (places_.param_file != nullptr) {  // delayed: the staging slice into the record, whole
    copy_tensor(params_on_host(b), places_.param_file->acquire(b.unit, /*read=*/false));
    places_.param_file->release(b.unit, /*modified=*/true);
    return;
  }
  const Tensor target = view(*places_.compute_copy, plan_.compute, b.compute, b.numel);
  if (!plan_.offload_param) {
    copies_->up(params_on_host(b), target);
  } else {
    copy_tensor(params_on_host(b), target);  // host to host
  }
}

// A unit's gradients start down as soon as its last reduction is queued, so the download overlaps the rest
// of backward (GPU); with a delayed update into the shard the update in flight does not read.
void OffloadedOptimizer::download(size_t unit) {
  const OwnedBlock& b = blocks_[unit];
  copies_->down(unit, view(*places_.device_gradients, DType::f32, b.grad, b.numel), host_gradients(unit));
  downloaded_[unit] = true;
}

void OffloadedOptimizer::download_and_zero(size_t unit, size_t slot, const Tensor& slice,
                                           const Tensor& bucket) {
  copies_->down_and_zero(unit, slice, host_gradients(unit), bucket);
  downloaded_[unit] = true;
  bucket_last_unit_[slot] = unit;
}

void OffloadedOptimizer::current_stream_waits_for_bucket(size_t slot) {
  if (const std::optional<size_t> previous = bucket_last_unit_[slot])
    copies_->current_stream_waits_down(*previous);
}

Tensor OffloadedOptimizer::host_gradients(size_t unit) const {
  const OwnedBlock& b = blocks_[unit];
  return view(*host_gradients_, DType::f32, b.master, b.numel);
}

void OffloadedOptimizer::drop_downloads() {
  copies_->join();  // the downloads read the gradients cleared next
  downloaded_.assign(blocks_.size(), false);
}

void OffloadedOptimizer::update(double lr, float grad_scale, const std::function<void()>& clear_gradients) {
  for (const OwnedBlock& b : blocks_) {
    ZT_CHECK(downloaded_[b.unit], "ZeRO offload: the gradients of unit ", partition_.units()[b.unit].name,
             " never went down: gradients_ready(", b.unit, ") was not called on the last micro-batch");
  }
  downloaded_.assign(blocks_.size(), false);
  if (delayed_) {
    // The gradients must be on the host before the next backward rewrites them, and the previous update's
    // parameters must have gone up from the staging shard this update rewrites; the update then runs on a
    // host thread and lands at the next step() (or finish_delayed_update()), while the next backward
    // downloads into the other gradient shard.
    for (const OwnedBlock& b : blocks_) copies_->wait_down(b.unit);
    copies_->join();
    copies_->wait_up();
    clear_gradients();
    std::swap(host_gradients_, delayed_->gradients_in_update);
    const Arena* gradients = delayed_->gradients_in_update.get();
    delayed_->pending = std::async(std::launch::async, [this, lr, grad_scale, gradients] {
      update_blocks(lr, grad_scale, /*publish_each=*/false, *gradients);
    });
    return;
  }
  if (overlapped_) {
    // Every gradient on the host and the device's gradients cleared before the update leaves this thread;
    // the next forward lands each unit (acquire), the rest lands at finish_delayed_update.
    for (const OwnedBlock& b : blocks_) copies_->wait_down(b.unit);
    copies_->join();
    clear_gradients();
    const Arena* gradients = host_gradients_.get();
    overlapped_->start(blocks_.size(), forward_order_, [this, lr, grad_scale, gradients](size_t unit) {
      update_block(unit, lr, grad_scale, *gradients);
    });
    return;
  }
  copies_->up_after_current_stream();  // the uploads overwrite what the rank's queued work reads
  update_blocks(lr, grad_scale, /*publish_each=*/true, *host_gradients_);
  copies_->join();  // the all-gather and the next forward read what went up
  clear_gradients();
}

void OffloadedOptimizer::update_blocks(double lr, float grad_scale, bool publish_each,
                                       const Arena& gradients) {
  for (const OwnedBlock& b : blocks_) {
    // A delayed update (on its own thread) starts with every block on the host: step() waited for them.
    if (publish_each) copies_->wait_down(b.unit);
    // Segment marks only on the rank's thread (StepProfile is single-threaded): not in a delayed update.
    if (publish_each) StepProfile::global().mark("optimizer.offload_download_wait");
    update_block(b.unit, lr, grad_scale, gradients);
    if (publish_each) {
      publish(b);
      StepProfile::global().mark("optimizer.offload_cpu_adamw");
    }
  }
}

void OffloadedOptimizer::update_block(size_t unit, double lr, float grad_scale, const Arena& gradients) {
  const OwnedBlock& b = blocks_[unit];
  const Tensor host_grads = view(gradients, DType::f32, b.master, b.numel);
  const Tensor staged = begin_params_write(b, /*keep_unwritten=*/true);
  // Sub-group by sub-group (AdamW is element-wise: the same bits as one pass over the block).
  for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
    const SubGroup& sub = sub_groups_[g];
    const HostStateBlock state = store_->acquire(g);
    const Tensor grads = host_grads.slice_rows(sub.begin, sub.begin + sub.numel);
    const Tensor out = staged.slice_rows(sub.begin, sub.begin + sub.numel);
    adamw_.update({state.master, host_span(grads), state.exp_avg, state.exp_avg_sq}, sub.ranges, lr,
                  params16_of(out), grad_scale);
    if (!plan_.mixed()) write_compute_values(state.master, out);
    store_->release(g, /*modified=*/true);
  }
  end_params_write(b);
}

void OffloadedOptimizer::land_unit(size_t unit) {
  if (!overlapped_ || !overlapped_->pending(unit)) return;
  overlapped_->wait_until_updated(unit);
  publish(blocks_[unit]);
  copies_->join();  // the compute stream waits for the upload
  overlapped_->mark_landed(unit);
}

void OffloadedOptimizer::land_all() {
  if (!overlapped_) return;
  for (const size_t unit : forward_order_) land_unit(unit);
}

// Its parameters still have to go where the model reads them (publish_delayed, collective), which this rank
// alone must not start: a rank whose own slice were new while the others' are old would train on a mix
// until the all-gather.
void OffloadedOptimizer::wait_for_delayed_update() {
  if (!delayed_ || !delayed_->pending.valid()) return;
  delayed_->pending.get();  // rethrows the update's error
  delayed_->publish_pending = true;
}

bool OffloadedOptimizer::publish_delayed() {
  wait_for_delayed_update();
  if (!delayed_ || !delayed_->publish_pending) return false;
  delayed_->publish_pending = false;
  // step() publishes before the norm: the backward still queued on the rank's stream reads the parameters
  // the uploads overwrite.
  copies_->up_after_current_stream();
  for (const OwnedBlock& b : blocks_) publish(b);
  copies_->join();
  return true;
}

void OffloadedOptimizer::copy_state(size_t unit, int kind, int64_t offset, std::span<float> host,
                                    bool write) {
  ZT_CHECK(kind >= 0 && kind <= 2, "ZeRO engine: state kind ", kind);
  wait_for_delayed_update();
  const OwnedBlock& b = blocks_[unit];
  // Block elements [lo, hi), through each sub-group they touch.
  const int64_t lo = offset - b.master;
  const int64_t hi = lo + static_cast<int64_t>(host.size());
  ZT_CHECK(lo >= 0 && hi <= b.numel, "ZeRO engine: offloaded state [", lo, ", ", hi, ") outside unit ", unit,
           "'s ", b.numel, " elements");
  for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
    const SubGroup& sub = sub_groups_[g];
    const int64_t from = std::max(lo, sub.begin);
    const int64_t to = std::min(hi, sub.begin + sub.numel);
    if (from >= to) continue;
    const HostStateBlock block = store_->acquire(g);
    const std::span<float> all = kind == 0 ? block.master : kind == 1 ? block.exp_avg : block.exp_avg_sq;
    const std::span<float> state =
        all.subspan(static_cast<size_t>(from - sub.begin), static_cast<size_t>(to - from));
    const std::span<float> part = host.subspan(static_cast<size_t>(from - lo), state.size());
    if (write) {
      std::copy(part.begin(), part.end(), state.begin());
      store_->release_deferred(g);  // the next tensor is likely in the same sub-group
    } else {
      std::copy(state.begin(), state.end(), part.begin());
      store_->release(g, false);
    }
  }
}

void OffloadedOptimizer::refresh_parameters() {
  wait_for_delayed_update();
  if (delayed_) delayed_->publish_pending = false;  // everything is published from the master below
  // The compute copy's zero fill (its arena, on the rank's stream) and any pass still queued there come
  // before the uploads that overwrite it.
  copies_->up_after_current_stream();
  for (const OwnedBlock& b : blocks_) {
    // Every element of the block is written (the master's padding is zero).
    const Tensor staged = begin_params_write(b, /*keep_unwritten=*/false);
    for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
      const SubGroup& sub = sub_groups_[g];
      write_compute_values(store_->acquire(g).master, staged.slice_rows(sub.begin, sub.begin + sub.numel));
      store_->release(g, false);
    }
    end_params_write(b);
    publish(b);
  }
  store_->flush();  // the loading's deferred writes (copy_state) reach the disk tier now
  copies_->join();
}

void OffloadedOptimizer::read_master(const OwnedBlock& b, const Tensor& out) {
  for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
    const SubGroup& sub = sub_groups_[g];
    const std::span<float> master = store_->acquire(g).master;
    copy_tensor(Tensor(master.data(), Shape{sub.numel}, DType::f32),
                out.slice_rows(sub.begin, sub.begin + sub.numel));
    store_->release(g, false);
  }
}

}  // namespace zt::optim
