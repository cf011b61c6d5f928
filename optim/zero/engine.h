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
//   offload.ratio < 1 (a partial offload): only the shard's first H ~ ratio x S elements go through the
//     pipeline above; the rest keep their master and m, v on the device and are updated there by the
//     device's AdamW, queued before the CPU's work so that both run at once (split_owned_blocks in
//     optim/zero/owned_blocks.h); checkpoints see one layout whatever the ratio.
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
#include "optim/zero/engine_options.h"
#include "optim/zero/host_optimizer_store.h"
#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "optim/zero/zero_plan.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"

namespace zt::optim {

struct ZeroStepResult {
  double grad_norm = 0;  // of the unscaled, averaged gradients before clipping; +inf when skipped
  bool applied = true;   // false: fp16 overflow, no update
};

// The stage-0 gradient buffer's units as the model places it in its activation arena (GradientLayout).
GradientLayout stage0_gradient_layout(const ZeroPartition& partition);
// Whether a run puts its gradients on the activations (ZeroEngineOptions::gradient_memory): stage 0, one
// micro-batch per step and rank, no gradient checkpointing.
bool gradients_on_activations(const DebertaConfig& model, int stage, int64_t micro_batches_per_step);

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
  // offload.delayed_update it takes the norm, lands what is left of the previous step's update (unit by
  // unit as the CPU finishes each; ZeroOffload::delayed_landing), then starts this one's and returns.
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
  // With offload.optimizer: host wall time of the CPU AdamW of the latest update that ended (delayed: the
  // one that landed last), in ms; 0 without offload or before the first.
  double offloaded_update_ms() const;

  AdamW& adamw() { return adamw_; }
  const AdamW& adamw() const { return adamw_; }
  ZeroStateBytes state_bytes() const;

 private:
  struct Impl;
  // Construction: the offloaded optimizer (its host store, copies, overlapped update), the streams of the
  // overlaps, and the handles the model reads and writes through.
  void build_offloaded_optimizer(const ZeroEngineOptions& options, MemoryKind host_kind,
                                 std::optional<swap::SwappedStateOptions> disk_state,
                                 std::vector<HostBlockExtent> sub_group_extents);
  void build_streams(const ZeroEngineOptions& options);
  void bind_handles(const DebertaConfig& config);
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
  void gather_updated_compute_copy();
  // stages 1/2, world > 1: every rank's updated slices to everyone
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
