// The ZeRO plan: which of the engine's buffers exist for a run, where they live and how large they are, as a
// pure function of the partition and the settings (nothing is allocated). The engine allocates what the
// plan says; the host-memory preflight, ZeroEngine::state_bytes and the memory estimator
// (optim/zero/memory_estimate.h) read its bytes(), one formula, with the caching allocator's rounding as a
// parameter. Per rank, with psi = the padded parameter count, S = psi / W the shard, t = the compute dtype's
// bytes (see the table at the top of optim/zero/engine.h):
//
//   buffer               exists                                         size
//   compute copy         always (on the host with offload_param, on     psi t; stage 3: S t
//                        disk with its disk tier)
//   gradients (f32)      unless streamed                                stages 0/1: psi; 2/3: S
//   master (f32)         mixed precision, not offloaded                 stage 0: psi; else S
//                        (split master: low halves + rounding bits)
//   adam m, v (f32)      not offloaded                                  stage 0: psi; else S
//   gradient buckets     stages 2/3, unless the shard is the whole      embeddings', shared's, 2 layers'
//                        model (world 1, not streamed)
//   gather buffers (t)   stage 3                                        the same shapes
//   parameter upload     offload_param at world size > 1                the largest unit slice
//   host: master, m, v   offload (disk tier: its buffers)               3 H x 4
//   host: gradients      offload (two shards with a delayed update)     H x 4
//   host: staging        offload, unless offload_param writes its       H t
//                        shard in place (no delayed update)
// H = the offloaded part of the shard: S, or with a partial offload (ZeroOffload::ratio < 1) about ratio x S
// (offloaded_shard_numel), whose complement S - H keeps its master (mixed precision) and m, v on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "optim/zero/engine_options.h"
#include "optim/zero/partition.h"

namespace zt::optim {

// Bytes per category of one rank's engine state (the estimator's formula, exact for our layout). The first
// five are device memory (host memory on the CPU backend); the host_ ones exist only with offload.
struct ZeroStateBytes {
  size_t compute_copy = 0;     // the 16-bit copy (or f32 params) the model reads; stage 3: its shard
  size_t gradients = 0;        // f32 gradients (full, or the shard accumulator)
  size_t master = 0;           // f32 master weights not shared with the compute copy
  size_t optimizer = 0;        // Adam m and v
  size_t buffers = 0;          // gradient buckets, stage-3 gather buffers, the offload_param upload buffer
  size_t host_optimizer = 0;   // offload: fp32 master, m and v of the shard (disk tier: its buffers)
  size_t host_gradients = 0;   // offload: the f32 gradient shard copied down for the CPU update
  size_t host_parameters = 0;  // offload: the compute-dtype staging shard (offload.param: the shard itself;
                               // on disk: its buffers, plus the staging shard with a delayed update)
  // The disk tier: this rank's swap files, on disk (not memory): the sum of their records (the optimizer
  // state's, one per sub-group: master | m | v; the parameters', one per unit slice; each aligned, Note
  // [The swap store]).
  uint64_t disk_file = 0;
  // Of host_parameters, what offload_param holds (the stage-3 shard, or its disk buffers; pinned by
  // offload_param.pin_memory); the rest is the CPU update's staging (offload_optimizer's).
  size_t host_offloaded_parameters = 0;
  size_t total() const { return compute_copy + gradients + master + optimizer + buffers; }  // device
  size_t host_total() const { return host_optimizer + host_gradients + host_parameters; }
};

// Where the compute copy the model reads (stage 3: the rank's shard it gathers from) lives.
enum class ComputeCopyPlace { device_full, device_shard, host_shard, disk_shard };

struct ZeroPlan {
  // split_master: the run's decision (split_master_applies, and asked for). The disk tiers are on where
  // offload.disk_buffers / offload.param_disk_buffers count their buffers.
  ZeroPlan(const ZeroPartition& partition, int stage, DType compute, const ZeroOffload& offload,
           bool split_master = false);

