// The ZeRO engine's options (optim/zero/engine.h describes what each stage and offload keeps where).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "optim/adamw.h"
#include "runtime/device.h"
#include "runtime/direct_io.h"
#include "runtime/host_memory.h"
#include "runtime/host_memory_budget.h"
#include "runtime/tensor.h"

namespace zt::optim {

// Where step t's delayed update lands in step t+1: the same values in the same places in every mode.
enum class DelayedLanding {
  whole,       // step() waits for the whole update at its start, then copies every unit (the reference)
  after_norm,  // step() takes the norm first, then copies each unit as soon as the CPU is done with it,
               // beside the CPU update of the later units
  in_backward  // after_norm, and a unit the CPU is done with when backward is (gradients_ready on the last
               // micro-batch) is copied then, beside the rest of backward; not with offload_param, nor
               // on a GPU without pipelined copies from pinned memory (after_norm there)
};
// "whole", "after_norm", "in_backward" (TrainConfig::offload_delayed_landing); throws on anything else.
DelayedLanding delayed_landing_named(std::string_view name);

// CPU offload (optim/zero/engine.h).
struct ZeroOffload {
  bool optimizer = false;  // stages 1-3: master, m, v on the host, updated by the CPU AdamW
  // Partial offload (DeepSpeed's offload_optimizer.ratio), in (0, 1]: with `optimizer`, about this fraction
  // of the rank's shard — its first H elements, H = ratio x shard rounded to a multiple of 32
  // (offloaded_shard_numel in optim/zero/owned_blocks.h) — keeps its master, m and v on the host, updated by
  // the CPU AdamW as above; the rest stays on the device, updated by the device's AdamW, queued before the
  // CPU's work so that the two run at once. The same arithmetic on every element: bit for bit the result of
  // no offload. 1: everything on the host. Below 1 not with param, the delayed update, the disk tier or
  // overlap_update (refused), and the gradients are not streamed (the device part reads the shard).
  double ratio = 1.0;
  bool param = false;  // stage 3 with optimizer: the compute-copy shard on the host
  // GPU: the copies on two copy streams, overlapping the CPU update (optim/zero/offload_copies.h); false:
  // each copy waited for in turn (the reference the pipelined mode must equal bit for bit). The CPU backend
  // is always synchronous.
  bool pipelined = true;
  // Delayed parameter update (ZeRO-Offload's DPU; opt-in): step t's CPU update runs on a host thread while
  // step t+1's forward and backward run with the parameters of step t (one update stale); it lands in step
  // t+1's step() (or finish_delayed_update()). Stage 3 with param keeps a separate staging shard so that
  // the update never writes what the forward is gathering.
  bool delayed_update = false;
  // Where the delayed update lands (DelayedLanding).
  DelayedLanding delayed_landing = DelayedLanding::in_backward;
  // > 0: the master, m and v on the disk tier (ZeroEngineOptions::disk, which sets it) with this many host
  // buffers of the largest sub-group, instead of the shard in host memory.
  int disk_buffers = 0;
  // > 0: offload.param's stage-3 shard on disk (ZeroEngineOptions::param_disk, which sets it) with this many
  // host buffers of the largest unit slice, instead of the shard in host memory.
  int param_disk_buffers = 0;
  // DeepSpeed's zero_optimization.sub_group_size: the offloaded state is kept and updated in sub-groups of
  // at most this many elements (each owned block, a unit's slice, cut by cut_into_sub_groups in
  // optim/zero/host_optimizer_store.h). The CPU AdamW, checkpoint reads and writes and the disk tier's
  // records go sub-group by sub-group, so the disk tier's host buffers are buffer_count x the largest
  // sub-group x 12 bytes. Element-wise AdamW: the cut changes no result. Nothing without offload.optimizer.
  int64_t sub_group_size = 1'000'000'000;
  // Stages 2/3 with optimizer offload and one micro-batch per step (no gradient accumulation): each unit's
  // final gradient slice goes down to the host straight from its gradient bucket, its sum of squares taken
  // on the way, and the bucket is zeroed for reuse once the copy has landed — the device keeps no f32
  // gradient shard (3.3 GiB at xlarge, 23 GiB at 6.2 B parameters), only the buckets (the embeddings',
  // the shared unit's and two layers'), also at world size 1. Same values and the same norm as the shard
  // path, bit for bit. With accumulation the shard sums the micro-batches on the device (false).
  bool stream_gradients = false;
  // The exact update overlapping the next forward (world size 1; not with a delayed update or a disk tier;
  // GPU: pipelined copies). step() takes the norm and the clip factor as always, then runs the CPU AdamW on
  // a host thread unit by unit in the forward's order (embeddings, shared, layers) and returns; the next
  // forward's acquire(u) waits for unit u's update, queues its upload and makes the compute stream wait for
  // it, so the forward of the first units runs while the CPU updates the later ones. The same values as the
  // update inside step(), bit for bit (the same AdamW on the same gradients); what reads the parameters or
  // the state outside a forward (finish_delayed_update, checkpoints, gather_full_master) waits for it all.
  bool overlap_update = false;
  // The same where it applies, without being asked (train_mrpc's default; GPU only): on for a CUDA run that
  // meets overlap_update's conditions and said in the log, off silently elsewhere. On the H200 it took the
  // xlarge ZeRO-2 + offload step from 295 to 274 ms at bs 40 and from 410 to 359 ms at bs 128.
  bool overlap_update_where_it_applies = false;
};

// The disk tier (DeepSpeed's offload_optimizer device nvme, ZeRO-Infinity): with offload.optimizer, the
// rank's master, m and v live in a swap file under `directory` (optim/swap/swapped_state_store.h), read in
// and written back sub-group by sub-group around the CPU update; the host holds buffer_count records of one
// sub-group (ZeroOffload::sub_group_size) instead of the shard. Same arithmetic, so a run equals the resident
// offload bit for bit.
struct ZeroDiskTier {
  std::string directory;  // nvme_path
  int buffer_count = 4;
  bool pipeline_read = false;   // read the next blocks during the update
  bool pipeline_write = false;  // write the updated blocks back during the next updates
  IoOptions io;                 // DeepSpeed's aio block
  DirectIoMode direct = DirectIoMode::automatic;
};

// Parameters on disk (DeepSpeed's offload_param device nvme, stage 3 with offload.param): the rank's
// compute-dtype shard in a swap file under `directory` (optim/zero/swapped_parameter_shard.h, Note
// [Parameters on disk]), one record per unit slice, read into one of buffer_count host buffers for each
// stage-3 gather (the next units' records read ahead into the others) and written back by the CPU update.
// Same values, so a run equals offload_param cpu bit for bit.
struct ZeroParamDiskTier {
  std::string directory;  // offload_param.nvme_path
  int buffer_count = 5;   // offload_param.buffer_count (DeepSpeed's default)
  IoOptions io;           // DeepSpeed's aio block
  DirectIoMode direct = DirectIoMode::automatic;
};

struct ZeroEngineOptions {
  int stage = 0;                        // 0..3
  DeviceKind device = DeviceKind::cpu;  // where state and compute live
  DType compute = DType::f32;           // storage dtype of the model's parameters
  bool reduce_scatter = true;           // stages 1/2: false all-reduces and keeps the slice
  // GPU, world size > 1: reductions on a communication stream, overlapping backward
  // (optim/zero/engine.h). Nothing on the CPU backend (the in-process host collectives are synchronous) or at
  // world size 1.
  bool overlap_comm = false;
  // GPU, the AdamW on the device (no optimizer offload) where no collective follows it (stage 0, or world
  // size 1): step() queues the AdamW unit by unit in the forward's order (embeddings, shared, layers) on an
  // optimizer stream and returns; the next forward's acquire(u) makes the compute stream wait for unit u's
  // update only, so the first layers' forward runs beside the later layers' AdamW (memory-bound beside
  // compute-bound, and at small batches beside launch gaps). The same kernel on the same data: bit for bit
  // the in-order update. Whatever reads parameters or state outside a pass waits for all of it.
  bool overlap_optimizer = false;
  // GPU, stage 0, world size 1, the device's AdamW: each unit's sum of squares for the gradient norm is taken
  // on a stream of its own as soon as backward has written the unit's gradients (gradients_ready), beside the
  // rest of backward, instead of in one pass over every gradient inside step() (~0.9 ms at xlarge): the same
  // kernel over the same slices, so the same norm bit for bit. Always on with overlap_optimizer at world 1.
  bool early_grad_norm = true;
  // GPU, stage 0, bf16 compute, the device's AdamW: the f32 master kept as the bf16 compute copy plus a
  // 16-bit low half and one rounding bit a parameter (optim/split_master.h) — exact, every stored bit what an
  // f32 master would hold, in 2 + 1/8 bytes a parameter instead of 4 (1.55 GiB less at xlarge) and 1.75
  // fewer bytes a parameter through each AdamW pass. Elsewhere (f16, CPU, offload, stages 1-3) the f32
  // master as before (split_master_applies).
  bool split_master = true;
  // Stage 0 with one micro-batch per step: the f32 gradient buffer (partition().layout(f32)) at this address,
  // placed by the model in its activation arena (model/deberta.h, GradientLayout; stage0_gradient_layout
  // below) instead of in a buffer of its own: the forward writes over it, so backward writes the gradients
  // (gradient_write), and gradients_ready zeroes the alignment gaps between a unit's tensors, which the
  // gradient norm reads. Zeroed here once; nullptr: the engine allocates the buffer.
  void* gradient_memory = nullptr;
  AdamWHyper hyper;
  double max_grad_norm = 1.0;  // 0: no clipping
  ZeroOffload offload;
  // Page-locked host buffers (GPU runs; false: pageable), per DeepSpeed section: pin_memory for
  // offload_optimizer's (the state, the gradient shard, the parameter staging, the disk tier's buffers are
  // pageable either way: only the CPU AdamW reads them), pin_param_memory for offload_param's (the stage-3
  // parameter shard in host memory, or its disk buffers).
  bool pin_memory = false;
  bool pin_param_memory = false;
  int ranks_sharing_host = 1;  // ranks of this process (in-process ranks): the host preflight counts them all
  std::optional<HostMemoryLimits> host_memory_limits;  // nullopt: read from the OS (tests pass fake ones)
  std::optional<ZeroDiskTier> disk;                    // offload.optimizer's state on disk
  std::optional<ZeroParamDiskTier> param_disk;         // offload.param's shard on disk (stage 3)
  // Charged with this rank's host buffers of the offload for the engine's lifetime (--host_memory_limit);
  // must outlive the engine. nullptr: no cap.
  HostMemoryBudget* host_budget = nullptr;
};

}  // namespace zt::optim
