#include "optim/zero/zero_plan.h"

#include "optim/swap/swapped_state_store.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/swapped_parameter_shard.h"

namespace zt::optim {

ZeroPlan::ZeroPlan(const ZeroPartition& partition, int stage_, DType compute_, const ZeroOffload& offload_,
                   bool split_master_)
    : stage(stage_), world_size(partition.world_size()), compute(compute_), offload(offload_) {
  offload_optimizer = offload.optimizer && stage >= 1;
  offload_param = offload_optimizer && offload.param && stage == 3;
  delayed = offload_optimizer && offload.delayed_update;
  psi = partition.total_numel();
  shard = partition.shard_numel();
  host_shard = offload_optimizer ? offloaded_shard_numel(shard, offload.ratio) : 0;
  // A partial offload keeps the gradient shard on the device, where its device part is updated.
  streamed_gradients = offload_optimizer && offload.stream_gradients && stage >= 2 && !partial_offload();
  direct_gradients = stage >= 2 && world_size == 1 && !streamed_gradients;
  split_master = split_master_;
  compute_copy = stage < 3                        ? ComputeCopyPlace::device_full
                 : !offload_param                 ? ComputeCopyPlace::device_shard
                 : offload.param_disk_buffers > 0 ? ComputeCopyPlace::disk_shard
                                                  : ComputeCopyPlace::host_shard;
  sizes.embeddings = partition.units().front().numel;
  sizes.shared = partition.units().back().numel;
  sizes.largest_layer = partition.largest_layer_unit();
  sizes.largest_slice = optim::largest_slice(partition);
  sizes.unit_slices = optim::unit_slices(partition);
  if (offload_optimizer && offload.disk_buffers > 0)
    sizes.sub_group_numel = numel_of(offloaded_sub_groups(partition, offload.sub_group_size, host_shard));
}

ZeroStateBytes ZeroPlan::bytes(const std::function<size_t(size_t)>& held_by_allocator) const {
  auto held = [&](size_t bytes) { return held_by_allocator && bytes > 0 ? held_by_allocator(bytes) : bytes; };
  const auto all = static_cast<size_t>(psi);
  const auto part = static_cast<size_t>(shard);
  const size_t t = dtype_size(compute);
  ZeroStateBytes b;
  b.compute_copy = held((stage == 3 ? part : all) * t);
  b.gradients = streamed_gradients ? 0 : held((full_gradients() ? all : part) * 4);
  const size_t master_elems = full_state() ? all : part;
  // f32 training: the master is the compute copy (stages 0-2: its full buffer, stage 3: its shard).
  b.master = mixed() ? held(master_elems * 4) : 0;
  if (split_master)
    b.master = held(split_master_low_bytes(master_elems)) + held(split_master_bit_words(master_elems) * 4);
  b.optimizer = 2 * held((full_state() ? all : part) * 4);
  // The buckets (f32; stages 2, 3) and the gather buffers (T; stage 3), each allocated on its own: the
  // embeddings', the shared unit's and two layers'. World size 1: the reduce-scatter is the identity and
  // backward accumulates into the shard itself, unless the gradients stream down from the buckets.
  auto bucket_set = [&](size_t element) {
    return held(static_cast<size_t>(sizes.embeddings) * element) +
           held(static_cast<size_t>(sizes.shared) * element) +
           2 * held(static_cast<size_t>(sizes.largest_layer) * element);
  };
  if (buckets()) b.buffers += bucket_set(4);
  if (gather_buffers()) b.buffers += bucket_set(t);
  if (offload_optimizer) {
    // The device keeps the state of the shard's part not offloaded (partial offload), the host the rest.
    const auto on_device = static_cast<size_t>(device_state_numel());
    const auto on_host = static_cast<size_t>(host_shard);
    b.master = mixed() && on_device > 0 ? held(on_device * 4) : 0;
    b.optimizer = on_device > 0 ? 2 * held(on_device * 4) : 0;
    b.host_optimizer = 3 * on_host * 4;  // a separate master even in f32: the device copy stays the model's
    if (offload.disk_buffers > 0) {      // the disk tier: buffers of one sub-group each (master | m | v)
      const swap::SwappedStateOptions disk{.directory = "",
                                           .rank = 0,
                                           .block_numel = sizes.sub_group_numel,
                                           .buffer_count = offload.disk_buffers};
      b.host_optimizer = swap::SwappedStateStore::buffer_bytes_for(disk);
      b.disk_file = swap::SwappedStateStore::file_bytes_for(disk);
    }
    b.host_gradients = (delayed ? 2 : 1) * on_host * 4;  // delayed: one shard per update
    b.host_parameters = on_host * t;
    if (offload_param && delayed) b.host_parameters += part * t;  // + staging
    if (offload_param) b.host_offloaded_parameters = part * t;
    if (compute_copy == ComputeCopyPlace::disk_shard) {  // the shard's buffers, not it
      b.host_offloaded_parameters =
          SwappedParameterShard::buffer_bytes_for(sizes.unit_slices, compute, offload.param_disk_buffers);
      b.host_parameters = b.host_offloaded_parameters + (delayed ? part * t : 0);
      b.disk_file += SwappedParameterShard::file_bytes_for(sizes.unit_slices, compute);
    }
    if (offload_param) {  // the shard lives on the host, uploaded through a slice buffer
      b.compute_copy = 0;
      if (parameter_upload()) b.buffers += held(static_cast<size_t>(sizes.largest_slice) * t);
    }
  }
  return b;
}

bool split_master_applies(DeviceKind device, int stage, DType compute, const ZeroOffload& offload) {
  return device == DeviceKind::cuda && stage == 0 && compute == DType::bf16 && !offload.optimizer;
}

ZeroStateBytes zero_state_bytes(const ZeroPartition& partition, int stage, DType compute, ZeroOffload offload,
                                const std::function<size_t(size_t)>& held, bool split_master) {
  return ZeroPlan(partition, stage, compute, offload, split_master).bytes(held);
}

size_t pinned_host_bytes(const ZeroStateBytes& bytes, bool pin_optimizer, bool pin_param, bool disk_tier) {
  const size_t param = bytes.host_offloaded_parameters;
  const size_t optimizer_section = bytes.host_total() - param - (disk_tier ? bytes.host_optimizer : 0);
  return (pin_optimizer ? optimizer_section : 0) + (pin_param ? param : 0);
}

}  // namespace zt::optim
