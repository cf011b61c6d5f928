#include "optim/zero/engine.h"

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

namespace zt::optim {
namespace {

// The stream device work is queued on: the calling (rank) thread's current stream (runtime/stream.h).
#ifdef ZT_WITH_CUDA
cudaStream_t work_stream() {
  return current_stream();
}
#endif

// Collectives are queued on the rank's current stream too (ordered with its compute without host syncs).
CommStream work_comm_stream() {
#ifdef ZT_WITH_CUDA
  return current_stream();
#else
  return nullptr;
#endif
}

ArenaLayout flat_layout(int64_t numel, DType dtype) {
  ArenaLayout layout;
  layout.add({"flat", Shape{numel}, dtype});
  return layout;
}

// A 1-D view of `numel` elements at element `offset` of a buffer.
Tensor view(const Arena& arena, DType dtype, int64_t offset, int64_t numel) {
  ZT_CHECK(offset >= 0 && (offset + numel) * static_cast<int64_t>(dtype_size(dtype)) <=
                              static_cast<int64_t>(arena.bytes()),
           "ZeRO engine: view [", offset, ", ", offset + numel, ") outside ", arena.name());
  return Tensor(static_cast<char*>(arena.data()) + offset * static_cast<int64_t>(dtype_size(dtype)),
                Shape{numel}, dtype, arena.device());
}

std::span<float> host_span(const Tensor& t) {
  ZT_CHECK(t.device() == DeviceKind::cpu && t.dtype() == DType::f32, "ZeRO engine: expected a host f32 view");
  return {static_cast<float*>(t.data()), static_cast<size_t>(t.numel())};
}

// The compute-dtype values of an f32 master block, into a host tensor of the same length (the rounding of
// kernels::copy and of the AdamW's 16-bit copy: nearest even).
void write_compute_values(std::span<const float> master, const Tensor& out) {
  ZT_CHECK(out.device() == DeviceKind::cpu && out.numel() == static_cast<int64_t>(master.size()),
           "ZeRO engine: compute values need a host tensor of ", master.size(), " elements");
  switch (out.dtype()) {
    case DType::f32:
      std::memcpy(out.data(), master.data(), master.size_bytes());
      return;
    case DType::bf16:
      for (size_t i = 0; i < master.size(); ++i) out.data_as<bf16>()[i] = float_to_bf16(master[i]);
      return;
    case DType::f16:
      for (size_t i = 0; i < master.size(); ++i) out.data_as<f16>()[i] = float_to_f16(master[i]);
      return;
    default:
      ZT_FAIL("ZeRO engine: no compute dtype ", dtype_name(out.dtype()));
  }
}

// A host tensor's elements as the AdamW's 16-bit output (nothing for f32: the caller copies the master).
Params16Out params16_of(const Tensor& t) {
  const auto n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::bf16) return std::span<bf16>(t.data_as<bf16>(), n);
  if (t.dtype() == DType::f16) return std::span<f16>(t.data_as<f16>(), n);
  return {};
}

// The offloaded state's sub-groups (store blocks) in shard elements: each unit's slice, at its shard offset,
// cut by sub_group_size. The engine's owned blocks of stages 1-3 are these slices.
std::vector<HostBlockExtent> offloaded_sub_groups(const ZeroPartition& partition, int64_t sub_group_size) {
  std::vector<HostBlockExtent> slices;
  for (const ZeroUnit& unit : partition.units()) slices.push_back({unit.shard_begin, unit.slice_numel});
  return cut_into_sub_groups(slices, sub_group_size);
}

std::vector<int64_t> numel_of(const std::vector<HostBlockExtent>& extents) {
  std::vector<int64_t> out;
  for (const HostBlockExtent& e : extents) out.push_back(e.numel);
  return out;
}

// The parts of `ranges` (relative to a block) inside the block's elements [begin, begin + numel), relative
// to `begin`: what AdamW updates in that sub-group.
std::vector<TensorRange> ranges_within(const std::vector<TensorRange>& ranges, int64_t begin, int64_t numel) {
  std::vector<TensorRange> out;
  for (const TensorRange& r : ranges) {
    const int64_t lo = std::max(r.offset, begin);
    const int64_t hi = std::min(r.offset + r.numel, begin + numel);
    if (lo < hi) out.push_back({lo - begin, hi - lo, r.weight_decay});
  }
  return out;
}

// The rank's slice of each unit, in unit order: the records of the parameter file (parameters on disk).
std::vector<int64_t> unit_slices(const ZeroPartition& partition) {
  std::vector<int64_t> out;
  for (const ZeroUnit& u : partition.units()) out.push_back(u.slice_numel);
  return out;
}

// The largest slice of any unit: the offload_param upload buffer.
int64_t largest_slice(const ZeroPartition& partition) {
  int64_t n = 0;
  for (const ZeroUnit& u : partition.units()) n = std::max(n, u.slice_numel);
  return n;
}

}  // namespace

bool split_master_applies(DeviceKind device, int stage, DType compute, const ZeroOffload& offload) {
  return device == DeviceKind::cuda && stage == 0 && compute == DType::bf16 && !offload.optimizer;
}

// The split master's buffers: the low halves (2 bytes an element of the f32 master's layout) and the
// rounding bits, in 32-bit words with one to spare (a unit's view starts at its first element / 32).
size_t split_master_low_bytes(size_t elements) {
  return elements * 2;
}
size_t split_master_bit_words(size_t elements) {
  return (elements + 31) / 32 + 1;
}

ZeroStateBytes zero_state_bytes(const ZeroPartition& partition, int stage, DType compute, ZeroOffload offload,
                                const std::function<size_t(size_t)>& held_by_allocator, bool split_master) {
  auto held = [&](size_t bytes) { return held_by_allocator && bytes > 0 ? held_by_allocator(bytes) : bytes; };
  const auto psi = static_cast<size_t>(partition.total_numel());
  const auto shard = static_cast<size_t>(partition.shard_numel());
  const size_t t = dtype_size(compute);
  const bool mixed = compute != DType::f32;
  const auto& units = partition.units();
  ZeroStateBytes b;
  b.compute_copy = held((stage == 3 ? shard : psi) * t);
  const bool streamed = offload.optimizer && offload.stream_gradients && stage >= 2;
  b.gradients = streamed ? 0 : held((stage <= 1 ? psi : shard) * 4);
  const size_t master_elems = stage == 0 ? psi : shard;
  // f32 training: the master is the compute copy (stages 0-2: its full buffer, stage 3: its shard).
  b.master = mixed ? held(master_elems * 4) : 0;
  if (split_master)
    b.master = held(split_master_low_bytes(master_elems)) + held(split_master_bit_words(master_elems) * 4);
  b.optimizer = 2 * held((stage == 0 ? psi : shard) * 4);
  // The buckets (f32; stages 2, 3) and the gather buffers (T; stage 3), each allocated on its own: the
  // embeddings', the shared unit's and two layers'. World size 1: the reduce-scatter is the identity and
  // backward accumulates into the shard itself, unless the gradients stream down from the buckets.
  auto bucket_set = [&](size_t element) {
    return held(static_cast<size_t>(units.front().numel) * element) +
           held(static_cast<size_t>(units.back().numel) * element) +
           2 * held(static_cast<size_t>(partition.largest_layer_unit()) * element);
  };
  if (stage >= 2 && (partition.world_size() > 1 || streamed)) b.buffers += bucket_set(4);
  if (stage == 3) b.buffers += bucket_set(t);
  if (offload.optimizer && stage >= 1) {
    b.master = 0;
    b.optimizer = 0;
    b.host_optimizer = 3 * shard * 4;  // a separate master even in f32: the device copy stays the model's
    if (offload.disk_buffers > 0) {    // the disk tier: buffers of one sub-group each (master | m | v)
      const swap::SwappedStateOptions disk{
          .directory = "",
          .rank = 0,
          .block_numel = numel_of(offloaded_sub_groups(partition, offload.sub_group_size)),
          .buffer_count = offload.disk_buffers};
      b.host_optimizer = swap::SwappedStateStore::buffer_bytes_for(disk);
      b.disk_file = swap::SwappedStateStore::file_bytes_for(disk);
    }
    b.host_gradients = (offload.delayed_update ? 2 : 1) * shard * 4;  // delayed: one shard per update
    b.host_parameters = shard * t;
    if (offload.param && stage == 3 && offload.delayed_update) b.host_parameters += shard * t;  // + staging
    if (offload.param && stage == 3) b.host_offloaded_parameters = shard * t;
    if (offload.param && stage == 3 && offload.param_disk_buffers > 0) {  // the shard's buffers, not it
      b.host_offloaded_parameters = SwappedParameterShard::buffer_bytes_for(unit_slices(partition), compute,
                                                                            offload.param_disk_buffers);
      b.host_parameters = b.host_offloaded_parameters + (offload.delayed_update ? shard * t : 0);
      b.disk_file += SwappedParameterShard::file_bytes_for(unit_slices(partition), compute);
    }
    if (offload.param && stage == 3) {  // the shard lives on the host, uploaded through a slice buffer
      b.compute_copy = 0;
      if (partition.world_size() > 1) b.buffers += held(static_cast<size_t>(largest_slice(partition)) * t);
    }
  }
  return b;
}

size_t pinned_host_bytes(const ZeroStateBytes& bytes, bool pin_optimizer, bool pin_param, bool disk_tier) {
  const size_t param = bytes.host_offloaded_parameters;
  const size_t optimizer_section = bytes.host_total() - param - (disk_tier ? bytes.host_optimizer : 0);
  return (pin_optimizer ? optimizer_section : 0) + (pin_param ? param : 0);
}

