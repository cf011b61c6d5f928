// The optimizer-state engine: owns one rank's parameters, gradients, fp32 master and Adam moments for ZeRO
// stage 0-3, and is the model's unit hooks (model/deberta_tensors.h), where reductions and stage-3 gathers
// happen. The trainer keeps data, evaluation and I/O; the engine keeps everything per parameter.
//
// Per rank, Ψ = padded parameter count, W = world size, S = Ψ / W, T = compute dtype (2 bytes in bf16/f16;
// in f32 the compute copy *is* the master, so its 4 bytes are not counted twice):
//
// clang-format off
//   stage  compute copy (T)  gradients (f32)             master (f32)  Adam m, v (f32)  bytes/param, mixed
//   0      Ψ                 Ψ                           Ψ             2Ψ               18 (16.125 split)
//   1      Ψ                 Ψ (reduce-scattered at the  S             2S               6 + 12/W
//                            end of the accumulation)
//   2      Ψ                 S + buckets                 S             2S               2 + 16/W + buckets
//   3      S + gather bufs   S + buckets                 S             2S               18/W + buffers
// clang-format on
// Split master (stage 0, bf16, on the GPU: optim/split_master.h): the f32 master is the compute copy plus a
// 16-bit low half and a rounding bit, 2.125 bytes instead of 4.
// Buckets: one f32 buffer per unit for the embeddings and the shared unit and two rotating layer buffers
// (none at world size 1, where the shard is the whole model: backward accumulates into it directly);
// stage-3 gather buffers: the same shapes in T. Stage 0 with one micro-batch per step keeps its gradients in
// the model's activation arena (ZeroEngineOptions::gradient_memory), on slots backward is done with. (The
// ZeRO paper's 16Ψ / 4Ψ+12Ψ/N / 2Ψ+14Ψ/N / 16Ψ/N keep 16-bit gradients; ours are f32 so that accumulation
// over micro-batches and ranks does not round.)
//
// The step, identical in all stages on the values it sees (so stages agree bit for bit on the CPU):
//   1. gradients reduced per unit (stage 0: all-reduce, 1: reduce-scatter at the last micro-batch of the
//      window; 2/3: reduce-scatter every micro-batch into the f32 shard accumulator) — rank-order sums;
//   2. CPU: g /= W on the owned elements (a true division, as torch's DDP averaging);
//   3. the global norm: sum of squares per (rank, unit) slice in double, added rank by rank, unit by unit —
//      stage 0 computes every rank's slices itself, the others all-gather their sums — so every stage and
//      every rank sees the same norm;
//   4. fp16: overflow (a non-finite norm) agreed by all ranks through the norm: the step is skipped;
//   5. clip factor min(1, max_norm / (norm + 1e-6)) (and on the GPU 1 / (loss_scale W) folded in);
//   6. AdamW on the owned elements, writing the 16-bit copy in the same pass;
//   7. stage 1/2: all-gather the updated compute copy per unit; stage 3: the next forward gathers.
//
// CPU offload (ZeroOffload; stages 1-3, DeepSpeed's offload_optimizer / offload_param with device cpu):
//   offload.optimizer: the rank's fp32 master, m and v live on the host (HostOptimizerStore: pinned
//     arenas with pin_memory on a GPU, else pageable; the NVMe tier plugs in behind the same interface),
//     and step 6 becomes, per owned block (unit; the host state is acquired and updated sub-group by
//     sub-group within it, ZeroOffload::sub_group_size):
//       D2H   the block's reduced gradients, queued from gradients_ready on the window's last micro-batch
//             (so on a GPU it overlaps the rest of backward; with delayed_update into a second host
//             shard, since the update in flight still reads the first)
//       CPU   AdamW (optim/adamw.h, SIMD, thread pool) with the scale of step 5 folded into the gradient,
//             writing the compute-dtype values into a host staging shard in the same pass
//       H2D   the staged values into the block of the device compute copy (or, with offload.param, nothing:
//             the staging shard is the stage-3 parameter shard itself)
//     On a GPU the copies run on two copy streams, so block k's CPU update overlaps the D2H of later blocks
//     and the H2D of earlier ones (ZeroOffload::pipelined; false waits for each copy). On the CPU backend
//     the "device" is the host and the copies are memcpys, through the same code.
//     The math is the non-offloaded step's (same norm, same factor, the GPU AdamW's arithmetic), so an
//     offloaded run equals the non-offloaded one bit for bit.
//   offload.param (stage 3, needs offload.optimizer): the rank's compute-copy shard lives on the host;
//     acquire() copies the unit's slice up (H2D) into an upload buffer and all-gathers from there. With
//     the shard on disk (ZeroEngineOptions::param_disk) the slice is first read from its record in the
//     parameter file into a host buffer (the next units' records read ahead), and the CPU update writes
//     each unit's updated values back into its record.
// overlap_comm (DeepSpeed's zero_optimization.overlap_comm; GPU at world size > 1, else nothing changes):
//   the gradient reductions and what follows them (stage 2/3: the fold into the shard accumulator and the
//   bucket's zero fill; the offload download) run on the rank's communication stream while backward goes on
//   on the compute stream, ordered by events instead of by stream order:
//     gradients_ready(u)   compute records "written"; the comm stream waits for it, reduces u and records u's
//                          bucket "free" (stages 2/3)
//     acquire(u, backward) stages 2/3: the compute stream waits for u's bucket "free" before backward writes
//                          into it again (layer l shares bucket l % 2 with layer l + 2)
//     begin_backward, step, gather_full_master, the compute copy's all-gathers: the compute stream waits
//                          for everything queued on the comm stream (stages 0/1 reduce the gradient buffer in
//                          place; step reads what every stage reduced)
//   Stage 3: the gathers go on the comm stream too (the compute stream waits for each), so a rank's
//   collectives never run on two streams at once, and a layer's reduction is queued after the gather of the
//   layer backward needs next (acquire), so that it overlaps that layer's backward instead of delaying it.
//   Same collectives, same arithmetic: the results equal the in-order ones bit for bit.
// Device bytes drop by the master and m, v (12 S) and, with offload.param, the parameter shard (t S); host
// bytes are 12 S + 4 S (gradient shard) + t S (staging or parameter shard), checked against MemAvailable
// and the locked-memory limit before anything is allocated (runtime/host_memory.h); with the disk tier the
// 12 S become buffer_count x 12 x (largest sub-group) bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/deberta_tensors.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "optim/swap/swapped_state_store.h"
#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"
#include "runtime/direct_io.h"
#include "runtime/host_memory.h"
#include "runtime/host_memory_budget.h"

