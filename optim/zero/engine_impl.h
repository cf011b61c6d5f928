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
#include "optim/zero/offloaded_optimizer.h"
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
#include "optim/zero/gradient_reducer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/parameter_gatherer.h"
#include "optim/zero/unit_buffers.h"
#include "optim/zero/unit_order.h"
#include "optim/zero/zero_streams.h"

namespace zt::optim {
using namespace zero_views;  // NOLINT: a private header of the engine's files

struct ZeroEngine::Impl {
  std::optional<ZeroPlan> plan;  // which buffers exist (set first in the constructor)
  DeviceKind device;
  DType compute;
  bool mixed;
  int stage;
  bool offload = false;        // master, m, v in host_state; the CPU AdamW updates them
  bool offload_param = false;  // stage 3: compute_copy is a host arena (or param_file: on disk)
  // Buffers; master_arena is null where the master is the compute copy (f32) or offloaded; with offload
  // exp_avg and exp_avg_sq are null too.
  std::unique_ptr<Arena> compute_copy, master_arena, exp_avg, exp_avg_sq;
  // ZeroEngineOptions::split_master: no master_arena; the master is the compute copy (its high halves),
  // master_low (low halves, bf16-typed raw bits) and master_up (rounding bits), optim/split_master.h.
  bool split = false;
  std::unique_ptr<Arena> master_low, master_up;
  HostMemoryBudget::Charge host_pinned_charge, host_pageable_charge;  // options.host_budget
  // Parameters on disk (offload_param with ZeroEngineOptions::param_disk): the stage-3 shard, one record
  // per unit slice; compute_copy is null.
  std::unique_ptr<SwappedParameterShard> param_file;
  // The order the units' parameters are used in, per phase: what param_file reads ahead, and the order the
  // overlapped updates go in.
  UnitOrder order;
  std::unique_ptr<GradientReducer> reducer;     // the gradient buffer, the buckets, the reductions
  std::unique_ptr<ParameterGatherer> gatherer;  // stage 3
  std::vector<OwnedBlock> blocks;               // one per unit
  bool first_micro = true, last_micro = true;
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
  // The streams and events of overlap_comm, overlap_optimizer and the early norm (declared after the buffers
  // their queued work reads: its streams synchronize first).
  ZeroStreams streams;
  // The optimizer offloaded to the host (null without offload.optimizer; after the buffers it reads and
  // writes, so that its threads and copies end first).
  std::unique_ptr<OffloadedOptimizer> offloaded;
  // Stage 3 with overlap: the layer whose gradients are ready but whose reduction waits for the next
  // gather to be queued (acquire), so that the gather the compute stream waits for is not behind it.
  std::optional<size_t> deferred_reduction;
  // Either overlapped update (overlap_update on the host, overlap_optimizer on the device) of unit `unit`
  // landed where the model reads it, before a pass touches the unit; land_all: of every unit, before
  // anything reads parameters or state outside a pass.
  void land_unit(size_t unit) {
    if (offloaded) offloaded->land_unit(unit);
    streams.compute_waits_for_update(unit);
  }
  void land_all() {
    if (offloaded) offloaded->land_all();
    streams.compute_waits_for_all_updates();
  }
  const Arena& state(int kind) const {
    ZT_CHECK(kind >= 0 && kind <= 2, "ZeRO engine: state kind ", kind);
    return kind == 0 ? master() : kind == 1 ? *exp_avg : *exp_avg_sq;
  }

  ArenaOptions options(MemoryCategory category, bool zero) const {
    return {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
            .category = category,
            .zero_fill = zero};
  }
};

}  // namespace zt::optim
