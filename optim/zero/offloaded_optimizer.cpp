#include "optim/zero/offloaded_optimizer.h"

#include <algorithm>
#include <chrono>
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

bool OverlappedUnitUpdate::updated(size_t unit) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return updated_[unit] != 0 && !failed_;
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
// the other (the two swap at each update), its units in the owned blocks' order, each pending until its
// parameters went where the model reads them, and whether publish_delayed has yet to run for it (the
// caller's all-gather follows it, even when every unit landed during the backward).
struct OffloadedOptimizer::DelayedUpdate {
  std::unique_ptr<Arena> gradients_in_update;
  bool publish_pending = false;
  OverlappedUnitUpdate units;  // last: its thread ends before the shard goes
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
  update_ns_in_progress_.store(0);  // no update is in flight: the previous one landed
  if (delayed_) {
    ZT_CHECK(!delayed_->publish_pending && !delayed_->units.any_pending(),
             "ZeRO offload: a delayed update starts before the previous one landed");
    // The gradients must be on the host before the next backward rewrites them, and the previous update's
    // parameters must have gone up from the staging shard this update rewrites (publish_delayed queued
    // them unit by unit beside that update, in this order: by now only the last units' may be in flight);
    // the update then runs on a host thread and lands at the next step() (or finish_delayed_update()),
    // while the next backward downloads into the other gradient shard.
    for (const OwnedBlock& b : blocks_) copies_->wait_down(b.unit);
    copies_->join();
    copies_->wait_up();
    clear_gradients();
    std::swap(host_gradients_, delayed_->gradients_in_update);
    const Arena* gradients = delayed_->gradients_in_update.get();
    std::vector<size_t> order;
    for (const OwnedBlock& b : blocks_) order.push_back(b.unit);
    const size_t last = order.back();
    delayed_->units.start(blocks_.size(), std::move(order),
                          [this, lr, grad_scale, gradients, last](size_t unit) {
                            timed_update_block(unit, lr, grad_scale, *gradients, unit == last);
                          });
    delayed_->publish_pending = true;
    StepProfile::global().mark("optimizer.offload_delayed_start");
    return;
  }
  if (overlapped_) {
    // Every gradient on the host and the device's gradients cleared before the update leaves this thread;
    // the next forward lands each unit (acquire), the rest lands at finish_delayed_update.
    for (const OwnedBlock& b : blocks_) copies_->wait_down(b.unit);
    copies_->join();
    clear_gradients();
    const Arena* gradients = host_gradients_.get();
    const size_t last = forward_order_.back();
    overlapped_->start(blocks_.size(), forward_order_, [this, lr, grad_scale, gradients, last](size_t unit) {
      timed_update_block(unit, lr, grad_scale, *gradients, unit == last);
    });
    return;
  }
  copies_->up_after_current_stream();  // the uploads overwrite what the rank's queued work reads
  update_blocks(lr, grad_scale, *host_gradients_);
  copies_->join();  // the all-gather and the next forward read what went up
  clear_gradients();
}

// The update inside step(): each block once its gradients are down, its upload queued as it ends.
void OffloadedOptimizer::update_blocks(double lr, float grad_scale, const Arena& gradients) {
  for (const OwnedBlock& b : blocks_) {
    copies_->wait_down(b.unit);
    StepProfile::global().mark("optimizer.offload_download_wait");
    timed_update_block(b.unit, lr, grad_scale, gradients, &b == &blocks_.back());
    publish(b);
    StepProfile::global().mark("optimizer.offload_cpu_adamw");
  }
}

// update_block, its host wall time added to the update in progress; `last`: the update's last block, whose
// end makes the sum the latest update's (last_update_ms). Called by the rank's thread or an update's thread.
void OffloadedOptimizer::timed_update_block(size_t unit, double lr, float grad_scale, const Arena& gradients,
                                            bool last) {
  const auto start = std::chrono::steady_clock::now();
  update_block(unit, lr, grad_scale, gradients);
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  const int64_t total = update_ns_in_progress_.fetch_add(ns) + ns;
  if (last) last_update_ns_.store(total);
}

double OffloadedOptimizer::last_update_ms() const {
  return static_cast<double>(last_update_ns_.load()) * 1e-6;
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
  if (!delayed_) return;
  for (const OwnedBlock& b : blocks_) {
    if (delayed_->units.pending(b.unit)) delayed_->units.wait_until_updated(b.unit);  // rethrows its error
  }
}

// Unit by unit, each unit's upload is queued as soon as the thread is done with it, so the copies run
// beside the CPU update of the later units and only the last units' copies follow the update's end.
bool OffloadedOptimizer::publish_delayed(bool unit_by_unit) {
  if (!delayed_ || !delayed_->publish_pending) return false;
  delayed_->publish_pending = false;
  if (!unit_by_unit) wait_for_delayed_update();
  // The backward still queued on the rank's stream reads the parameters the uploads overwrite.
  copies_->up_after_current_stream();
  for (const OwnedBlock& b : blocks_) {
    if (!delayed_->units.pending(b.unit)) continue;  // landed during the backward
    delayed_->units.wait_until_updated(b.unit);      // rethrows the update's error
    publish(b);
    delayed_->units.mark_landed(b.unit);
  }
  // The rank's stream sat idle from the previous mark while the host waited for the CPU update; the next
  // mark (after join) adds the copies that outlast it.
  StepProfile::global().mark("optimizer.offload_delayed_wait");
  copies_->join();
  return true;
}

// Only where queuing the copy leaves the rank's thread free to launch the rest of the backward: on the CPU
// backend (a memcpy; its backward ran already) or a pipelined upload from page-locked memory (a pageable
// or synchronous one may wait for the rank's stream, stalling the launches, and a pageable one copies on
// this thread). With offload_param the copy is a host memcpy into the shard the forward gathers from: it
// stays in step().
void OffloadedOptimizer::land_delayed_unit_if_updated(size_t unit) {
  if (!delayed_ || plan_.offload_param || !delayed_->publish_pending) return;
  const bool device_copy = places_.compute_copy->kind() == MemoryKind::device;
  if (device_copy && !(copies_->pipelined() && host_params_->pinned())) return;
  if (!delayed_->units.pending(unit) || !delayed_->units.updated(unit)) return;
  copies_->up_after_current_stream();  // after the backward's last read of the unit's parameters
  publish(blocks_[unit]);
  delayed_->units.mark_landed(unit);
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
  if (delayed_) {  // everything is published from the master below
    delayed_->publish_pending = false;
    for (const OwnedBlock& b : blocks_) {
      if (delayed_->units.pending(b.unit)) delayed_->units.mark_landed(b.unit);
    }
  }
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