// Where the rank's state for one unit lives: element offsets into each buffer, and the tensors it updates.
struct OwnedBlock {
  size_t unit = 0;
  int64_t numel = 0;                // whole unit (stage 0) or the rank's slice
  int64_t flat = 0;                 // first element in the full flat buffer
  int64_t master = 0;               // offset in the master buffer
  int64_t moments = 0;              // offset in m and v
  int64_t grad = 0;                 // offset in the gradient buffer (full or shard accumulator)
  int64_t compute = 0;              // offset in the compute copy (full or shard)
  std::vector<TensorRange> ranges;  // relative to the block
  // Offload: the block's sub-groups, store blocks [first_sub_group, end_sub_group) (Impl::sub_groups).
  size_t first_sub_group = 0, end_sub_group = 0;
};

// Offload: one sub-group of an owned block, one block of the host store.
struct SubGroup {
  int64_t begin = 0;  // first element, relative to the owned block
  int64_t numel = 0;
  std::vector<TensorRange> ranges;  // the block's ranges inside it, relative to the sub-group
};

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
  // The order the units' parameters are used in, per phase (model/deberta_tensors.h's hook order; the
  // update goes block by block), and each unit's position in it: what param_file reads ahead.
  enum class Phase { forward, backward, update };
  std::vector<size_t> phase_order[3];
  std::vector<size_t> phase_position[3];
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
    if (keep_unwritten) prefetch_parameters(b.unit, Phase::update);
    return values;
  }
  void end_params_write(const OwnedBlock& b) {
    if (params_in_file()) param_file->release(b.unit, /*modified=*/true);
  }
  // Parameters on disk: reads of the records used after `unit` in `phase` (forward continues with backward,
  // backward with the update on the window's last micro-batch, else with the next forward; the update with
  // the next forward), as many as the free buffers take.
  void prefetch_parameters(size_t unit, Phase phase) {
    const size_t count = static_cast<size_t>(param_file->buffer_count() - 1);
    std::vector<size_t> upcoming;
    auto next_phase = [&](Phase p) {
      if (p == Phase::forward) return Phase::backward;
      if (p == Phase::backward && last_micro) return Phase::update;
      return Phase::forward;
    };
    Phase p = phase;
    size_t position = phase_position[static_cast<int>(p)][unit] + 1;
    for (int phases = 0; upcoming.size() < count && phases < 3;) {
      const std::vector<size_t>& order = phase_order[static_cast<int>(p)];
      if (position >= order.size()) {
        p = next_phase(p);
        position = 0;
        ++phases;
        continue;
      }
      const size_t next = order[position++];
      if (next != unit && std::find(upcoming.begin(), upcoming.end(), next) == upcoming.end())
        upcoming.push_back(next);
    }
    param_file->prefetch(upcoming);
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
    for (const size_t unit : phase_order[static_cast<int>(Phase::forward)]) land_overlapped_unit(unit);
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

namespace {

// The options with offload.disk_buffers set from the disk tier, so that state_bytes() and the preflight
// count the disk tier's buffers instead of the shard.
ZeroEngineOptions with_disk_buffers(ZeroEngineOptions options) {
  if (options.disk) options.offload.disk_buffers = options.disk->buffer_count;
  if (options.param_disk) options.offload.param_disk_buffers = options.param_disk->buffer_count;
  return options;
}

// One swap directory's share of the disk preflight: the optimizer state's and the parameters' files add up
// where both offloads use the same nvme_path.
struct SwapDirectoryNeed {
  std::string directory;
  uint64_t bytes = 0;
  int files = 0;
  DirectIoMode direct = DirectIoMode::automatic;
};

void add_swap_need(std::vector<SwapDirectoryNeed>& needs, const SwapDirectoryNeed& need) {
  for (SwapDirectoryNeed& n : needs) {
    if (n.directory == need.directory) {
      n.bytes += need.bytes;
      n.files += need.files;
      return;
    }
  }
  needs.push_back(need);
}

}  // namespace

ZeroEngine::ZeroEngine(const ParameterTable& table, const DebertaConfig& config, Communicator& comm,
                       ZeroEngineOptions options)
    : table_(table),
      comm_(comm),
      options_(with_disk_buffers(options)),
      partition_(table, comm.world_size()),
      adamw_(options.hyper),
      impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  ZT_CHECK(options.stage >= 0 && options.stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got ", options.stage);
  ZT_CHECK(options.device == DeviceKind::cuda || options.compute == DType::f32,
           "the CPU backend trains in f32 only");
  s.device = options.device;
  s.compute = options.compute;
  s.mixed = options.compute != DType::f32;
  s.stage = options.stage;
  s.offload = options.offload.optimizer;
  s.offload_param = options.offload.param;
  s.delayed = options.offload.delayed_update;
  ZT_CHECK(!s.delayed || s.offload,
           "the delayed parameter update needs offload_optimizer (it delays the CPU update)");
  ZT_CHECK(!s.offload || s.stage >= 1,
           "offload_optimizer needs ZeRO stage 1, 2 or 3 (stage 0 keeps no optimizer shard), got stage ",
           s.stage);
  ZT_CHECK(!s.offload_param || s.stage == 3,
           "offload_param needs ZeRO stage 3 (parameters are only partitioned there), got stage ", s.stage);
  ZT_CHECK(!s.offload_param || s.offload,
           "offload_param needs offload_optimizer too (the CPU update writes the offloaded parameter shard)");
  const int r = comm.rank();
  const int64_t shard = partition_.shard_numel();
  const auto& units = partition_.units();
  // Pinned only where a GPU copies from it; the CPU backend's "device" is the host already.
  const bool gpu = s.device == DeviceKind::cuda;
  const MemoryKind host_kind = options.pin_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  const MemoryKind param_kind = options.pin_param_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  ZT_CHECK(!options.disk || s.offload,
           "the disk tier (offload_optimizer device nvme) needs offload.optimizer");
  ZT_CHECK(!options.param_disk || s.offload_param,
           "parameters on disk (offload_param device nvme) need offload.param at ZeRO stage 3");
  std::optional<swap::SwappedStateOptions> disk_state;
  std::vector<HostBlockExtent> sub_group_extents;  // offload: the host store's blocks
  if (s.offload) {
    sub_group_extents = offloaded_sub_groups(partition_, options.offload.sub_group_size);
    // Preflight before any allocation: every rank of this process holds its own shard (with the disk tier:
    // its buffers, and its swap file on disk).
    const ZeroStateBytes bytes = zero_state_bytes(partition_, s.stage, s.compute, options_.offload);
    const auto ranks = static_cast<size_t>(std::max(1, options.ranks_sharing_host));
    if (options.disk) disk_state = swapped_state_options(*options.disk, r, numel_of(sub_group_extents));
    const size_t host = bytes.host_total() * ranks;
    HostMemoryPlan plan{.what = str("ZeRO-", s.stage, " CPU offload (",
                                    options.offload.param ? "optimizer and parameters" : "optimizer",
                                    options.disk ? str(", optimizer state on disk in sub-groups of at most ",
                                                       options.offload.sub_group_size,
                                                       " elements (zero_optimization.sub_group_size)")
                                                 : std::string(),
                                    options.param_disk ? ", parameters on disk" : "", ", ", ranks,
                                    " rank(s) in this process)")};
    const size_t pinned = pinned_host_bytes(bytes, host_kind == MemoryKind::pinned_host,
                                            param_kind == MemoryKind::pinned_host, options.disk.has_value()) *
                          ranks;
    plan.pinned_bytes = pinned;
    plan.pageable_bytes = host - pinned;
    check_host_memory_plan(
        plan, options.host_memory_limits ? *options.host_memory_limits : read_host_memory_limits());
    if (options.host_budget != nullptr) {
      const std::string what = str("rank ", r, "'s ", plan.what);
      s.host_pinned_charge = options.host_budget->charge(pinned / ranks, HostMemoryKind::pinned, what);
      s.host_pageable_charge =
          options.host_budget->charge((host - pinned) / ranks, HostMemoryKind::pageable, what);
    }
    // The disk preflight: each swap directory's files of every rank of this process.
    std::vector<SwapDirectoryNeed> needs;
    if (options.disk) {
      add_swap_need(needs, {.directory = options.disk->directory,
                            .bytes = swap::SwappedStateStore::file_bytes_for(*disk_state) * ranks,
                            .files = static_cast<int>(ranks) * (1 + options.disk->io.thread_count),
                            .direct = options.disk->direct});
    }
    if (options.param_disk) {
      add_swap_need(
          needs, {.directory = options.param_disk->directory,
                  .bytes = SwappedParameterShard::file_bytes_for(unit_slices(partition_), s.compute) * ranks,
                  .files = static_cast<int>(ranks) * (1 + options.param_disk->io.thread_count),
                  .direct = options.param_disk->direct});
    }
    for (const SwapDirectoryNeed& need : needs) {
      const swap::SwapPreflightReport report = swap::preflight_swap_directory({.directory = need.directory,
                                                                               .bytes_needed = need.bytes,
                                                                               .files_needed = need.files,
                                                                               .direct = need.direct,
                                                                               .rank = r});
      if (r == 0) {
        for (const std::string& notice : report.notices) ZT_LOG(warn) << "disk tier: " << notice;
        ZT_LOG(info) << "disk tier: " << format_memory_size(need.bytes) << " of swap files under "
                     << need.directory << " (" << format_memory_size(report.free_bytes) << " free)";
      }
    }
    if (options.disk && r == 0) {
      ZT_LOG(info) << "disk tier: optimizer state (fp32 master, m, v) on disk under "
                   << options.disk->directory << ", "
                   << format_memory_size(swap::SwappedStateStore::file_bytes_for(*disk_state))
                   << " per rank (each rank's file is the sum of its " << sub_group_extents.size()
                   << " records: the unit slices cut into sub-groups of at most "
                   << options.offload.sub_group_size << " elements, zero_optimization.sub_group_size), "
                   << options.disk->buffer_count << " buffers of "
                   << format_memory_size(bytes.host_optimizer /
                                         static_cast<size_t>(options.disk->buffer_count))
                   << " (the largest record) per rank";
    }
    if (options.param_disk && r == 0) {
      const std::vector<int64_t> slices = unit_slices(partition_);
      ZT_LOG(info) << "disk tier: parameters (the " << dtype_name(s.compute) << " stage-3 shard) on disk in "
                   << SwappedParameterShard::file_directory(options.param_disk->directory) << ", "
                   << format_memory_size(SwappedParameterShard::file_bytes_for(slices, s.compute))
                   << " per rank (" << slices.size() << " records: one per unit slice), "
                   << options.param_disk->buffer_count << " "
                   << (param_kind == MemoryKind::pinned_host ? "pinned" : "pageable") << " buffers of "
                   << format_memory_size(SwappedParameterShard::record_buffer_bytes(slices, s.compute))
                   << " (the largest record) per rank, read ahead in the order the gathers and the update "
                      "use them";
    }
    if (r == 0) {
      const bool pageable_copies =
          gpu && (host_kind == MemoryKind::host || (s.offload_param && param_kind == MemoryKind::host));
      ZT_LOG(info) << plan.what << ": " << format_memory_size(host) << " of host memory"
                   << (gpu ? str(", ", format_memory_size(pinned), " of it pinned") : std::string())
                   << (pageable_copies ? " (a pin_memory is false: the host<->device copies of that section "
                                         "run at pageable speed)"
                                       : "");
      if (s.delayed) {
        ZT_LOG(info) << "delayed parameter update ON: each step's CPU update overlaps the next step's "
                        "forward and backward, which use parameters one update old";
      }
    }
  }

  // The compute copy: full (named, the model binds it) below stage 3, the rank's shard at stage 3 (on the
  // host with offload_param).
  if (s.stage < 3) {
    s.compute_copy = std::make_unique<Arena>("parameters", partition_.layout(s.compute),
                                             s.options(MemoryCategory::parameters, true));
  } else if (s.offload_param && options.param_disk) {
    s.param_file = std::make_unique<SwappedParameterShard>(
        SwappedParameterShardOptions{.directory = options.param_disk->directory,
                                     .rank = r,
                                     .record_numel = unit_slices(partition_),
                                     .dtype = s.compute,
                                     .buffer_count = options.param_disk->buffer_count,
                                     .buffer_kind = param_kind,
                                     .direct = options.param_disk->direct},
        options.param_disk->io);
  } else if (s.offload_param) {
    s.compute_copy = std::make_unique<Arena>(
        "parameters (offloaded shard)", flat_layout(shard, s.compute),
        ArenaOptions{.kind = param_kind, .category = MemoryCategory::parameters, .zero_fill = true});
  } else {
    s.compute_copy = std::make_unique<Arena>("parameters (shard)", flat_layout(shard, s.compute),
                                             s.options(MemoryCategory::parameters, true));
  }
  s.split = options.split_master && split_master_applies(s.device, s.stage, s.compute, options.offload);
  if (s.split) {
    const auto elements = static_cast<size_t>(partition_.total_numel());
    s.master_low = std::make_unique<Arena>("master (low halves)", partition_.layout(DType::bf16),
                                           s.options(MemoryCategory::master, true));
    ZT_CHECK(s.master_low->bytes() == split_master_low_bytes(elements),
             "ZeRO engine: the master's low halves (", s.master_low->bytes(),
             " bytes) do not match the layout's ", elements, " elements");
    s.master_up = std::make_unique<Arena>(
        "master (rounding bits)",
        flat_layout(static_cast<int64_t>(split_master_bit_words(elements)), DType::i32),
        s.options(MemoryCategory::master, true));
    if (r == 0) {
      ZT_LOG(info) << "master weights: f32 kept exactly as the bf16 parameters + 16-bit low halves + a "
                      "rounding bit ("
                   << format_memory_size(s.master_low->bytes() + s.master_up->bytes()) << " instead of "
                   << format_memory_size(elements * 4) << ")";
    }
  } else if (s.mixed && !s.offload) {
    s.master_arena = std::make_unique<Arena>(
        "master", s.stage == 0 ? partition_.layout(DType::f32) : flat_layout(shard, DType::f32),
        s.options(MemoryCategory::master, true));
  }
  const bool full_state = s.stage == 0;
  auto moments = [&](const char* name) {
    return std::make_unique<Arena>(
        name, full_state ? partition_.layout(DType::f32) : flat_layout(shard, DType::f32),
        s.options(MemoryCategory::optimizer, true));
  };
  if (!s.offload) {
    s.exp_avg = moments("adam_m");
    s.exp_avg_sq = moments("adam_v");
  } else {
    const ArenaOptions host{.kind = host_kind, .category = MemoryCategory::other, .zero_fill = true};
    s.host_grads = std::make_unique<Arena>("offloaded gradients", flat_layout(shard, DType::f32), host);
    if (s.delayed)
      s.host_grads_in_update = std::make_unique<Arena>("offloaded gradients (delayed update)",
                                                       flat_layout(shard, DType::f32), host);
    if (!s.offload_param || s.delayed)
      s.host_params = std::make_unique<Arena>("parameter staging", flat_layout(shard, s.compute), host);
    if (s.offload_param && world_size() > 1)
      s.param_upload =
          std::make_unique<Arena>("parameter upload", flat_layout(largest_slice(partition_), s.compute),
                                  s.options(MemoryCategory::communication, true));
  }
  ZT_CHECK(!options.offload.stream_gradients || (s.offload && s.stage >= 2),
           "stream_gradients needs ZeRO stage 2 or 3 with offload_optimizer (it streams the gradient shard "
           "to the host), got stage ",
           s.stage, s.offload ? "" : " without offload");
  s.streamed = options.offload.stream_gradients;
  ZT_CHECK(options.gradient_memory == nullptr || s.stage == 0,
           "gradients on the activations are a stage-0 placement, asked at stage ", s.stage);
  if (options.gradient_memory != nullptr) {
    s.grads = std::make_unique<Arena>(
        Arena::over("gradients (on the activations)", partition_.layout(DType::f32), options.gradient_memory,
                    s.device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host));
    kernels::fill(s.grads->flat(DType::f32), 0.0f);  // the shared unit and the gaps start at zero
    // Per overwritten unit, the elements between its tensors (alignment and unit padding), which the forward
    // may overwrite and the gradient norm reads whole.
    s.gradient_gaps.resize(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      if (!overwrites_gradients(u)) continue;
      int64_t at = 0;
      for (const TensorRange& r : partition_.unit_ranges(u)) {
        if (r.offset > at) s.gradient_gaps[u].push_back({units[u].flat_begin + at, r.offset - at});
        at = r.offset + r.numel;
      }
      if (units[u].numel > at) s.gradient_gaps[u].push_back({units[u].flat_begin + at, units[u].numel - at});
    }
  } else if (!s.streamed) {
    s.grads = std::make_unique<Arena>(
        "gradients", s.stage <= 1 ? partition_.layout(DType::f32) : flat_layout(shard, DType::f32),
        s.options(MemoryCategory::gradients, true));
  }
#ifdef ZT_WITH_CUDA
  if (s.streamed && s.device == DeviceKind::cuda) {
    s.unit_stats = device_allocator().allocate(units.size() * sizeof(gpu::GradStats), MemoryCategory::scratch,
                                               "streamed gradient norm partials");
  }
#endif
  s.direct_gradients = s.stage >= 2 && world_size() == 1 && !s.streamed;
  if (s.stage >= 2 && !s.direct_gradients) {
    auto bucket = [&](const char* name, int64_t n) {
      return std::make_unique<Arena>(name, flat_layout(n, DType::f32),
                                     s.options(MemoryCategory::communication, true));
    };
    s.bucket_embeddings = bucket("gradient bucket (embeddings)", units.front().numel);
    s.bucket_shared = bucket("gradient bucket (shared)", units.back().numel);
    for (auto& b : s.bucket_layer) b = bucket("gradient bucket (layer)", partition_.largest_layer_unit());
  }
  if (s.stage == 3) {
    auto gather = [&](const char* name, int64_t n) {
      return std::make_unique<Arena>(name, flat_layout(n, s.compute),
                                     s.options(MemoryCategory::communication, true));
    };
    s.gather_embeddings = gather("gathered parameters (embeddings)", units.front().numel);
    s.gather_shared = gather("gathered parameters (shared)", units.back().numel);
    for (auto& g : s.gather_layer) g = gather("gathered parameters (layer)", partition_.largest_layer_unit());
  }

  // Owned blocks: stage 0 updates whole units in full buffers; the others their slice.
  for (size_t u = 0; u < units.size(); ++u) {
    const ZeroUnit& unit = units[u];
    OwnedBlock b;
    b.unit = u;
    if (s.stage == 0) {
      b.numel = unit.numel;
      b.flat = b.master = b.moments = b.grad = b.compute = unit.flat_begin;
      b.ranges = partition_.unit_ranges(u);
    } else {
      const int64_t slice = partition_.slice_begin(u, r);
      b.numel = unit.slice_numel;
      b.flat = slice;
      b.moments = unit.shard_begin;
      b.grad = s.stage == 1 ? slice : unit.shard_begin;
      b.compute = s.stage == 3 ? unit.shard_begin : slice;
      b.master = s.mixed || s.offload ? unit.shard_begin : b.compute;
      b.ranges = partition_.slice_ranges(u, r);
    }
    s.blocks.push_back(std::move(b));
  }
  if (s.offload) {
    // Each block's sub-groups, in order (offloaded_sub_groups cut the same slices the blocks are).
    size_t g = 0;
    for (OwnedBlock& b : s.blocks) {
      b.first_sub_group = g;
      int64_t begin = 0;
      while (g < sub_group_extents.size() && begin < b.numel) {
        const HostBlockExtent& e = sub_group_extents[g];
        ZT_CHECK(e.offset == b.master + begin, "ZeRO engine: sub-group ", g, " is not at element ", begin,
                 " of unit ", b.unit);
        s.sub_groups.push_back({begin, e.numel, ranges_within(b.ranges, begin, e.numel)});
        begin += e.numel;
        ++g;
      }
      if (b.numel == 0) {  // an empty slice keeps one empty sub-group
        s.sub_groups.push_back({0, 0, {}});
        ++g;
      }
      ZT_CHECK(begin == b.numel, "ZeRO engine: the sub-groups of unit ", b.unit, " cover ", begin, " of ",
               b.numel, " elements");
      b.end_sub_group = g;
    }
    ZT_CHECK(g == sub_group_extents.size(), "ZeRO engine: ", sub_group_extents.size() - g,
             " sub-groups past the last unit");
    if (disk_state) {
      s.host_state = std::make_unique<SwappedHostOptimizerStore>(*disk_state, options.disk->io);
    } else {
      s.host_state =
          std::make_unique<ResidentHostOptimizerStore>(std::move(sub_group_extents), shard, host_kind);
    }
    s.copies = std::make_unique<OffloadCopies>(s.device, options.offload.pipelined, s.blocks.size());
    s.downloaded.assign(s.blocks.size(), false);
    const bool overlap_asked = options.offload.overlap_update;
    if (overlap_asked || (options.offload.overlap_update_where_it_applies && s.device == DeviceKind::cuda)) {
      // What the overlapped update does not cover runs the update inside step(), and says so when asked.
      const char* why = s.delayed            ? "the delayed update overlaps it already"
                        : world_size() > 1   ? "world size > 1 (the ranks' all-gathers follow the update)"
                        : options.disk       ? "the optimizer state is on disk"
                        : options.param_disk ? "the parameters are on disk"
                        : s.device == DeviceKind::cuda && !s.copies->pipelined()
                            ? "the copies are not pipelined"
                            : nullptr;
      s.overlap_update = why == nullptr;
      if (why != nullptr && r == 0 && overlap_asked) {
        ZT_LOG(warn) << "overlap_update: not with this run (" << why
                     << "); the CPU update runs inside step()";
      }
      if (s.overlap_update && !overlap_asked && r == 0) {
        ZT_LOG(info)
            << "overlap_update: on (the default where it applies; exact): the CPU update runs beside "
               "the next forward, which waits for each layer's update; --no_offload_overlap_update "
               "turns it off";
      }
      // The update's threads run beside the rank's thread, which launches the forward meanwhile; with
      // every hardware thread in the AdamW that thread waits for a time slice between launches: on the
      // H200's 16 cores the overlap hid 40 ms at bs 128 and nothing at bs 40, where the forward's kernels are
      // shorter; with one core left free, 51 ms at bs 128 and 21 ms at bs 40. The AdamW is memory-bound, and
      // its results do not depend on the thread count.
      if (s.overlap_update && s.device == DeviceKind::cuda && adamw_.num_threads() > 2)
        adamw_.set_num_threads(adamw_.num_threads() - 1);
    }
  }

  {
    // The hook order of model/deberta_tensors.h: forward E, S, layers 0..n-1; backward S, layers n-1..0,
    // E; the update block by block (unit order). Parameters on disk read ahead in it; overlap_update
    // updates in the forward's order.
    using Phase = Impl::Phase;
    const size_t E = partition_.embeddings_unit(), S = partition_.shared_unit();
    std::vector<size_t> layers;
    for (size_t u = 0; u < units.size(); ++u)
      if (u != E && u != S) layers.push_back(u);
    std::vector<size_t>& forward = s.phase_order[static_cast<int>(Phase::forward)];
    forward = {E, S};
    forward.insert(forward.end(), layers.begin(), layers.end());
    std::vector<size_t>& backward = s.phase_order[static_cast<int>(Phase::backward)];
    backward = {S};
    backward.insert(backward.end(), layers.rbegin(), layers.rend());
    backward.push_back(E);
    std::vector<size_t>& update = s.phase_order[static_cast<int>(Phase::update)];
    for (size_t u = 0; u < units.size(); ++u) update.push_back(u);
    for (int p = 0; p < 3; ++p) {
      s.phase_position[p].assign(units.size(), 0);
      for (size_t i = 0; i < s.phase_order[p].size(); ++i) s.phase_position[p][s.phase_order[p][i]] = i;
    }
  }

  if (options.overlap_optimizer && (s.device != DeviceKind::cuda || s.offload) && r == 0) {
    ZT_LOG(warn) << "overlap_optimizer: not with this run ("
                 << (s.offload ? "the optimizer is offloaded: --offload_overlap_update is its overlap"
                               : "the CPU backend has no streams")
                 << "); the AdamW runs inside step()";
  }
  if (options.overlap_optimizer && s.device == DeviceKind::cuda && !s.offload) {
    // Not where a collective follows the update (stages 1/2 all-gather the slices at world size > 1, and
    // stage 3 gathers from the shard the update writes at any world size > 1) nor stage 1's clearing.
    const char* why = s.stage == 1 ? "stage 1 clears its gradient shard after the update"
                      : s.stage != 0 && world_size() > 1 ? "world size > 1 (the ranks' all-gathers follow it)"
                                                         : nullptr;
    if (why == nullptr) {
#ifdef ZT_WITH_CUDA
      s.optimizer_overlap = std::make_unique<Impl::OptimizerOverlap>();  // on the rank's current device
      s.optimizer_overlap->unit_updated.resize(units.size());
      s.optimizer_pending.assign(units.size(), 0);
#endif
    } else if (r == 0) {
      ZT_LOG(warn) << "overlap_optimizer: not with this run (" << why << "); the AdamW runs inside step()";
    }
  }
#ifdef ZT_WITH_CUDA
  // The early gradient norm: with overlap_optimizer at world size 1 (any stage it runs at), or asked for at
  // stage 0 (world size 1, the device's AdamW). Not where unit_stats already takes the streamed slices' sums.
  const bool early_norm_here = s.device == DeviceKind::cuda && !s.offload && !s.streamed && world_size() == 1;
  if (early_norm_here && (s.optimizer_overlap || (options.early_grad_norm && s.stage == 0))) {
    s.early_norm = std::make_unique<Impl::EarlyNorm>();  // on the rank's current device
    s.unit_stats = device_allocator().allocate(units.size() * sizeof(gpu::GradStats), MemoryCategory::scratch,
                                               "gradient norm partials (early)");
  }
#endif
  if (options.overlap_comm && s.device == DeviceKind::cuda && world_size() > 1) {
#ifdef ZT_WITH_CUDA
    s.overlap = std::make_unique<Impl::CommOverlap>();  // on the device current on the rank's thread
#endif
  }

  // Handles: named arenas bind by name; stage-3 parameters and stage-2/3 gradients point into the unit's
  // gather buffer / bucket (layer l uses buffer l % 2, so two consecutive layers never share one).
  auto unit_view = [&](size_t tensor, const Arena& buffer, DType dtype) {
    const ZeroUnit& unit = units[partition_.unit_of_tensor(tensor)];
    const int64_t offset = partition_.tensor_flat_offset(tensor) - unit.flat_begin;
    return Tensor(static_cast<char*>(buffer.data()) + offset * static_cast<int64_t>(dtype_size(dtype)),
                  table.entries()[tensor].shape, dtype, buffer.device());
  };
  auto index_of = [&](const std::string& name) {
    return static_cast<size_t>(&table.at(name) - table.entries().data());
  };
  if (s.stage < 3) {
    param_handles_ =
        DebertaTensors::bind(config, [&](const std::string& name) { return s.compute_copy->tensor(name); });
  } else {
    param_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      return unit_view(k, s.gather_buffer(partition_, partition_.unit_of_tensor(k)), s.compute);
    });
  }
  if (s.stage <= 1) {
    grad_handles_ =
        DebertaTensors::bind(config, [&](const std::string& name) { return s.grads->tensor(name); });
  } else if (s.direct_gradients) {  // each unit's gradients at its place in the shard
    grad_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      const ZeroUnit& unit = units[partition_.unit_of_tensor(k)];
      const Tensor in_shard = view(*s.grads, DType::f32, unit.shard_begin, unit.numel);
      const int64_t offset = partition_.tensor_flat_offset(k) - unit.flat_begin;
      return Tensor(static_cast<float*>(in_shard.data()) + offset, table.entries()[k].shape, DType::f32,
                    in_shard.device());
    });
  } else {
    grad_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      return unit_view(k, s.bucket(partition_, partition_.unit_of_tensor(k)), DType::f32);
    });
  }
}

