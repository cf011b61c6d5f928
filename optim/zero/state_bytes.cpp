// What each of the engine's buffers takes (zero_state_bytes and its helpers): the same function sizes the
// buffers and prints the memory plan (optim/zero/memory_estimate.h).
#include "optim/zero/engine_impl.h"

namespace zt::optim {

bool split_master_applies(DeviceKind device, int stage, DType compute, const ZeroOffload& offload) {
  return device == DeviceKind::cuda && stage == 0 && compute == DType::bf16 && !offload.optimizer;
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

}  // namespace zt::optim