  int stage;
  int world_size;
  DType compute;
  ZeroOffload offload;      // as asked (disk_buffers, param_disk_buffers: the disk tiers' counts)
  bool offload_optimizer;   // master, m, v on the host, updated by the CPU AdamW (stages 1-3)
  bool offload_param;       // stage 3 with offload_optimizer: the compute-copy shard on the host
  bool delayed;             // offload_optimizer with the delayed update
  bool streamed_gradients;  // stages 2/3 with offload: no device gradient shard, slices down from buckets
  bool direct_gradients;    // stages 2/3 at world size 1 (not streamed): backward writes the shard itself
  bool split_master;        // stage 0 bf16 on the GPU: the master as compute copy + low halves + bits
  // Elements of the shard whose optimizer state lives on the host: its first host_shard (offload: S, or
  // ratio x S for a partial offload; 0 without offload). The rest's is on the device.
  int64_t host_shard = 0;
  ComputeCopyPlace compute_copy;
  int64_t psi, shard;  // elements: the padded model, the rank's shard
  // What bytes() sizes besides: the buckets' and gather buffers' units, the upload buffer, the records of
  // the disk tiers.
  struct UnitSizes {
    int64_t embeddings = 0, shared = 0, largest_layer = 0;  // elements of those units
    int64_t largest_slice = 0;                              // the largest unit slice (the upload buffer)
    std::vector<int64_t> sub_group_numel;  // offload: the host store's blocks (the disk tier's records)
    std::vector<int64_t> unit_slices;      // the rank's slice of each unit (the parameter file's records)
  } sizes;

  bool mixed() const { return compute != DType::f32; }  // the master is a buffer of its own
  // Part of the state on the host, part on the device (ZeroOffload::ratio < 1).
  bool partial_offload() const { return offload_optimizer && host_shard < shard; }
  // Elements of the master (mixed) and moments on the device: the whole model at stage 0, else the shard's
  // part not offloaded.
  int64_t device_state_numel() const { return full_state() ? psi : shard - host_shard; }
  bool full_gradients() const { return stage <= 1; }  // the gradient buffer is the whole model
  bool full_state() const { return stage == 0; }      // master and moments are whole-model buffers
  // An f32 master of its own on the device (mixed, not split, not all offloaded).
  bool master_buffer() const { return !split_master && mixed() && device_state_numel() > 0; }
  bool buckets() const { return stage >= 2 && !direct_gradients; }  // the gradient buckets
  bool gather_buffers() const { return stage == 3; }                // the gathered parameters
  // offload_param at world > 1: one unit slice uploaded to gather from.
  bool parameter_upload() const { return offload_param && world_size > 1; }
  // Offload: the compute-dtype staging shard on the host (offload_param writes its shard in place unless
  // the update is delayed).
  bool host_staging() const { return offload_optimizer && (!offload_param || delayed); }

  // Bytes per category. `held` maps the bytes asked for one device buffer to the bytes it takes (the
  // estimator passes the caching allocator's size class; nullptr: as asked). Host and disk bytes are exact.
  ZeroStateBytes bytes(const std::function<size_t(size_t)>& held = nullptr) const;
};

// `held` maps the bytes asked for one device buffer to the bytes it takes (the estimator passes the caching
// allocator's size class, optim/zero/memory_estimate.h; nullptr: as asked). Host and disk bytes are exact.
// split_master: the run keeps its master split (split_master_applies), counted as 2 bytes + 1 bit a
// parameter.
ZeroStateBytes zero_state_bytes(const ZeroPartition& partition, int stage, DType compute,
                                ZeroOffload offload = {}, const std::function<size_t(size_t)>& held = nullptr,
                                bool split_master = false);
// Whether ZeroEngineOptions::split_master takes effect for a run with these settings.
bool split_master_applies(DeviceKind device, int stage, DType compute, const ZeroOffload& offload);
// The page-locked part of `bytes`' host memory, each DeepSpeed section pinned by its own pin_memory (see
// ZeroEngineOptions): offload_param's parameters by pin_param, the rest by pin_optimizer, less the disk
// tier's optimizer buffers (pageable whatever the key).
size_t pinned_host_bytes(const ZeroStateBytes& bytes, bool pin_optimizer, bool pin_param, bool disk_tier);

// The split master's buffers: the low halves (2 bytes an element of the f32 master's layout) and the
// rounding bits, in 32-bit words with one to spare (a unit's view starts at its first element / 32).
inline size_t split_master_low_bytes(size_t elements) {
  return elements * 2;
}
inline size_t split_master_bit_words(size_t elements) {
  return (elements + 31) / 32 + 1;
}

}  // namespace zt::optim