ZeroEngine::~ZeroEngine() = default;

const SwappedParameterStats* ZeroEngine::parameter_swap_stats() const {
  return impl_->param_file ? &impl_->param_file->stats() : nullptr;
}

const swap::SwappedStateStats* ZeroEngine::optimizer_swap_stats() const {
  const auto* swapped = dynamic_cast<const SwappedHostOptimizerStore*>(impl_->host_state.get());
  return swapped != nullptr ? &swapped->store().stats() : nullptr;
}

bool ZeroEngine::overlaps_offloaded_update() const {
  return impl_->overlap_update;
}

ZeroStateBytes ZeroEngine::state_bytes() const {
  return zero_state_bytes(partition_, options_.stage, options_.compute, options_.offload, nullptr,
                          impl_->split);
}

void ZeroEngine::begin_backward(bool first, bool last) {
  // A reduction still deferred (a backward that ended on a layer) runs with the previous micro-batch's flags.
  if (impl_->deferred_reduction) {
    comm_waits_for_compute();
    reduce_deferred_on_comm();
  }
  // Stages 0/1 reduce the gradient buffer in place, which this backward accumulates into (step() waited
  // already after a window's last micro-batch; this covers a backward without a step in between).
  if (impl_->stage <= 1) compute_waits_for_comm();
  ZT_CHECK(!impl_->streamed || (first && last),
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
  return impl_->stage == 0 && unit != partition_.shared_unit();
}

kernels::GradWrite ZeroEngine::gradient_write(size_t unit) {
  return impl_->first_micro && overwrites_gradients(unit) ? kernels::GradWrite::overwrite
                                                          : kernels::GradWrite::accumulate;
}

void ZeroEngine::comm_waits_for_compute() {
#ifdef ZT_WITH_CUDA
  Impl& s = *impl_;
  if (!s.overlap) return;
  s.overlap->compute_done.record(work_stream());
  s.overlap->stream.wait(s.overlap->compute_done);
#endif
}

void ZeroEngine::reduce_on_comm(size_t unit) {
#ifdef ZT_WITH_CUDA
  Impl& s = *impl_;
  Impl::CommOverlap& o = *s.overlap;
  {
    // Collectives (work_comm_stream), the fold, the zero fill and the offload download's "after the work
    // queued so far" (OffloadCopies::down) all follow the current stream: the comm stream here.
    StreamScope on_comm(o.stream);
    reduce_unit_gradients(unit);
  }
  if (s.stage >= 2) o.bucket_free[Impl::bucket_slot(partition_, unit)].record(o.stream);
#else
  reduce_unit_gradients(unit);
#endif
}

void ZeroEngine::reduce_deferred_on_comm() {
  Impl& s = *impl_;
  if (!s.deferred_reduction) return;
  const size_t unit = *s.deferred_reduction;
  s.deferred_reduction.reset();
  reduce_on_comm(unit);
}

void ZeroEngine::compute_waits_for_comm() {
#ifdef ZT_WITH_CUDA
  Impl& s = *impl_;
  if (!s.overlap) return;
  if (s.deferred_reduction) {
    comm_waits_for_compute();
    reduce_deferred_on_comm();
  }
  s.overlap->comm_done.record(s.overlap->stream);
  ZT_CUDA_CHECK(cudaStreamWaitEvent(work_stream(), s.overlap->comm_done.get(), 0));
#endif
}

void ZeroEngine::acquire(size_t unit, Pass pass) {
  Impl& s = *impl_;
  s.land_unit(unit);  // an overlapped update of this unit, before anything reads its parameters
  // Streamed gradients: the bucket's previous slice has gone down and the bucket is zeroed (on the copy
  // stream: backward runs on while the copy of the layer before last is in flight).
  if (s.streamed && pass == Pass::backward) {
    if (const std::optional<size_t> previous = s.bucket_last_unit[Impl::bucket_slot(partition_, unit)])
      s.copies->current_stream_waits_down(*previous);
  }
#ifdef ZT_WITH_CUDA
  // Backward is about to write the unit's bucket: its previous reduction must have read and zeroed it.
  if (s.overlap && pass == Pass::backward && s.stage >= 2)
    ZT_CUDA_CHECK(cudaStreamWaitEvent(work_stream(),
                                      s.overlap->bucket_free[Impl::bucket_slot(partition_, unit)].get(), 0));
#else
  (void)pass;
#endif
  if (s.stage != 3) return;
  if (!s.overlap) {
    gather_unit(unit, pass);
    return;
  }
#ifdef ZT_WITH_CUDA
  // With overlap the gather goes on the comm stream as well (after the compute work that last read the
  // gather buffer or wrote the shard), so the rank's collectives stay on one stream in one order; the
  // reduction deferred by gradients_ready is queued behind it and overlaps this unit's backward.
  Impl::CommOverlap& o = *s.overlap;
  comm_waits_for_compute();
  {
    StreamScope on_comm(o.stream);
    gather_unit(unit, pass);
  }
  o.gathered.record(o.stream);
  ZT_CUDA_CHECK(cudaStreamWaitEvent(work_stream(), o.gathered.get(), 0));
  reduce_deferred_on_comm();
#endif
}

void ZeroEngine::gather_unit(size_t unit, Pass pass) {
  Impl& s = *impl_;
  const ZeroUnit& u = partition_.units()[unit];
  const Arena& buffer = s.gather_buffer(partition_, unit);
  const Tensor full = view(buffer, s.compute, 0, u.numel);
  // offload_param: the slice lives on the host (the shard arena or a record buffer): up first (synchronous
  // on the rank's stream: copy_tensor waits for the copy, so the host slice is free afterwards), then
  // gathered.
  auto upload_and_gather = [&](const Tensor& host_slice) {
    if (world_size() == 1) {
      copy_tensor(host_slice, full);
    } else {
      const Tensor upload = view(*s.param_upload, s.compute, 0, u.slice_numel);
      copy_tensor(host_slice, upload);
      comm_.all_gather(upload, full, work_comm_stream());
    }
  };
  if (s.param_file) {
    // The slice from its record (read ahead by the previous gathers, else read now); the next units'
    // records start before it goes up.
    const Tensor slice = s.param_file->acquire(unit);
    s.prefetch_parameters(unit, pass == Pass::forward ? Impl::Phase::forward : Impl::Phase::backward);
    upload_and_gather(slice);
    s.param_file->release(unit, /*modified=*/false);
    return;
  }
  const Tensor shard = view(*s.compute_copy, s.compute, u.shard_begin, u.slice_numel);
  if (s.offload_param) {
    upload_and_gather(shard);
    return;
  }
  if (world_size() == 1) {
    kernels::copy(shard, full);
  } else {
    comm_.all_gather(shard, full, work_comm_stream());
  }
}

void ZeroEngine::release(size_t, Pass) {}

void ZeroEngine::gradients_ready(size_t unit) {
  Impl& s = *impl_;
  s.land_unit(unit);  // an overlapped update no longer reads the gradients this reduction rewrites
  if (!s.gradient_gaps.empty()) {
    for (const auto& [begin, numel] : s.gradient_gaps[unit])
      kernels::fill(view(*s.grads, DType::f32, begin, numel), 0.0f);
  }
#ifdef ZT_WITH_CUDA
  // The early gradient norm: the unit's gradients are final on the last micro-batch; its sum of squares (the
  // slice step() would take) goes on its own stream beside the rest of backward.
  if (s.early_norm && s.last_micro) {
    Impl::EarlyNorm& e = *s.early_norm;
    const ZeroUnit& u = partition_.units()[unit];
    const Tensor slice = s.stage == 0
                             ? view(*s.grads, DType::f32, partition_.slice_begin(unit, 0), u.slice_numel)
                             : view(*s.grads, DType::f32, s.blocks[unit].grad, s.blocks[unit].numel);
    e.unit_final.record(work_stream());
    e.stream.wait(e.unit_final);
    gpu::grad_stats_async(slice, s.unit_stats.data_as<gpu::GradStats>() + unit, e.stream.get());
    ++e.queued;
  }
#endif
  if (!s.overlap) {
    reduce_unit_gradients(unit);
    return;
  }
  if (s.stage <= 1 && !s.last_micro) return;  // local accumulation: nothing to reduce yet
  comm_waits_for_compute();                   // the unit's gradients (and any deferred unit's) are written
  reduce_deferred_on_comm();
  const bool layer = unit != partition_.embeddings_unit() && unit != partition_.shared_unit();
  if (s.stage == 3 && layer) {
    s.deferred_reduction = unit;  // queued after the next unit's gather (acquire), or the next wait
    return;
  }
  reduce_on_comm(unit);
}

void ZeroEngine::reduce_unit_gradients(size_t unit) {
  Impl& s = *impl_;
  const ZeroUnit& u = partition_.units()[unit];
  const int W = world_size();
  const int r = rank();
  if (s.stage <= 1) {
    if (!s.last_micro) return;  // local accumulation until the window's last micro-batch
    if (W > 1) {
      const Tensor all = view(*s.grads, DType::f32, u.flat_begin, u.numel);
      if (s.stage == 0 || !options_.reduce_scatter) {
        comm_.all_reduce_sum(all, work_comm_stream());
      } else {
        comm_.reduce_scatter_sum(all,
                                 view(*s.grads, DType::f32, partition_.slice_begin(unit, r), u.slice_numel),
                                 work_comm_stream());
      }
    }
    s.download_final_gradients(unit);
    return;
  }
  if (s.direct_gradients) {  // world size 1: backward accumulated into the shard itself
    if (s.last_micro) s.download_final_gradients(unit);
    return;
  }
  // Stages 2/3: reduce this micro-batch's bucket, fold the rank's slice into the shard accumulator, clear
  // the bucket for the next use.
  const Arena& bucket = s.bucket(partition_, unit);
  const Tensor all = view(bucket, DType::f32, 0, u.numel);
  const Tensor mine = view(bucket, DType::f32, r * u.slice_numel, u.slice_numel);
  if (W > 1) {
    if (options_.reduce_scatter) {
      comm_.reduce_scatter_sum(all, mine, work_comm_stream());
    } else {
      comm_.all_reduce_sum(all, work_comm_stream());
    }
  }
  if (s.streamed) {  // one micro-batch: the slice is final; down from the bucket, which is zeroed once it
                     // landed
#ifdef ZT_WITH_CUDA
    if (s.device == DeviceKind::cuda)
      gpu::grad_stats_async(mine, s.unit_stats.data_as<gpu::GradStats>() + unit, work_stream());
#endif
    s.copies->down_and_zero(unit, mine, s.host_gradients(s.blocks[unit]), all);
    s.downloaded[unit] = true;
    s.bucket_last_unit[Impl::bucket_slot(partition_, unit)] = unit;
    return;
  }
  const Tensor accumulator = view(*s.grads, DType::f32, u.shard_begin, u.slice_numel);
  if (s.first_micro) {
    kernels::copy(mine, accumulator);
  } else {
    kernels::add_inplace(accumulator, mine);
  }
  kernels::fill(all, 0.0f);
  if (s.last_micro) s.download_final_gradients(unit);
}

namespace {

// Sum of one double per (rank, unit) from every rank, in the same order everywhere: the 64-bit patterns
// travel through all_gather as i64 (the communicator sums only floating types up to f32, and an f32 sum
// would cost the norm the precision of the single-process double sum).
std::vector<double> all_gather_doubles(Communicator& comm, const std::vector<double>& local,
                                       DeviceKind device) {
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(local.size());
  std::vector<int64_t> bits(local.size()), gathered(static_cast<size_t>(world * n));
  for (size_t i = 0; i < local.size(); ++i) bits[i] = std::bit_cast<int64_t>(local[i]);
  if (device == DeviceKind::cpu) {
    comm.all_gather(Tensor(bits.data(), Shape{n}, DType::i64),
                    Tensor(gathered.data(), Shape{world * n}, DType::i64));
  } else {
    Arena scratch("norm exchange", flat_layout(n * (world + 1), DType::i64),
                  {.kind = MemoryKind::device, .category = MemoryCategory::scratch});
    const Tensor in(scratch.data(), Shape{n}, DType::i64, DeviceKind::cuda);
    const Tensor out(static_cast<int64_t*>(scratch.data()) + n, Shape{world * n}, DType::i64,
                     DeviceKind::cuda);
    copy_tensor(Tensor(bits.data(), Shape{n}, DType::i64), in);
    comm.all_gather(in, out, work_comm_stream());
    copy_tensor(out, Tensor(gathered.data(), Shape{world * n}, DType::i64));
  }
  std::vector<double> out(gathered.size());
  for (size_t i = 0; i < gathered.size(); ++i) out[i] = std::bit_cast<double>(gathered[i]);
  return out;
}

// Sum of squares (double) of each gradient slice, and the count of non-finite values over all of them, added
// to `non_finite`. On the GPU one kernel per slice writes into one device array read back once: a read-back
// per slice would wait, each time, behind the offload's gradient downloads on the copy engine.
#ifdef ZT_WITH_CUDA
// The first n per-slice statistics of `results` (written on the rank's stream), read back with one copy;
// their non-finite counts added to `non_finite`.
std::vector<double> read_back_grad_stats(const DeviceBuffer& results, size_t n, double& non_finite) {
  const cudaStream_t stream = work_stream();
  std::vector<gpu::GradStats> host(n);
  ZT_CUDA_CHECK(cudaMemcpyAsync(host.data(), results.data(), n * sizeof(gpu::GradStats),
                                cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = host[i].sum_of_squares;
    non_finite += static_cast<double>(host[i].non_finite);
  }
  return out;
}
#endif

std::vector<double> sums_of_squares(const std::vector<Tensor>& slices, bool cpu, double& non_finite) {
  if (cpu) {
    std::vector<double> out(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) out[i] = sum_of_squares(host_span(slices[i]));
    return out;
  }
#ifdef ZT_WITH_CUDA
  DeviceBuffer results = device_allocator().allocate(slices.size() * sizeof(gpu::GradStats),
                                                     MemoryCategory::scratch, "gradient norm partials");
  for (size_t i = 0; i < slices.size(); ++i)
    gpu::grad_stats_async(slices[i], results.data_as<gpu::GradStats>() + i, work_stream());
  return read_back_grad_stats(results, slices.size(), non_finite);
#else
  ZT_FAIL("CUDA training needs a CUDA build");
#endif
}

}  // namespace

ZeroStepResult ZeroEngine::step(double lr, LossScaler& scaler) {
  Impl& s = *impl_;
  const int W = world_size();
  const auto& units = partition_.units();
  const size_t U = units.size();
  const bool cpu = s.device == DeviceKind::cpu;
  auto grad_block = [&](const OwnedBlock& b) { return view(*s.grads, DType::f32, b.grad, b.numel); };
  StepProfile& prof = StepProfile::global();  // offload segment marks: no-ops unless profiling is on
  compute_waits_for_comm();                   // overlap_comm: every reduction before the norm reads them
  s.land_all();                               // a step without a forward since the last
  if (s.delayed) {
    finish_delayed_update();  // the previous step's delayed update before this step's
    prof.mark("optimizer.offload_delayed_land");
  }

  // 2. Mean over ranks on the CPU (true division, as torch divides); the GPU folds 1/W into the factor.
  // With offload the gradients already downloaded are divided too (the same float operation, so the
  // host copy equals the divided device values the norm is taken from).
  if (cpu && W > 1) {
    const auto w = static_cast<float>(W);
    for (const OwnedBlock& b : s.blocks) {
      if (!s.streamed) {
        const Tensor grad = grad_block(b);
        for (float& x : host_span(grad)) x /= w;
      }
      if (s.offload && s.downloaded[b.unit]) {
        const Tensor host_grad = s.host_gradients(b);
        for (float& x : host_span(host_grad)) x /= w;
      }
    }
  }

  // 3. Sums of squares per (rank, unit) slice, rank-major. Stage 0 holds every rank's slices itself.
  std::vector<double> sums(static_cast<size_t>(W) * U, 0.0);
  double non_finite = 0;
  bool early_stats = false;
#ifdef ZT_WITH_CUDA
  // The early gradient norm: the partials gradients_ready queued (the same slices, the same kernel).
  if (s.early_norm) {
    Impl::EarlyNorm& e = *s.early_norm;
    early_stats = e.queued == U;
    e.queued = 0;
    if (early_stats) {
      e.stats_done.record(e.stream.get());
      ZT_CUDA_CHECK(cudaStreamWaitEvent(work_stream(), e.stats_done.get(), 0));
      sums = read_back_grad_stats(s.unit_stats, U, non_finite);
    }
  }
#endif
  if (early_stats) {
    // sums and non_finite are read back above
  } else if (s.stage == 0) {
    std::vector<Tensor> slices;
    for (int r = 0; r < W; ++r)
      for (size_t u = 0; u < U; ++u)
        slices.push_back(view(*s.grads, DType::f32, partition_.slice_begin(u, r), units[u].slice_numel));
    sums = sums_of_squares(slices, cpu, non_finite);
  } else {
    std::vector<double> local;
    if (s.streamed) {  // the slices went down from the buckets: the host copies, or the partials taken then
      // (step 5 checks that every unit's went down)
      if (cpu) {
        std::vector<Tensor> host_blocks;
        for (const OwnedBlock& b : s.blocks) host_blocks.push_back(s.host_gradients(b));
        local = sums_of_squares(host_blocks, true, non_finite);
      } else {
#ifdef ZT_WITH_CUDA
        local = read_back_grad_stats(s.unit_stats, U, non_finite);
#endif
      }
    } else {
      std::vector<Tensor> blocks;
      for (size_t u = 0; u < U; ++u) blocks.push_back(grad_block(s.blocks[u]));
      local = sums_of_squares(blocks, cpu, non_finite);
    }
    local.push_back(non_finite);
    if (W == 1) {
      sums.assign(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(U));
    } else {
      const std::vector<double> all = all_gather_doubles(comm_, local, s.device);
      non_finite = 0;
      for (int r = 0; r < W; ++r) {
        for (size_t u = 0; u < U; ++u)
          sums[static_cast<size_t>(r) * U + u] = all[static_cast<size_t>(r) * (U + 1) + u];
        non_finite += all[static_cast<size_t>(r) * (U + 1) + U];
      }
    }
  }
  double total = 0;
  for (double x : sums) total += x;

  const double loss_scale = scaler.scale();
  const double norm = cpu ? std::sqrt(total) : std::sqrt(total) / (loss_scale * W);
  // Buffers backward accumulates into start the next window at zero (the others are overwritten, and so are
  // stage 0's units that the next window's first backward writes: overwrites_gradients).
  auto clear_gradients = [&] {
    if (!s.gradients_accumulate_in_place()) return;
    if (s.stage != 0) return kernels::fill(s.grads->flat(DType::f32), 0.0f);
    for (size_t u = 0; u < U; ++u)
      if (!overwrites_gradients(u))
        kernels::fill(view(*s.grads, DType::f32, units[u].flat_begin, units[u].numel), 0.0f);
  };
  // 4. fp16 overflow: every rank sees the same sums, so all skip together.
  if (s.compute == DType::f16) {
    const bool overflow = non_finite > 0 || !std::isfinite(total);
    if (!scaler.update(overflow)) {
      ZT_LOG(info) << "fp16 overflow: step skipped, loss scale " << loss_scale << " -> " << scaler.scale();
      if (s.offload) {
        s.copies->join();  // the downloads read the gradients cleared next
        s.downloaded.assign(s.blocks.size(), false);
      }
      clear_gradients();
      return {std::numeric_limits<double>::infinity(), false};
    }
  }
  ZT_CHECK(std::isfinite(norm), "gradient norm is not finite (", norm, ")");

  // 5-6. Clip and update the owned blocks.
  const double coef = options_.max_grad_norm > 0 ? clip_coefficient(norm, options_.max_grad_norm) : 1.0;
  adamw_.begin_step();
  if (s.offload) {
    prof.mark("optimizer.grad_norm");
    // The factor each path applies to the gradients before AdamW: on the CPU the clip (1/W was divided in
    // step 2; scale_in_place's float product), on the GPU 1/(loss_scale W) and the clip (the kernel's).
    float grad_scale = 1.0f;
    if (cpu) {
      if (coef < 1.0) grad_scale = static_cast<float>(coef);
    } else {
      double factor = 1.0 / loss_scale;
      if (W > 1) factor /= W;
      factor *= std::min(1.0, coef);
      grad_scale = static_cast<float>(factor);
    }
    for (const OwnedBlock& b : s.blocks) {
      ZT_CHECK(s.downloaded[b.unit], "ZeRO offload: the gradients of unit ", partition_.units()[b.unit].name,
               " never went down: gradients_ready(", b.unit, ") was not called on the last micro-batch");
    }
    s.downloaded.assign(s.blocks.size(), false);
    if (s.delayed) {
      // The gradients must be on the host before the next backward rewrites them, and the previous
      // update's parameters must have gone up from the staging shard this update rewrites; the update then
      // runs on a host thread and lands at the next step() (or finish_delayed_update()), while the next
      // backward downloads into the other gradient shard.
      for (const OwnedBlock& b : s.blocks) s.copies->wait_down(b.unit);
      s.copies->join();
      s.copies->wait_up();
      clear_gradients();
      std::swap(s.host_grads, s.host_grads_in_update);
      const Arena* gradients = s.host_grads_in_update.get();
      s.pending = std::async(std::launch::async, [this, lr, grad_scale, gradients] {
        update_offloaded_blocks(lr, grad_scale, /*publish_each=*/false, *gradients);
      });
      return {norm, true};
    }
    if (s.overlap_update) {
      // Every gradient on the host and the device's gradients cleared before the update leaves this thread;
      // the next forward lands each unit (acquire), the rest lands at finish_delayed_update.
      for (const OwnedBlock& b : s.blocks) s.copies->wait_down(b.unit);
      s.copies->join();
      clear_gradients();
      s.updated.assign(s.blocks.size(), 0);
      s.landed.assign(s.blocks.size(), 0);
      s.overlap_failed = false;
      const std::vector<size_t> order = s.phase_order[static_cast<int>(Impl::Phase::forward)];
      const Arena* gradients = s.host_grads.get();
      s.overlapped = std::async(std::launch::async, [this, lr, grad_scale, gradients, order] {
        Impl& t = *impl_;
        try {
          for (const size_t unit : order) {
            update_offloaded_block(unit, lr, grad_scale, *gradients);
            const std::lock_guard<std::mutex> lock(t.overlap_mutex);
            t.updated[unit] = 1;
            t.overlap_changed.notify_all();
          }
        } catch (...) {
          const std::lock_guard<std::mutex> lock(t.overlap_mutex);
          t.overlap_failed = true;
          t.overlap_changed.notify_all();
          throw;
        }
      });
      return {norm, true};
    }
    update_offloaded_blocks(lr, grad_scale, /*publish_each=*/true, *s.host_grads);
    s.copies->join();  // the all-gather and the next forward read what went up
    clear_gradients();
  } else if (cpu) {
    if (coef < 1.0)
      for (const OwnedBlock& b : s.blocks) scale_in_place(host_span(grad_block(b)), static_cast<float>(coef));
    for (const OwnedBlock& b : s.blocks) {
      adamw_.update({host_span(view(s.master(), DType::f32, b.master, b.numel)), host_span(grad_block(b)),
                     host_span(view(*s.exp_avg, DType::f32, b.moments, b.numel)),
                     host_span(view(*s.exp_avg_sq, DType::f32, b.moments, b.numel))},
                    b.ranges, lr);
    }
    clear_gradients();
  } else {
#ifdef ZT_WITH_CUDA
    double factor = 1.0 / loss_scale;
    if (W > 1) factor /= W;
    factor *= std::min(1.0, coef);
    const AdamWStepScalars scalars = adamw_step_scalars(adamw_.hyper(), lr, adamw_.step_count());
    // In unit order on the compute stream; with overlap_optimizer in the forward's order on the optimizer
    // stream, after everything the compute stream queued (backward, the norm), each unit's end recorded for
    // the next pass to wait for (acquire).
    Impl::OptimizerOverlap* o = s.optimizer_overlap.get();
    cudaStream_t stream = work_stream();
    if (o != nullptr) {
      o->step_ready.record(stream);
      o->stream.wait(o->step_ready);
      stream = o->stream.get();
    }
    using Phase = Impl::Phase;
    for (const size_t u : s.phase_order[static_cast<int>(o != nullptr ? Phase::forward : Phase::update)]) {
      const OwnedBlock& b = s.blocks[u];
      // Zeroed for the next window unless its first backward writes them.
      const bool zero_grads = (s.stage == 0 && !overwrites_gradients(u)) || s.direct_gradients;
      if (s.split) {
        ZT_CHECK(b.master == b.compute, "ZeRO engine: the split master needs the compute copy's offsets");
        gpu::adamw_update_split_master(scalars, s.split_master(b.master, b.numel), grad_block(b),
                                       view(*s.exp_avg, DType::f32, b.moments, b.numel),
                                       view(*s.exp_avg_sq, DType::f32, b.moments, b.numel), b.ranges, stream,
                                       static_cast<float>(factor), zero_grads);
      } else {
        gpu::adamw_update(scalars, view(s.master(), DType::f32, b.master, b.numel), grad_block(b),
                          view(*s.exp_avg, DType::f32, b.moments, b.numel),
                          view(*s.exp_avg_sq, DType::f32, b.moments, b.numel), b.ranges,
                          s.mixed ? view(*s.compute_copy, s.compute, b.compute, b.numel) : Tensor(), stream,
                          static_cast<float>(factor), zero_grads);
      }
      if (o != nullptr) {
        o->unit_updated[u].record(stream);
        s.optimizer_pending[u] = 1;
      }
    }
    if (o != nullptr) return {norm, true};  // no stage 1, no all-gather below with overlap_optimizer
    if (s.stage == 1) clear_gradients();
#endif
  }
  // 7. Stages 1/2: everyone's updated slices into everyone's compute copy.
  gather_updated_compute_copy();
  return {norm, true};
}

void ZeroEngine::update_offloaded_blocks(double lr, float grad_scale, bool publish_each,
                                         const Arena& gradients) {
  Impl& s = *impl_;
  for (const OwnedBlock& b : s.blocks) {
    // A delayed update (on its own thread) starts with every block on the host: step() waited for them.
    if (publish_each) s.copies->wait_down(b.unit);
    // Segment marks only on the rank's thread (StepProfile is single-threaded): not in a delayed update.
    if (publish_each) StepProfile::global().mark("optimizer.offload_download_wait");
    update_offloaded_block(b.unit, lr, grad_scale, gradients);
    if (publish_each) {
      s.publish(b);
      StepProfile::global().mark("optimizer.offload_cpu_adamw");
    }
  }
}

void ZeroEngine::update_offloaded_block(size_t unit, double lr, float grad_scale, const Arena& gradients) {
  Impl& s = *impl_;
  const OwnedBlock& b = s.blocks[unit];
  const Tensor host_grads = view(gradients, DType::f32, b.master, b.numel);
  const Tensor staged = s.begin_params_write(b, /*keep_unwritten=*/true);
  // Sub-group by sub-group (AdamW is element-wise: the same bits as one pass over the block).
  for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
    const SubGroup& sub = s.sub_groups[g];
    const HostStateBlock state = s.host_state->acquire(g);
    const Tensor grads = host_grads.slice_rows(sub.begin, sub.begin + sub.numel);
    const Tensor out = staged.slice_rows(sub.begin, sub.begin + sub.numel);
    adamw_.update({state.master, host_span(grads), state.exp_avg, state.exp_avg_sq}, sub.ranges, lr,
                  params16_of(out), grad_scale);
    if (!s.mixed) write_compute_values(state.master, out);
    s.host_state->release(g, /*modified=*/true);
  }
  s.end_params_write(b);
}

void ZeroEngine::gather_updated_compute_copy() {
  Impl& s = *impl_;
  if (!((s.stage == 1 || s.stage == 2) && world_size() > 1)) return;
  compute_waits_for_comm();  // overlap_comm: the rank's collectives never run on two streams at once
  const auto& units = partition_.units();
  for (size_t u = 0; u < units.size(); ++u) {
    const OwnedBlock& b = s.blocks[u];
    comm_.all_gather(view(*s.compute_copy, s.compute, b.compute, b.numel),
                     view(*s.compute_copy, s.compute, units[u].flat_begin, units[u].numel),
                     work_comm_stream());
  }
}

void ZeroEngine::finish_delayed_update() {
  Impl& s = *impl_;
  s.land_all();
  s.wait_for_delayed_update();
  if (!s.publish_pending) return;
  s.publish_pending = false;
  for (const OwnedBlock& b : s.blocks) s.publish(b);
  s.copies->join();
  gather_updated_compute_copy();
}

std::vector<ZeroEngine::OwnedPiece> ZeroEngine::owned_pieces() const {
  std::vector<OwnedPiece> out;
  if (options_.stage == 0) {
    for (size_t k = 0; k < table_.size(); ++k) out.push_back({k, 0, table_.entries()[k].numel()});
  } else {
    for (const ShardPiece& p : partition_.pieces(rank())) out.push_back({p.tensor, p.tensor_offset, p.numel});
  }
  return out;
}

// Element offset of an owned piece inside the state buffer of `kind`.
static int64_t piece_state_offset(const ZeroPartition& part, int stage, bool mixed, bool offload, int rank,
                                  const ZeroEngine::OwnedPiece& p, int kind) {
  const size_t unit = part.unit_of_tensor(p.tensor);
  const ZeroUnit& u = part.units()[unit];
  const int64_t flat = part.tensor_flat_offset(p.tensor) + p.tensor_offset;
  if (stage == 0) return flat;
  const int64_t in_slice = flat - part.slice_begin(unit, rank);
  ZT_CHECK(in_slice >= 0 && in_slice + p.numel <= u.slice_numel,
           "ZeRO engine: piece outside the rank's slice");
  const bool master_is_full_compute = kind == 0 && !mixed && stage < 3 && !offload;
  return master_is_full_compute ? flat : u.shard_begin + in_slice;
}

void ZeroEngine::read_state(int kind, const OwnedPiece& piece, std::span<float> host) const {
  impl_->land_all();  // the state an overlapped update writes
  const Impl& s = *impl_;
  ZT_CHECK(static_cast<int64_t>(host.size()) == piece.numel, "ZeRO engine: read_state size mismatch");
  const int64_t offset = piece_state_offset(partition_, s.stage, s.mixed, s.offload, rank(), piece, kind);
  if (s.offload) {
    impl_->copy_offloaded_state(partition_.unit_of_tensor(piece.tensor), kind, offset, host, false);
    return;
  }
  const Tensor out(host.data(), Shape{piece.numel}, DType::f32);
  if (kind == 0 && s.split) {
    if (piece.numel == 0) return;
#ifdef ZT_WITH_CUDA
    const DeviceBuffer joined =
        device_allocator().allocate(host.size() * 4, MemoryCategory::scratch, "master (joined for a read)");
    const Tensor values(joined.data(), Shape{piece.numel}, DType::f32, DeviceKind::cuda);
    gpu::join_split_master(s.whole_split_master(), offset, values, work_stream());
    copy_tensor(values, out);
#endif
    return;
  }
  copy_tensor(view(s.state(kind), DType::f32, offset, piece.numel), out);
}

void ZeroEngine::write_state(int kind, const OwnedPiece& piece, std::span<const float> host) {
  impl_->land_all();
  const Impl& s = *impl_;
  ZT_CHECK(static_cast<int64_t>(host.size()) == piece.numel, "ZeRO engine: write_state size mismatch");
  const int64_t offset = piece_state_offset(partition_, s.stage, s.mixed, s.offload, rank(), piece, kind);
  if (s.offload) {
    impl_->copy_offloaded_state(partition_.unit_of_tensor(piece.tensor), kind, offset,
                                {const_cast<float*>(host.data()), host.size()}, true);
    return;
  }
  const Tensor in(const_cast<float*>(host.data()), Shape{piece.numel}, DType::f32);
  if (kind == 0 && s.split) {  // the compute copy (hi) is written with the master
    if (piece.numel == 0) return;
#ifdef ZT_WITH_CUDA
    const DeviceBuffer staged =
        device_allocator().allocate(host.size() * 4, MemoryCategory::scratch, "master (staged for a write)");
    const Tensor values(staged.data(), Shape{piece.numel}, DType::f32, DeviceKind::cuda);
    copy_tensor(in, values);
    gpu::write_split_master(values, s.whole_split_master(), offset, work_stream());
    ZT_CUDA_CHECK(cudaStreamSynchronize(work_stream()));  // before `staged` goes back to the allocator
#endif
    return;
  }
  copy_tensor(in, view(s.state(kind), DType::f32, offset, piece.numel));
}

void ZeroEngine::refresh_compute_copy() {
  Impl& s = *impl_;
  s.land_all();
  if (s.offload) {
    s.wait_for_delayed_update();
    s.publish_pending = false;  // everything is published from the master below
    for (const OwnedBlock& b : s.blocks) {
      // Every element of the block is written (the master's padding is zero).
      const Tensor staged = s.begin_params_write(b, /*keep_unwritten=*/false);
      for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
        const SubGroup& sub = s.sub_groups[g];
        write_compute_values(s.host_state->acquire(g).master,
                             staged.slice_rows(sub.begin, sub.begin + sub.numel));
        s.host_state->release(g, false);
      }
      s.end_params_write(b);
      s.publish(b);
    }
    s.host_state->flush();  // the loading's deferred writes (copy_offloaded_state) reach the disk tier now
    s.copies->join();
  } else if (s.mixed && !s.split) {  // the split master's high halves are the compute copy already
    for (const OwnedBlock& b : s.blocks)
      kernels::copy(view(*s.master_arena, DType::f32, b.master, b.numel),
                    view(*s.compute_copy, s.compute, b.compute, b.numel));
  }
  gather_updated_compute_copy();
}

