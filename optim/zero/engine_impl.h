// ZeroEngine's private half: its state (ZeroEngine::Impl, OwnedBlock, SubGroup) and the helpers its
// translation units share. Included by optim/zero/engine.cpp (construction, the backward hooks),
// engine_step.cpp (the step, the offloaded update), engine_state.cpp (the state read and written piece by
// piece: checkpoints, loads, the full master) and state_bytes.cpp (what each buffer takes); nothing outside
// optim/zero includes it.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <optional>

#include "kernels/elementwise.h"
#include "optim/grad_clip.h"
#include "optim/swap/swap_preflight.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/offload_copies.h"
#include "optim/zero/swapped_host_optimizer_store.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"
#include "runtime/step_profile.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"
#endif

#include "optim/zero/buffer_views.h"
#include "optim/zero/engine.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/unit_order.h"

namespace zt::optim {
using namespace zero_views;  // NOLINT: a private header of the engine's files

struct ZeroEngine::Impl {
  DeviceKind device;
  DType compute;
  bool mixed;
  int stage;
  bool offload = false;        // master, m, v in host_state; the CPU AdamW updates them
  bool offload_param = false;  // stage 3: compute_copy is a host arena (or param_file: on disk)
  // Buffers; master_arena is null where the master is the compute copy (f32) or offloaded; with offload
  // exp_avg and exp_avg_sq are null too.
  std::unique_ptr<Arena> compute_copy, master_arena, grads, exp_avg, exp_avg_sq;
  // ZeroEngineOptions::split_master: no master_arena; the master is the compute copy (its high halves),
  // master_low (low halves, bf16-typed raw bits) and master_up (rounding bits), optim/split_master.h.
  bool split = false;
  std::unique_ptr<Arena> master_low, master_up;
  std::unique_ptr<HostOptimizerStore> host_state;
  HostMemoryBudget::Charge host_pinned_charge, host_pageable_charge;  // options.host_budget
  std::unique_ptr<Arena> host_grads;  // offload: the f32 gradient shard, copied down per block
  // Delayed update: the gradient shard the update in flight reads, while the next step's backward
  // downloads into host_grads (the two swap at each step()).
  std::unique_ptr<Arena> host_grads_in_update;
  std::unique_ptr<Arena> host_params;   // offload (not offload_param, unless delayed): compute-dtype staging
  std::unique_ptr<Arena> param_upload;  // offload_param, world > 1: one unit's slice, all-gathered from
  // Parameters on disk (offload_param with ZeroEngineOptions::param_disk): the stage-3 shard, one record
  // per unit slice; compute_copy is null.
  std::unique_ptr<SwappedParameterShard> param_file;
  // The order the units' parameters are used in, per phase: what param_file reads ahead, and the order the
  // overlapped updates go in.
  UnitOrder order;
  std::unique_ptr<OffloadCopies> copies;  // offload: the step's D2H / H2D
  bool delayed = false;                   // offload.delayed_update
  bool publish_pending = false;           // a delayed update finished on the host, not yet published
  std::unique_ptr<Arena> bucket_embeddings, bucket_shared, bucket_layer[2];
  std::unique_ptr<Arena> gather_embeddings, gather_shared, gather_layer[2];
  std::vector<OwnedBlock> blocks;    // one per unit
  std::vector<SubGroup> sub_groups;  // offload: host store block g is sub_groups[g]
  bool first_micro = true, last_micro = true;
  // ZeroEngineOptions::gradient_memory: per unit, the (flat element offset, count) runs between its tensors
  // that gradients_ready zeroes.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gradient_gaps;
  // Stages 2/3 at world size 1: no gradient buckets. The shard is the whole model, so backward accumulates
  // straight into it (as stage 0 does into its full buffer) and the shard is cleared after each step.
  bool direct_gradients = false;
  // ZeroOffload::stream_gradients (stages 2/3 with offload): no device gradient shard (grads is null); each
  // unit's final slice goes down from its bucket. On the GPU its sum of squares and non-finite count are
  // taken then, into unit_stats (one entry per unit, read back once by step()); the CPU backend takes them
  // in step() from the host copy (after the mean over ranks, as the shard path does).
  bool streamed = false;
#ifdef ZT_WITH_CUDA
  DeviceBuffer unit_stats;
#endif
  // Whether the gradient buffer is accumulated into by backward and must be zeroed once the step read it.
  bool gradients_accumulate_in_place() const {
    return stage <= 1 || direct_gradients;
  }

#ifdef ZT_WITH_CUDA
  // The split master's elements [begin, begin + numel) as the kernels take them (begin a multiple of 32).
  gpu::SplitMaster split_master(int64_t begin, int64_t numel) const {
    ZT_CHECK(split && begin % 32 == 0, "ZeRO engine: split master view at element ", begin);
    return {view(*compute_copy, DType::bf16, begin, numel), view(*master_low, DType::bf16, begin, numel),
            view(*master_up, DType::i32, begin / 32, (numel + 31) / 32)};
  }
  gpu::SplitMaster whole_split_master() const {
    return split_master(0, static_cast<int64_t>(master_low->bytes() / 2));
  }
#endif
  const Arena& master() const {
    ZT_CHECK(!offload, "ZeRO engine: the offloaded master lives in the host store");
    ZT_CHECK(!split, "ZeRO engine: the split master has no f32 buffer (join_split_master reads it)");
    return master_arena ? *master_arena : *compute_copy;
  }
  // Offload: block b's compute-dtype values on the host (the staging shard, or the stage-3 shard itself
  // when the update may write it directly: offload_param without a delayed update). Not with the shard on
  // disk and no delayed update: begin_params_write.
  Tensor params_on_host(const OwnedBlock& b) const {
    return view(offload_param && !delayed ? *compute_copy : *host_params, compute, b.master, b.numel);
  }
  // Offload: where the CPU writes block b's compute-dtype values, until end_params_write(b): params_on_host,
  // or with the shard on disk (and no delayed update) the buffer of b's record — read first when
  // `keep_unwritten` (the AdamW writes only the block's tensor ranges, not the padding between units).
  bool params_in_file() const {
    return param_file && !delayed;
  }
  Tensor begin_params_write(const OwnedBlock& b, bool keep_unwritten) {
    if (!params_in_file()) return params_on_host(b);
    const Tensor values = param_file->acquire(b.unit, keep_unwritten);
    if (keep_unwritten) prefetch_parameters(b.unit, UnitPhase::update);
    return values;
  }
  void end_params_write(const OwnedBlock& b) {
    if (params_in_file()) param_file->release(b.unit, /*modified=*/true);
  }
  // Parameters on disk: reads of the records used after `unit` in `phase` (forward continues with backward,
  // backward with the update on the window's last micro-batch, else with the next forward; the update with
  // the next forward), as many as the free buffers take.
  void prefetch_parameters(size_t unit, UnitPhase phase) {
    param_file->prefetch(
        order.upcoming(unit, phase, last_micro, static_cast<size_t>(param_file->buffer_count() - 1)));
  }
  // Offload: where block b's gradients are (final after the window's last reduction) and where they go.
  Tensor device_gradients(const OwnedBlock& b) const {
    return view(*grads, DType::f32, b.grad, b.numel);
  }
  Tensor host_gradients(const OwnedBlock& b) const {
    return view(*host_grads, DType::f32, b.master, b.numel);
  }
  // Offload: a unit's gradients start down as soon as its last reduction is queued, so the download
  // overlaps the rest of backward (GPU); with a delayed update into the shard the update in flight does not
  // read (host_grads_in_update).
  std::vector<bool> downloaded;  // per unit: its final gradients went down this step
  void download(size_t unit) {
    copies->down(unit, device_gradients(blocks[unit]), host_gradients(blocks[unit]));
    downloaded[unit] = true;
  }
  void download_final_gradients(size_t unit) {
    if (offload) download(unit);
  }
  // Streamed gradients: the unit whose slice last went down from each bucket (bucket_slot), whose copy and
  // zero fill backward waits for before it writes that bucket again (acquire).
  std::optional<size_t> bucket_last_unit[4];
  // Offload: block b's updated values to where the model reads them (H2D, or into the stage-3 host shard,
  // or its record in the parameter file). Without a delayed update the stage-3 shard was written in place.
  void publish(const OwnedBlock& b) {
    if (offload_param && !delayed) return;
    if (param_file) {  // delayed: the staging slice into the record, whole
      copy_tensor(params_on_host(b), param_file->acquire(b.unit, /*read=*/false));
      param_file->release(b.unit, /*modified=*/true);
      return;
    }
    const Tensor target = view(*compute_copy, compute, b.compute, b.numel);
    if (!offload_param) {
      copies->up(params_on_host(b), target);
    } else {
      copy_tensor(params_on_host(b), target);  // host to host
    }
  }
  // The bucket's index in bucket_free: embeddings, shared, then the two layer buckets (layer l: l % 2).
  static size_t bucket_slot(const ZeroPartition& part, size_t unit) {
    if (unit == part.embeddings_unit()) return 0;
    if (unit == part.shared_unit()) return 1;
    return 2 + static_cast<size_t>(part.units()[unit].layer % 2);
  }
  // overlap_comm (GPU, world > 1; see the top of engine.h): the rank's communication stream and the events
  // that order it with the compute stream (the calling thread's current stream).
#ifdef ZT_WITH_CUDA
  struct CommOverlap {
    Stream stream;         // non-blocking, on the rank's device
    Event compute_done;    // on the compute stream: what the next comm work reads is written
    Event comm_done;       // on the comm stream: everything queued there so far
    Event gathered;        // stage 3: the last gather landed in its buffer
    Event bucket_free[4];  // stages 2/3, per bucket (bucket_slot): reduced, folded and zeroed
    // Queued comm work must end before the buffers it reads and writes go back to the allocator.
    ~CommOverlap() { (void)cudaStreamSynchronize(stream.get()); }
  };
#else
  struct CommOverlap {};
#endif
  std::unique_ptr<CommOverlap> overlap;  // null: every collective in order on the compute stream
  // overlap_optimizer (ZeroEngineOptions): the AdamW's stream and, per unit, the event its update ends at;
  // optimizer_pending[u]: the compute stream has not waited for unit u's update yet.
#ifdef ZT_WITH_CUDA
  struct OptimizerOverlap {
    Stream stream;     // non-blocking, on the rank's device
    Event step_ready;  // on the compute stream: the gradients and the norm are final
    std::vector<Event> unit_updated;
    ~OptimizerOverlap() { (void)cudaStreamSynchronize(stream.get()); }
  };
  // World size 1 on the device (early_grad_norm at stage 0, and with overlap_optimizer): each unit's sum of
  // squares taken on a stream of its own as soon as its gradients are final (gradients_ready on the window's
  // last micro-batch), beside the rest of backward, into unit_stats; `queued` counts the units queued this
  // step (all of them: step() reads those instead of a pass over every gradient).
  struct EarlyNorm {
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
  struct OptimizerOverlap {};
  struct EarlyNorm {};
#endif
  std::unique_ptr<OptimizerOverlap> optimizer_overlap;
  std::unique_ptr<EarlyNorm> early_norm;
  std::vector<char> optimizer_pending;
  // The compute stream waits for unit `unit`'s overlapped AdamW (once); for every unit.
  void compute_waits_for_update(size_t unit) {
#ifdef ZT_WITH_CUDA
    if (!optimizer_overlap || !optimizer_pending[unit]) return;
    ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), optimizer_overlap->unit_updated[unit].get(), 0));
    optimizer_pending[unit] = 0;
#else
    (void)unit;
#endif
  }
  void compute_waits_for_all_updates() {
    for (size_t u = 0; u < optimizer_pending.size(); ++u) compute_waits_for_update(u);
  }
  // Stage 3 with overlap: the layer whose gradients are ready but whose reduction waits for the next
  // gather to be queued (acquire), so that the gather the compute stream waits for is not behind it.
  std::optional<size_t> deferred_reduction;
  // overlap_update (ZeroOffload): the exact update in flight on a host thread, unit by unit in the forward's
  // order. updated[u]: the CPU is done with unit u (under overlap_mutex); landed[u]: its parameters went
  // where the model reads them (the rank's thread only). failed: the thread threw (overlapped.get rethrows).
  bool overlap_update = false;
  std::mutex overlap_mutex;
  std::condition_variable overlap_changed;
  std::vector<char> updated, landed;
  bool overlap_failed = false;
  std::future<void> overlapped;
  // overlap_update: the host waits until unit `unit`'s update is done, then (once) puts its parameters where
  // the model reads them and the current stream waits for that; land_overlapped_update: every unit, in the
  // forward's order. No-ops when no overlapped update is in flight.
  void land_overlapped_unit(size_t unit) {
    if (!overlapped.valid() || landed[unit]) return;
    {
      std::unique_lock<std::mutex> lock(overlap_mutex);
      overlap_changed.wait(lock, [&] { return updated[unit] || overlap_failed; });
    }
    if (overlap_failed) {
      landed.assign(landed.size(), 1);
      overlapped.get();  // rethrows the update's error
    }
    publish(blocks[unit]);
    copies->join();  // the compute stream waits for the upload
    landed[unit] = 1;
    if (std::all_of(landed.begin(), landed.end(), [](char x) { return x != 0; })) overlapped.get();
  }
  void land_overlapped_update() {
    for (const size_t unit : order.order(UnitPhase::forward)) land_overlapped_unit(unit);
  }
  // Either overlapped update (overlap_update on the host, overlap_optimizer on the device) of unit `unit`
  // landed where the model reads it, before a pass touches the unit; land_all: of every unit, before
  // anything reads parameters or state outside a pass.
  void land_unit(size_t unit) {
    land_overlapped_unit(unit);
    compute_waits_for_update(unit);
  }
  void land_all() {
    land_overlapped_update();
    compute_waits_for_all_updates();
  }
  // The delayed update in flight (declared last: destroyed first, so it finishes before the buffers go).
  std::future<void> pending;
  // Waits for the delayed update: the host state is complete. Its parameters still have to go where the
  // model reads them (finish_delayed_update, collective), which this rank alone must not start: a rank whose
  // own slice were new while the others' are old would train on a mix until the all-gather.
  void wait_for_delayed_update() {
    if (!pending.valid()) return;
    pending.get();  // rethrows the update's error
    publish_pending = true;
  }
  // Offload: copies `host` from (read) or into (write) the state of `kind` for shard elements [offset,
  // offset + host.size()) of unit `unit`, through the host store.
  void copy_offloaded_state(size_t unit, int kind, int64_t offset, std::span<float> host, bool write) {
    ZT_CHECK(kind >= 0 && kind <= 2, "ZeRO engine: state kind ", kind);
    wait_for_delayed_update();
    const OwnedBlock& b = blocks[unit];
    // Block elements [lo, hi), through each sub-group they touch.
    const int64_t lo = offset - b.master;
    const int64_t hi = lo + static_cast<int64_t>(host.size());
    ZT_CHECK(lo >= 0 && hi <= b.numel, "ZeRO engine: offloaded state [", lo, ", ", hi, ") outside unit ",
             unit, "'s ", b.numel, " elements");
    for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
      const SubGroup& sub = sub_groups[g];
      const int64_t from = std::max(lo, sub.begin);
      const int64_t to = std::min(hi, sub.begin + sub.numel);
      if (from >= to) continue;
      const HostStateBlock block = host_state->acquire(g);
      const std::span<float> all = kind == 0 ? block.master : kind == 1 ? block.exp_avg : block.exp_avg_sq;
      const std::span<float> state =
          all.subspan(static_cast<size_t>(from - sub.begin), static_cast<size_t>(to - from));
      const std::span<float> part = host.subspan(static_cast<size_t>(from - lo), state.size());
      if (write) {
        std::copy(part.begin(), part.end(), state.begin());
        host_state->release_deferred(g);  // the next tensor is likely in the same sub-group
      } else {
        std::copy(state.begin(), state.end(), part.begin());
        host_state->release(g, false);
      }
    }
  }
  const Arena& state(int kind) const {
    ZT_CHECK(kind >= 0 && kind <= 2, "ZeRO engine: state kind ", kind);
    return kind == 0 ? master() : kind == 1 ? *exp_avg : *exp_avg_sq;
  }

  // The per-unit buffer of a family (gather buffers or gradient buckets): layer l uses buffer l % 2, so two
  // consecutive layers never share one.
  static const Arena& unit_buffer(const ZeroPartition& part, size_t unit,
                                  const std::unique_ptr<Arena>& embeddings,
                                  const std::unique_ptr<Arena>& shared,
                                  const std::unique_ptr<Arena> (&layer)[2]) {
    if (unit == part.embeddings_unit()) return *embeddings;
    if (unit == part.shared_unit()) return *shared;
    return *layer[part.units()[unit].layer % 2];
  }
  const Arena& gather_buffer(const ZeroPartition& part, size_t unit) const {
    return unit_buffer(part, unit, gather_embeddings, gather_shared, gather_layer);
  }
  const Arena& bucket(const ZeroPartition& part, size_t unit) const {
    return unit_buffer(part, unit, bucket_embeddings, bucket_shared, bucket_layer);
  }

  ArenaOptions options(MemoryCategory category, bool zero) const {
    return {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
            .category = category,
            .zero_fill = zero};
  }
};

}  // namespace zt::optim