namespace zt::optim {

// CPU offload (see the top of this file).
struct ZeroOffload {
  bool optimizer = false;  // stages 1-3: master, m, v on the host, updated by the CPU AdamW
  bool param = false;      // stage 3 with optimizer: the compute-copy shard on the host
  // GPU: the copies on two copy streams, overlapping the CPU update (optim/zero/offload_copies.h); false:
  // each copy waited for in turn (the reference the pipelined mode must equal bit for bit). The CPU backend
  // is always synchronous.
  bool pipelined = true;
  // Delayed parameter update (ZeRO-Offload's DPU; opt-in): step t's CPU update runs on a host thread while
  // step t+1's forward and backward run with the parameters of step t (one update stale); it lands at the
  // start of step t+1's step() (or finish_delayed_update()). Stage 3 with param keeps a separate staging
  // shard so that the update never writes what the forward is gathering.
  bool delayed_update = false;
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
  // GPU, world size > 1: reductions on a communication stream, overlapping backward (see the top of this
  // file). Nothing on the CPU backend (the in-process host collectives are synchronous) or at world size 1.
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

struct ZeroStepResult {
  double grad_norm = 0;  // of the unscaled, averaged gradients before clipping; +inf when skipped
  bool applied = true;   // false: fp16 overflow, no update
};

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
// The stage-0 gradient buffer's units as the model places it in its activation arena (GradientLayout).
GradientLayout stage0_gradient_layout(const ZeroPartition& partition);
// Whether a run puts its gradients on the activations (ZeroEngineOptions::gradient_memory): stage 0, one
// micro-batch per step and rank, no gradient checkpointing.
bool gradients_on_activations(const DebertaConfig& model, int stage, int64_t micro_batches_per_step);

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

class ZeroEngine final : public DebertaUnitHooks {
 public:
  // `table`, `config` and `comm` must outlive the engine. Allocates every buffer (device buffers through
  // the calling thread's device allocator). Parameters start at zero: call load_full_parameters
  // (or load_parameter for every tensor, then finish_loading).
  ZeroEngine(const ParameterTable& table, const DebertaConfig& config, Communicator& comm,
             ZeroEngineOptions options);
  ~ZeroEngine() override;

  const ZeroPartition& partition() const { return partition_; }
  const ZeroEngineOptions& options() const { return options_; }
  int rank() const { return comm_.rank(); }
  int world_size() const { return comm_.world_size(); }

  // What the model reads and where it writes gradients (stage 3 / stage 2: views into gather buffers and
  // gradient buckets, valid between the hooks' acquire and release).
  const DebertaTensors& parameter_handles() const { return param_handles_; }
  const DebertaTensors& gradient_handles() const { return grad_handles_; }

  // Call before each micro-batch's backward: `last` = the last micro-batch of the accumulation window
  // (stages 0/1 reduce only then; 2/3 reduce every micro-batch and `first` starts the accumulator).
  void begin_backward(bool first, bool last);

  // DebertaUnitHooks: stage-3 gathers and gradient reductions.
  void acquire(size_t unit, Pass pass) override;
  void release(size_t unit, Pass pass) override;
  void gradients_ready(size_t unit) override;
  // Stage 0, a window's first micro-batch: backward writes the embeddings' and the layers' gradients instead
  // of adding to a buffer the step zeroed (overwrites_gradients); everything else accumulates.
  kernels::GradWrite gradient_write(size_t unit) override;