void ZeroEngine::load_parameter(size_t tensor, std::span<const float> values) {
  impl_->land_all();
  ZT_CHECK(tensor < table_.size(), "load_parameter: tensor ", tensor, " outside the table (", table_.size(),
           " tensors)");
  ZT_CHECK(static_cast<int64_t>(values.size()) == tensor_numel(tensor),
           "load_parameter: ", tensor_name(tensor), " has ", tensor_numel(tensor), " elements, got ",
           values.size(), " values");
  for (const OwnedPiece& p : owned_pieces())
    if (p.tensor == tensor)
      write_state(0, p, values.subspan(static_cast<size_t>(p.tensor_offset), static_cast<size_t>(p.numel)));
}

void ZeroEngine::load_full_parameters(const Arena& host_f32) {
  ZT_CHECK(host_f32.device() == DeviceKind::cpu, "load_full_parameters needs a host arena");
  for (size_t k = 0; k < table_.size(); ++k) {
    const Tensor whole = host_f32.tensor(table_.entries()[k].name);
    load_parameter(k, {static_cast<const float*>(whole.data()), static_cast<size_t>(whole.numel())});
  }
  finish_loading();
}

void ZeroEngine::gather_full_master(const Arena* host_f32) {
  ZT_CHECK(host_f32 == nullptr || host_f32->device() == DeviceKind::cpu,
           "gather_full_master needs a host arena");
  TensorSink into_arena;
  if (host_f32 != nullptr) {
    into_arena = [&](size_t k, const Tensor& values) {
      copy_tensor(values, host_f32->tensor(table_.entries()[k].name));
    };
  }
  gather_full_master(into_arena);
}

