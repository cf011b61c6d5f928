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
#include "optim/zero/offload_preflight.h"
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
#include "optim/zero/device_state.h"
#include "optim/zero/engine.h"
#include "optim/zero/gradient_norm.h"
#include "optim/zero/gradient_reducer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/parameter_gatherer.h"
#include "optim/zero/resident_adamw.h"
#include "optim/zero/unit_buffers.h"
#include "optim/zero/unit_order.h"
#include "optim/zero/zero_streams.h"

namespace zt::optim {
using namespace zero_views;  // NOLINT: a private header of the engine's files

struct ZeroEngine::Impl {
  std::optional<ZeroPlan> plan;  // which buffers exist (set first in the constructor)
  DeviceKind device;
  // The parameters and optimizer state on the device (first: its buffers outlive every piece reading them).
  std::unique_ptr<DeviceState> device_state;
  OffloadHostCharges host_charges;  // the offload's host buffers charged to options.host_budget
  // The order the units' parameters are used in, per phase: what param_file reads ahead, and the order the
  // overlapped updates go in.
  UnitOrder order;
  std::unique_ptr<GradientReducer> reducer;     // the gradient buffer, the buckets, the reductions
  std::unique_ptr<ParameterGatherer> gatherer;  // stage 3
  std::vector<OwnedBlock> blocks;               // one per unit
  // Partial offload (ZeroPlan::partial_offload): each block's part whose state is on the host (what the
  // offloaded optimizer updates) and on the device (what the resident AdamW updates); empty otherwise.
  std::vector<OwnedBlock> host_blocks, device_blocks;
  bool first_micro = true, last_micro = true;
  // The streams and events of overlap_comm, overlap_optimizer and the early norm (declared after the buffers
  // their queued work reads: its streams synchronize first).
  ZeroStreams streams;
  // The optimizer offloaded to the host (null without offload.optimizer; after the buffers it reads and
  // writes, so that its threads and copies end first).
  std::unique_ptr<OffloadedOptimizer> offloaded;
  // Without offload, or for a partial offload's device part: the update on the engine's device.
  std::unique_ptr<ResidentAdamW> resident;
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
  ArenaOptions options(MemoryCategory category, bool zero) const {
    return {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
            .category = category,
            .zero_fill = zero};
  }
};

}  // namespace zt::optim
