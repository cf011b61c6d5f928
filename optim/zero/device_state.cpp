#include "optim/zero/device_state.h"

#include "optim/zero/buffer_views.h"
#include "optim/zero/owned_blocks.h"
#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

DeviceState::DeviceState(const ZeroPlan& plan, const ZeroPartition& partition,
                         const ZeroEngineOptions& options, int r, const ArenaOptions& device,
                         MemoryKind param_kind)
    : split(plan.split_master), offload(plan.offload_optimizer && plan.device_state_numel() == 0) {
  auto on_device = [&](MemoryCategory category) {
    ArenaOptions o = device;
    o.category = category;
    return o;
  };
  const int64_t shard = plan.shard;
  // The master's and moments' elements here: the model (stage 0), the shard, or its part not offloaded.
  const int64_t state_numel = plan.device_state_numel();
  // The compute copy: full (named, the model binds it) below stage 3, the rank's shard at stage 3 (on the
  // host with offload_param).
  if (plan.stage < 3) {
    compute_copy = std::make_unique<Arena>("parameters", partition.layout(plan.compute),
                                           on_device(MemoryCategory::parameters));
  } else if (plan.offload_param && options.param_disk) {
    param_file = std::make_unique<SwappedParameterShard>(
        SwappedParameterShardOptions{.directory = options.param_disk->directory,
                                     .rank = r,
                                     .record_numel = unit_slices(partition),
                                     .dtype = plan.compute,
                                     .buffer_count = options.param_disk->buffer_count,
                                     .buffer_kind = param_kind,
                                     .direct = options.param_disk->direct},
        options.param_disk->io);
  } else if (plan.offload_param) {
    compute_copy = std::make_unique<Arena>(
        "parameters (offloaded shard)", flat_layout(shard, plan.compute),
        ArenaOptions{.kind = param_kind, .category = MemoryCategory::parameters, .zero_fill = true});
  } else {
    compute_copy = std::make_unique<Arena>("parameters (shard)", flat_layout(shard, plan.compute),
                                           on_device(MemoryCategory::parameters));
  }
  if (split) {
    const auto elements = static_cast<size_t>(partition.total_numel());
    master_low = std::make_unique<Arena>("master (low halves)", partition.layout(DType::bf16),
                                         on_device(MemoryCategory::master));
    ZT_CHECK(master_low->bytes() == split_master_low_bytes(elements),
             "ZeRO engine: the master's low halves (", master_low->bytes(),
             " bytes) do not match the layout's ", elements, " elements");
    master_up = std::make_unique<Arena>(
        "master (rounding bits)",
        flat_layout(static_cast<int64_t>(split_master_bit_words(elements)), DType::i32),
        on_device(MemoryCategory::master));
    if (r == 0) {
      ZT_LOG(info) << "master weights: f32 kept exactly as the bf16 parameters + 16-bit low halves + a "
                      "rounding bit ("
                   << format_memory_size(master_low->bytes() + master_up->bytes()) << " instead of "
                   << format_memory_size(elements * 4) << ")";
    }
  } else if (plan.mixed() && !offload) {
    master_arena = std::make_unique<Arena>(
        "master", plan.full_state() ? partition.layout(DType::f32) : flat_layout(state_numel, DType::f32),
        on_device(MemoryCategory::master));
  }
  auto moments = [&](const char* name) {
    return std::make_unique<Arena>(
        name, plan.full_state() ? partition.layout(DType::f32) : flat_layout(state_numel, DType::f32),
        on_device(MemoryCategory::optimizer));
  };
  if (!offload) {
    exp_avg = moments("adam_m");
    exp_avg_sq = moments("adam_v");
  }
}

const Arena& DeviceState::master() const {
  ZT_CHECK(!offload, "ZeRO engine: the offloaded master lives in the host store");
  ZT_CHECK(!split, "ZeRO engine: the split master has no f32 buffer (join_split_master reads it)");
  return master_arena ? *master_arena : *compute_copy;
}

const Arena& DeviceState::state(int kind) const {
  ZT_CHECK(kind >= 0 && kind <= 2, "ZeRO engine: state kind ", kind);
  return kind == 0 ? master() : kind == 1 ? *exp_avg : *exp_avg_sq;
}

#ifdef ZT_WITH_CUDA
gpu::SplitMaster DeviceState::split_master(int64_t begin, int64_t numel) const {
  ZT_CHECK(split && begin % 32 == 0, "ZeRO engine: split master view at element ", begin);
  return {view(*compute_copy, DType::bf16, begin, numel), view(*master_low, DType::bf16, begin, numel),
          view(*master_up, DType::i32, begin / 32, (numel + 31) / 32)};
}

gpu::SplitMaster DeviceState::whole_split_master() const {
  return split_master(0, static_cast<int64_t>(master_low->bytes() / 2));
}
#endif

}  // namespace zt::optim