void ZeroEngine::gather_full_master(const TensorSink& take) {
  Impl& s = *impl_;
  finish_delayed_update();
  compute_waits_for_comm();  // overlap_comm: its gathers on the compute stream, after the comm stream's work
  const auto& units = partition_.units();
  std::unique_ptr<Arena> unit_buffer, master_upload;
  // `buffer` as f32 [numel], grown (reallocated) when a unit needs more than it holds.
  auto scratch_f32 = [&](std::unique_ptr<Arena>& buffer, const char* name, int64_t numel) {
    if (!buffer || buffer->bytes() < static_cast<size_t>(numel) * 4)
      buffer = std::make_unique<Arena>(name, flat_layout(numel, DType::f32),
                                       s.options(MemoryCategory::scratch, false));
    return view(*buffer, DType::f32, 0, numel);
  };
  for (size_t u = 0; u < units.size(); ++u) {
    const ZeroUnit& unit = units[u];
    const OwnedBlock& b = s.blocks[u];
    // The unit's full f32 values: in the master itself at stage 0, else gathered into a unit buffer.
    Tensor full;
    if (s.stage == 0 && !s.split) {
      full = view(s.master(), DType::f32, unit.flat_begin, unit.numel);
    } else if (s.split) {
#ifdef ZT_WITH_CUDA
      full = scratch_f32(unit_buffer, "consolidation buffer", unit.numel);
      gpu::join_split_master(s.whole_split_master(), unit.flat_begin, full, work_stream());
#endif
    } else {
      full = scratch_f32(unit_buffer, "consolidation buffer", unit.numel);
      Tensor mine;
      if (s.offload) {  // the slice comes up from the host store first
        mine = scratch_f32(master_upload, "consolidation upload", b.numel);
        for (size_t g = b.first_sub_group; g < b.end_sub_group; ++g) {
          const SubGroup& sub = s.sub_groups[g];
          const std::span<float> master = s.host_state->acquire(g).master;
          copy_tensor(Tensor(master.data(), Shape{sub.numel}, DType::f32),
                      mine.slice_rows(sub.begin, sub.begin + sub.numel));
          s.host_state->release(g, false);
        }
      } else {
        mine = view(s.master(), DType::f32, b.master, b.numel);
      }
      if (world_size() == 1) {
        kernels::copy(mine, full);
      } else {
        comm_.all_gather(mine, full, work_comm_stream());
      }
    }
    if (!take) continue;  // this rank only takes part in the gathers
    for (size_t k = unit.first_tensor; k < unit.end_tensor; ++k) {
      const ParameterInfo& info = table_.entries()[k];
      const int64_t offset = partition_.tensor_flat_offset(k) - unit.flat_begin;
      take(k, Tensor(static_cast<float*>(full.data()) + offset, info.shape, DType::f32, full.device()));
    }
  }
}

}  // namespace zt::optim
