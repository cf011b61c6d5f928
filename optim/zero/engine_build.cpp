// ZeroEngine's construction: the options checked, the plan made, the offload's preflight, then the pieces
// built in the order their buffers are allocated (the device state, the parameter upload, the gradient
// reducer, the gatherer, the owned blocks, the offloaded optimizer or the resident AdamW, the streams), and
// the handles the model reads and writes through.
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

// The settings no engine runs with, refused before anything is allocated.
void check_options(const ZeroEngineOptions& options) {
  const int stage = options.stage;
  const ZeroOffload& offload = options.offload;
  ZT_CHECK(stage >= 0 && stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got ", stage);
  ZT_CHECK(options.device == DeviceKind::cuda || options.compute == DType::f32,
           "the CPU backend trains in f32 only");
  ZT_CHECK(!offload.delayed_update || offload.optimizer,
           "the delayed parameter update needs offload_optimizer (it delays the CPU update)");
  ZT_CHECK(!offload.optimizer || stage >= 1,
           "offload_optimizer needs ZeRO stage 1, 2 or 3 (stage 0 keeps no optimizer shard), got stage ",
           stage);
  ZT_CHECK(!offload.param || stage == 3,
           "offload_param needs ZeRO stage 3 (parameters are only partitioned there), got stage ", stage);
  ZT_CHECK(!offload.param || offload.optimizer,
           "offload_param needs offload_optimizer too (the CPU update writes the offloaded parameter shard)");
  ZT_CHECK(!options.disk || offload.optimizer,
           "the disk tier (offload_optimizer device nvme) needs offload.optimizer");
  ZT_CHECK(!options.param_disk || offload.param,
           "parameters on disk (offload_param device nvme) need offload.param at ZeRO stage 3");
  ZT_CHECK(!offload.stream_gradients || (offload.optimizer && stage >= 2),
           "stream_gradients needs ZeRO stage 2 or 3 with offload_optimizer (it streams the gradient shard "
           "to the host), got stage ",
           stage, offload.optimizer ? "" : " without offload");
  ZT_CHECK(
      offload.ratio > 0.0 && offload.ratio <= 1.0,
      "offload_optimizer.ratio (the fraction of the optimizer state on the host) must be in (0, 1], got ",
      offload.ratio);
  if (offload.ratio < 1.0) {
    // A partial offload runs the update inside step(), the device part on the device and the host part
    // from host memory; what moves the whole update elsewhere is not built for it.
    const char* unsupported = !offload.optimizer ? "it needs offload_optimizer at ZeRO stage 1, 2 or 3"
                              : offload.param    ? "not with offload_param (the device part's AdamW writes "
                                                   "the compute copy on the device)"
                              : offload.delayed_update ? "not with the delayed update"
                              : options.disk           ? "not with the disk tier (offload_optimizer nvme)"
                              : offload.overlap_update ? "not with overlap_update (the update runs in step())"
                                                       : nullptr;
    ZT_CHECK(unsupported == nullptr, "offload_optimizer.ratio ", offload.ratio, ": ", unsupported);
  }
  ZT_CHECK(options.gradient_memory == nullptr || stage == 0,
           "gradients on the activations are a stage-0 placement, asked at stage ", stage);
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
  check_options(options);
  s.device = options.device;
  const bool split = options.split_master &&
                     split_master_applies(options.device, options.stage, options.compute, options.offload);
  s.plan.emplace(partition_, options.stage, options.compute, options_.offload, split);
  const int r = comm.rank();
  // Pinned only where a GPU copies from it; the CPU backend's "device" is the host already.
  const bool gpu = s.device == DeviceKind::cuda;
  const MemoryKind host_kind = options.pin_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  const MemoryKind param_kind = options.pin_param_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  std::optional<swap::SwappedStateOptions> disk_state;
  std::vector<HostBlockExtent> sub_group_extents;  // offload: the host store's blocks
  if (s.plan->offload_optimizer) {
    sub_group_extents = offloaded_sub_groups(partition_, options.offload.sub_group_size, s.plan->host_shard);
    if (options.disk) disk_state = swapped_state_options(*options.disk, r, numel_of(sub_group_extents));
    s.host_charges = preflight_offload(partition_, options_, r, disk_state, sub_group_extents.size());
  }

  s.device_state = std::make_unique<DeviceState>(*s.plan, partition_, options, r,
                                                 s.options(MemoryCategory::other, true), param_kind);
  std::unique_ptr<Arena> param_upload;  // offload_param, world > 1: one unit's slice, all-gathered from
  if (s.plan->parameter_upload()) {
    param_upload =
        std::make_unique<Arena>("parameter upload", flat_layout(s.plan->sizes.largest_slice, s.plan->compute),
                                s.options(MemoryCategory::communication, true));
  }
  s.reducer =
      std::make_unique<GradientReducer>(*s.plan, partition_, comm_, s.blocks, options.reduce_scatter,
                                        s.options(MemoryCategory::gradients, true), options.gradient_memory);
  if (s.plan->stage == 3) {
    s.gatherer = std::make_unique<ParameterGatherer>(
        partition_, comm_, s.plan->compute,
        UnitBuffers(partition_, "gathered parameters", s.plan->compute,
                    s.options(MemoryCategory::communication, true)),
        std::move(param_upload),
        ParameterGatherer::Source{.shard = s.device_state->compute_copy.get(),
                                  .on_host = s.plan->offload_param,
                                  .file = s.device_state->param_file.get()});
  }

  // Owned blocks: stage 0 updates whole units in full buffers; the others their slice.
  s.blocks = owned_blocks(partition_, s.plan->stage, r, s.plan->mixed() || s.plan->offload_optimizer);
  if (s.plan->partial_offload()) {
    SplitOwnedBlocks split = split_owned_blocks(s.blocks, s.plan->host_shard, s.plan->mixed());
    s.host_blocks = std::move(split.host);
    s.device_blocks = std::move(split.device);
    if (r == 0) {
      ZT_LOG(info)
          << "partial optimizer offload: " << s.plan->host_shard << " of " << s.plan->shard
          << " shard elements (ratio " << options.offload.ratio
          << ") keep their master, m and v on the host; the rest on the device, both updated at once";
    }
  }
  if (s.plan->offload_optimizer)
    build_offloaded_optimizer(options, host_kind, std::move(disk_state), std::move(sub_group_extents));
  s.order = UnitOrder(partition_);
  build_streams(options);
  if (!s.offloaded || s.plan->partial_offload()) {
    s.resident =
        make_resident_adamw(s.device, *s.plan, s.plan->partial_offload() ? s.device_blocks : s.blocks,
                            *s.device_state, *s.reducer, adamw_, s.streams, s.order);
  }
  bind_handles(config);
}

void ZeroEngine::build_offloaded_optimizer(const ZeroEngineOptions& options, MemoryKind host_kind,
                                           std::optional<swap::SwappedStateOptions> disk_state,
                                           std::vector<HostBlockExtent> sub_group_extents) {
  Impl& s = *impl_;
  const int r = rank();
  std::unique_ptr<HostOptimizerStore> store;
  if (disk_state) {
    store = std::make_unique<SwappedHostOptimizerStore>(*disk_state, options.disk->io);
  } else {
    store = std::make_unique<ResidentHostOptimizerStore>(sub_group_extents, s.plan->host_shard, host_kind);
  }
  auto copies = std::make_unique<OffloadCopies>(s.device, options.offload.pipelined, s.blocks.size());
  Impl* impl = impl_.get();
  s.offloaded = std::make_unique<OffloadedOptimizer>(
      *s.plan, partition_, s.plan->partial_offload() ? s.host_blocks : s.blocks, std::move(store),
      std::move(sub_group_extents), host_kind, std::move(copies), adamw_,
      OffloadedOptimizer::Places{.compute_copy = s.device_state->compute_copy.get(),
                                 .param_file = s.device_state->param_file.get(),
                                 .device_gradients = s.reducer->gradients(),
                                 .prefetch_after_update = [impl](size_t unit) {
                                   impl->gatherer->prefetch(unit, UnitPhase::update, impl->last_micro);
                                 }});
  s.reducer->send_final_gradients_to(s.offloaded.get());
  const bool overlap_asked = options.offload.overlap_update;
  if (overlap_asked || (options.offload.overlap_update_where_it_applies && s.device == DeviceKind::cuda)) {
    // What the overlapped update does not cover runs the update inside step(), and says so when asked.
    const char* why = s.plan->delayed             ? "the delayed update overlaps it already"
                      : s.plan->partial_offload() ? "a partial offload updates in step()"
                      : world_size() > 1   ? "world size > 1 (the ranks' all-gathers follow the update)"
                      : options.disk       ? "the optimizer state is on disk"
                      : options.param_disk ? "the parameters are on disk"
                      : s.device == DeviceKind::cuda && !s.offloaded->pipelined_copies()
                          ? "the copies are not pipelined"
                          : nullptr;
    if (why == nullptr) s.offloaded->enable_overlapped_update();
    if (why != nullptr && r == 0 && overlap_asked) {
      ZT_LOG(warn) << "overlap_update: not with this run (" << why << "); the CPU update runs inside step()";
    }
    if (s.offloaded->overlapped_update() && !overlap_asked && r == 0) {
      ZT_LOG(info) << "overlap_update: on (the default where it applies; exact): the CPU update runs beside "
                      "the next forward, which waits for each layer's update; --no_offload_overlap_update "
                      "turns it off";
    }
  }
  // An overlapped or delayed update's threads run beside the rank's thread, which launches the forward
  // (and, delayed, the backward) meanwhile; with every hardware thread in the AdamW that thread waits for a
  // time slice between launches: on the H200's 16 cores the overlap hid 40 ms at bs 128 and nothing at
  // bs 40, where the forward's kernels are shorter; with one core left free, 51 ms at bs 128 and 21 ms at
  // bs 40. The AdamW is memory-bound, and its results do not depend on the thread count.
  const bool update_beside_launches = s.offloaded->overlapped_update() || s.plan->delayed;
  if (update_beside_launches && s.device == DeviceKind::cuda && adamw_.num_threads() > 2)
    adamw_.set_num_threads(adamw_.num_threads() - 1);
}

void ZeroEngine::build_streams(const ZeroEngineOptions& options) {
  Impl& s = *impl_;
  const int r = rank();
  if (options.overlap_optimizer && (s.device != DeviceKind::cuda || s.plan->offload_optimizer) && r == 0) {
    ZT_LOG(warn) << "overlap_optimizer: not with this run ("
                 << (s.plan->offload_optimizer
                         ? "the optimizer is offloaded: --offload_overlap_update is its overlap"
                         : "the CPU backend has no streams")
                 << "); the AdamW runs inside step()";
  }
  if (options.overlap_optimizer && s.device == DeviceKind::cuda && !s.plan->offload_optimizer) {
    // Not where a collective follows the update (stages 1/2 all-gather the slices at world size > 1, and
    // stage 3 gathers from the shard the update writes at any world size > 1) nor stage 1's clearing.
    const char* why = s.plan->stage == 1 ? "stage 1 clears its gradient shard after the update"
                      : s.plan->stage != 0 && world_size() > 1
                          ? "world size > 1 (the ranks' all-gathers follow it)"
                          : nullptr;
    if (why == nullptr) {
      s.streams.make_optimizer_stream(partition_.units().size());
    } else if (r == 0) {
      ZT_LOG(warn) << "overlap_optimizer: not with this run (" << why << "); the AdamW runs inside step()";
    }
  }
#ifdef ZT_WITH_CUDA
  // The early gradient norm: with overlap_optimizer at world size 1 (any stage it runs at), or asked for at
  // stage 0 (world size 1, the device's AdamW). Not where unit_stats already takes the streamed slices' sums.
  const bool early_norm_here = s.device == DeviceKind::cuda && !s.plan->offload_optimizer &&
                               !s.plan->streamed_gradients && world_size() == 1;
  if (early_norm_here && (s.streams.optimizer_overlap() || (options.early_grad_norm && s.plan->stage == 0))) {
    s.reducer->allocate_unit_stats("gradient norm partials (early)");
    s.streams.make_early_norm_stream(largest_slice(partition_));
  }
#endif
  if (options.overlap_comm && s.device == DeviceKind::cuda && world_size() > 1) s.streams.make_comm_stream();
}

void ZeroEngine::bind_handles(const DebertaConfig& config) {
  Impl& s = *impl_;
  const auto& units = partition_.units();
  const ParameterTable& table = table_;
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
  if (s.plan->stage < 3) {
    param_handles_ = DebertaTensors::bind(
        config, [&](const std::string& name) { return s.device_state->compute_copy->tensor(name); });
  } else {
    param_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      return unit_view(k, s.gatherer->buffer(partition_.unit_of_tensor(k)), s.plan->compute);
    });
  }
  if (s.plan->stage <= 1) {
    grad_handles_ = DebertaTensors::bind(
        config, [&](const std::string& name) { return s.reducer->gradients()->tensor(name); });
  } else if (s.plan->direct_gradients) {  // each unit's gradients at its place in the shard
    grad_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      const ZeroUnit& unit = units[partition_.unit_of_tensor(k)];
      const Tensor in_shard = view(*s.reducer->gradients(), DType::f32, unit.shard_begin, unit.numel);
      const int64_t offset = partition_.tensor_flat_offset(k) - unit.flat_begin;
      return Tensor(static_cast<float*>(in_shard.data()) + offset, table.entries()[k].shape, DType::f32,
                    in_shard.device());
    });
  } else {
    grad_handles_ = DebertaTensors::bind(config, [&](const std::string& name) {
      const size_t k = index_of(name);
      return unit_view(k, s.reducer->bucket(partition_.unit_of_tensor(k)), DType::f32);
    });
  }
}

ZeroEngine::~ZeroEngine() = default;

}  // namespace zt::optim