  // One optimizer step over the reduced gradients (collective). `scaler` is disabled outside fp16. With
  // offload.delayed_update it first lands the previous step's update, then starts this one's and returns.
  ZeroStepResult step(double lr, LossScaler& scaler);
  // Collective: waits for a delayed update in flight and puts its parameters where the model reads them
  // (stage 1/2: all-gathered). Call on every rank before reading parameters outside the step loop
  // (evaluation); read_state, write_state, gather_full_master and refresh_compute_copy do it themselves.
  // A no-op without a delayed update.
  void finish_delayed_update();

  // Collective: every rank passes the same full f32 host arena laid out by table.layout(f32); each keeps its
  // part in the master and refreshes the compute copy (load_parameter for every tensor, then finish_loading).
  void load_full_parameters(const Arena& host_f32);
  // Loading one tensor at a time, so the host never stages the whole model: every rank passes the full
  // values of table entry `tensor` (numel floats) and keeps the pieces it owns in its master. Not collective;
  // after the last tensor every rank calls finish_loading (collective: re-derives the compute copy).
  void load_parameter(size_t tensor, std::span<const float> values);
  void finish_loading() { refresh_compute_copy(); }
  // Collective: the full f32 master gathered unit by unit into `host_f32` (table.layout(f32)); ranks that
  // pass nullptr only take part in the gathers.
  void gather_full_master(const Arena* host_f32);
  // The same, handing each tensor's full f32 values (a view, on the engine's device, valid during the call)
  // to `take` in table order instead of filling a whole-model arena: the host then holds one unit at a time
  // (a model file is written so). Ranks that pass an empty function only take part in the gathers.
  using TensorSink = std::function<void(size_t tensor, const Tensor& values)>;
  void gather_full_master(const TensorSink& take);

  // Checkpoint access to the state this rank owns (stage 0: everything). kind: 0 master, 1 adam m, 2 adam v.
  // Copies the owned part of tensor `tensor` ([tensor_offset, tensor_offset + numel)) to or from host memory.
  struct OwnedPiece {
    size_t tensor;
    int64_t tensor_offset;
    int64_t numel;
  };
  std::vector<OwnedPiece> owned_pieces() const;
  const std::string& tensor_name(size_t tensor) const { return table_.entries()[tensor].name; }
  int64_t tensor_numel(size_t tensor) const { return table_.entries()[tensor].numel(); }
  void read_state(int kind, const OwnedPiece& piece, std::span<float> host) const;
  void write_state(int kind, const OwnedPiece& piece, std::span<const float> host);
  // After write_state of masters: re-derive the compute copy (collective for stages 1/2).
  void refresh_compute_copy();

  // Parameters on disk: the parameter file's traffic so far; nullptr without it.
  const SwappedParameterStats* parameter_swap_stats() const;
  // The disk tier (optimizer state on disk): its traffic so far; nullptr without it.
  const swap::SwappedStateStats* optimizer_swap_stats() const;
  // Whether the offloaded CPU update overlaps the next forward in this run (ZeroOffload::overlap_update,
  // asked or where it applies): what the engine decided from the options, the device and the world size.
  bool overlaps_offloaded_update() const;

  AdamW& adamw() { return adamw_; }
  const AdamW& adamw() const { return adamw_; }
  ZeroStateBytes state_bytes() const;

 private:
  struct Impl;
  // The reduction of unit `unit`'s gradients and its follow-ups, on the current stream.
  void reduce_unit_gradients(size_t unit);
  // overlap_comm: the comm stream waits for the compute stream's work so far; `unit` reduced on the comm
  // stream; the stage-3 reduction deferred to the next gather queued there; the compute stream waits for
  // everything queued on the comm stream. No-ops without overlap.
  void comm_waits_for_compute();
  void reduce_on_comm(size_t unit);
  void reduce_deferred_on_comm();
  void compute_waits_for_comm();
  // Stage 3: the unit's parameters into its gather buffer, current stream (`pass` orders the read ahead of
  // parameters on disk).
  void gather_unit(size_t unit, Pass pass);
  void gather_updated_compute_copy();  // stages 1/2, world > 1: every rank's updated slices to everyone
  void update_offloaded_blocks(double lr, float grad_scale, bool publish_each, const Arena& gradients);
  void update_offloaded_block(size_t unit, double lr, float grad_scale, const Arena& gradients);
  // Whether backward writes unit u's gradients on a window's first micro-batch (gradient_write), so that the
  // step need not zero them: stage 0's embeddings and layers (the shared unit's conv and relative-table
  // gradients add up several terms over the pass, so it stays zeroed by the AdamW).
  bool overwrites_gradients(size_t unit) const;

  const ParameterTable& table_;
  Communicator& comm_;
  ZeroEngineOptions options_;
  ZeroPartition partition_;
  AdamW adamw_;
  DebertaTensors param_handles_, grad_handles_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt::optim
