// ZeroEngine: construction (the buffers, the partition's blocks, the offload's stores) and the model's
// unit hooks (acquire, gradients_ready, the reductions). The step is in engine_step.cpp, the state's
// pieces in engine_state.cpp, the private state in engine_impl.h.
#include "optim/zero/engine_impl.h"
#include "optim/zero/offload_preflight.h"

namespace zt::optim {

namespace {

// The options with offload.disk_buffers set from the disk tier, so that state_bytes() and the preflight
// count the disk tier's buffers instead of the shard.
ZeroEngineOptions with_disk_buffers(ZeroEngineOptions options) {
  if (options.disk) options.offload.disk_buffers = options.disk->buffer_count;
  if (options.param_disk) options.offload.param_disk_buffers = options.param_disk->buffer_count;
  return options;
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
    if (options.disk) disk_state = swapped_state_options(*options.disk, r, numel_of(sub_group_extents));
    OffloadHostCharges charges =
        preflight_offload(partition_, options_, r, disk_state, sub_group_extents.size());
    s.host_pinned_charge = std::move(charges.pinned);
    s.host_pageable_charge = std::move(charges.pageable);
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
  s.blocks = owned_blocks(partition_, s.stage, r, s.mixed || s.offload);
  if (s.offload) {
    s.sub_groups = owned_sub_groups(s.blocks, sub_group_extents);
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

  s.order = UnitOrder(partition_);

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
    int64_t largest = 0;
    for (const ZeroUnit& u : units) largest = std::max(largest, u.slice_numel);
    s.early_norm->partials =
        device_allocator().allocate(gpu::grad_stats_scratch_bytes(largest), MemoryCategory::scratch,
                                    "gradient norm block partials (early)");
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
  return ZeroPlan(partition_, options_.stage, options_.compute, options_.offload, impl_->split).bytes();
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
    s.prefetch_parameters(unit, pass == Pass::forward ? UnitPhase::forward : UnitPhase::backward);
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
    ZT_CHECK(gpu::grad_stats_scratch_bytes(slice.numel()) <= e.partials.size(),
             "ZeRO engine: the early norm's partials were sized for the largest unit's slice, not unit ",
             u.name, "'s");
    gpu::grad_stats_async(slice, s.unit_stats.data_as<gpu::GradStats>() + unit, e.stream.get(),
                          e.partials.data());
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

}  // namespace zt::optim
