// The predicted step time of a plan, from the parts of the step (per rank):
//
//   part            time                                                              per
//   GEMMs           6 x (encoder layer parameters) x tokens + attention's 6 B L h (2L + 2W)   micro-batch
//                   FLOPs at gemm_tflops (8 and 8/6 of it with checkpointing: one more
//                   forward)
//   memory-bound    activation_bytes_per_token_layer x tokens x layers at hbm_gbps         micro-batch
//   launch floor    layer_latency_us x layers (x 4/3 with checkpointing)                    micro-batch
//   ZeRO stage      2/3: the gradient fold into the shard, 8 bytes a parameter at hbm;     micro-batch
//                   3: the gathers, 8 bytes a parameter; 0/1 with accumulation: the
//                   accumulating GEMMs read the f32 gradients, 4 bytes a parameter
//   GPU AdamW       shard parameters at gpu_adamw_gparams                                  step
//   CPU offload     gradient download 4 bytes a parameter at pcie (exposed only past the    step
//                   last backward and the norm pass), the host norm pass 4 bytes at
//                   host_gbps, the CPU AdamW at cpu_adamw_gparams, the 16-bit upload at
//                   pcie (exposed past the CPU AdamW); the overlapped update (world 1,
//                   no disk) hides up to 0.9 of the next forward
//   disk tier       12 bytes a parameter read at disk_read_gbps and written at              step
//                   disk_write_gbps, in series with the CPU AdamW
//   param offload   the stage-3 shard uploaded for forward and backward, 4 bytes a          micro-batch
//                   parameter at pcie
//   partial offload ratio r (ZeroOffload::ratio; the engine's step at any stage, no            step
//                   overlapped update, the CPU AdamW on all threads): the host part is the
//                   shard's first r S elements, the embeddings and the first layers. Each unit's
//                   host part goes down at gradients_ready on the last micro-batch (one copy
//                   stream at pcie, in backward's order: the last layer first, the embeddings
//                   last, ready at the backward's end: at xlarge 197 M parameters, ~14 ms that
//                   nothing hides). step(): the norm on the device over the shard, then the GPU
//                   AdamW on 1 - r queued beside the CPU side, which takes the blocks in unit
//                   order, each once its download landed, queueing its upload (2 bytes a
//                   parameter) as it ends: the longer side after the norm
// The defaults are docs/PERFORMANCE.md's measured xlarge figures (seq 128, bf16, one H200; the H100 runs of
// issue 40 agree within a few %): stage 0 bs 8 / 40 / 64 / 80 28.3 / 67.5 / 95.1 / 119 ms, +20.7 ms with
// checkpointing at bs 40, stage 2 / 3 +2.1 / +3.9 %, GPU AdamW 8.22 ms, ZeRO-2 + optimizer offload bs 40 /
// 128 274 / 359 ms, CPU AdamW 0.20 s, the norm pass 21 ms, ZeRO-3 + both offloads bs 40 342 ms, disk 1.6 /
// 2.0 GB/s. The model reproduces those within ~6 % (tests/app/test_plan_cost_model.cpp).
//
// Collectives at world size W > 1 (StepCost::comm_ms; predict_collectives), as the engine issues them: one
// per unit (the partition's units, padded numel n), f32 gradients (4 n bytes), the compute copy in the
// compute dtype (t n bytes, CostInputs::compute_bytes):
//   stage 0     all-reduce of the gradients                                                     step
//   stage 1     reduce-scatter of the gradients (all-reduce without reduce_scatter)             step
//               + all-gather of the updated compute copy                                         step
//   stage 2     reduce-scatter of the gradients (every micro-batch's bucket)                     micro-batch
//               + all-gather of the updated compute copy                                         step
//   stage 3     reduce-scatter of the gradients + the forward's and the backward's all-gathers    micro-batch
//               of the parameters (no gather after the step: the next forward's are these)
// A collective of B bytes (the whole buffer: all-reduce's, reduce-scatter's input, all-gather's output):
//   nccl (one rank per GPU)  ring: all-reduce 2 (W-1)/W B, reduce-scatter and all-gather (W-1)/W B, at
//                            nccl_bus_gbps (NCCL's bus bandwidth: algorithm bandwidth x those factors)
//   shared_device (in-process ranks on one GPU, runtime/cuda/in_process_device_communicator.cu): the rank's
//                            kernels read the peers' buffers on the same device: all-reduce (W + 3) B (W
//                            inputs read, the scratch written, then copied to the output), reduce-scatter
//                            (1 + 1/W) B, all-gather 2 (W-1)/W B of memory traffic, at device_group_gbps.
//                            Every rank's compute and collectives share that GPU, so the group's step is
//                            about W times the predicted (per-rank) one; the ranking is the same.
// Hidden: with overlap_comm on NCCL the gradient collectives run on the comm stream under the backward of
// the micro-batches that reduce (0/1: the last; 2/3: each): of a backward's reduction R, all but the units
// ready at its end (embeddings and the shared unit, reduced after the last layer) may hide, exposed
// max(R x those units' share, R - backward). The all-gathers are waited for (exposed); on a shared device
// nothing is hidden (the collective kernels compete with the backward's on the one GPU).
//
// Measured encoder costs (MachineFigures::layer, from --calibrate's timing of the model's own layers on the
// GPU) replace the three compute rows above where present: per micro-batch of B sequences of length L,
//   encoder layer, forward + backward   pair: fixed_us + token_ns x B L + score_ps(L) x B heads L^2
//                                       (LayerTerms; score_ps interpolated in log L between the measured
//                                       lengths: the attention kernel, stored or flash, changes with L)
//   embeddings + head, fwd + bwd        head_fixed_us + head_token_ns x B L
//   an encoder layer's forward alone    forward: the same terms (what the overlapped update hides under),
//                                       its own fit, since the forward's share of a layer moves with the
//                                       shape (H100, xlarge: 0.35 at 32 x 128, 0.42 at 32 x 512, 0.16 at
//                                       2 x 2048 where the flash backward dominates)
//   checkpointing's cost, a layer       recompute: the same terms, timed as the checkpointed pair less the
//                                       plain one (H100, xlarge: the forward's, 2.31 against 2.40 ms at
//                                       128 x 128); where not timed, the forward's
// The measured costs are those of the model they were timed for (MeasuredLayerCost::dims: hidden, ffn, heads,
// relative window, attention kernel); for another model predict_step keeps the formulas and says why
// (StepCost::compute_note), as it does for figures that do not name their model.
// A machine's own figures are kept in a small JSON file (MachineFigures::load / save, train_mrpc
// --machine_figures); `--calibrate` measures the host's and the GPU's into it (app/plan/calibrate.h).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "app/plan/plan.h"
#include "model/config.h"
#include "runtime/communicator.h"

namespace zt::plan {

// What decides an encoder layer's measured cost: the projections' h and I, the attention's heads, relative
// window (rows of the relative embeddings) and kernel.
struct LayerDims {
  int64_t hidden = 0, intermediate = 0, heads = 0, relative_rows = 0;
  std::string attention_kernel;  // "automatic" (stored below 1024 tokens, flash from 1024), "stored", "flash"
  static LayerDims of(const DebertaConfig& model);
  bool known() const { return hidden > 0; }
  std::string describe() const;  // "hidden 1536, ffn 6144, 24 heads, 512 relative rows, attention automatic"
  bool operator==(const LayerDims&) const = default;
};

// One of an encoder layer's measured costs in the fit's terms, per micro-batch of B sequences of length L:
// fixed_us + token_ns x B L + score_ps(L) x B heads L^2.
struct LayerTerms {
  double fixed_us = 0;           // launches, tails
  double token_ns = 0;           // per token (projections, memory-bound kernels)
  std::vector<double> score_ps;  // per score, at MeasuredLayerCost::score_lengths
  bool operator==(const LayerTerms&) const = default;
};

// The encoder's compute measured on one GPU at one model's dims (fit_layer_cost); all costs per micro-batch.
struct MeasuredLayerCost {
  LayerDims dims;  // the model timed (JSON key layer_model); unknown in files that do not say
  std::vector<double> score_lengths;  // ascending sequence lengths the per-score costs were measured at
  LayerTerms pair;                    // a layer's forward + backward
  LayerTerms forward;                 // its forward alone
  LayerTerms recompute;               // what checkpointing adds to its forward + backward (the recompute)
  double head_fixed_us = 0;           // embeddings, classifier head and loss, forward + backward
  double head_token_ns = 0;
  bool present() const { return !score_lengths.empty(); }
  bool operator==(const MeasuredLayerCost&) const = default;
  // terms.score_ps at `length`: linear in log L between the measured lengths, the end values outside them.
  double score_ps_at(const LayerTerms& terms, double length) const;
  // `terms` for `batch` sequences of `length`, microseconds.
  double us(const LayerTerms& terms, double batch, double length, double heads) const;
  double layer_us(double batch, double length, double heads) const { return us(pair, batch, length, heads); }
  double layer_forward_us(double batch, double length, double heads) const {
    return us(forward, batch, length, heads);
  }
  double layer_recompute_us(double batch, double length, double heads) const {
    return us(recompute, batch, length, heads);
  }
  double head_us(double batch, double length) const;
};

struct MachineFigures {
  std::string name = "H200, docs/PERFORMANCE.md";
  double gemm_tflops = 600;       // the step's GEMMs, sustained (bf16)
  double hbm_gbps = 4000;         // memory-bound kernels
  double layer_latency_us = 430;  // per encoder layer and micro-batch, forward + backward: launches, tails
  double activation_bytes_per_token_layer_per_hidden = 260;  // memory-bound bytes / (token x layer x hidden)
  double gpu_adamw_gparams = 108;                            // G parameters/s
  double pcie_gbps = 55;                                     // pinned copies, each direction
  double host_gbps = 170;  // the offload's end-of-backward term, 4 bytes a parameter (fitted, not calibrated)
  double cpu_adamw_gparams = 4.4;       // G parameters/s, all cores
  double overlap_hidden_forward = 0.9;  // of the next forward hidden under the overlapped CPU update
  double disk_read_gbps = 1.6;
  double disk_write_gbps = 2.0;
  // NCCL's bus bandwidth between the GPUs (nccl-tests' busBw: the algorithm bandwidth times 2 (W-1)/W for
  // an all-reduce, (W-1)/W for a reduce-scatter or all-gather). The default is a conservative figure for
  // H100 NVLink-class machines, not a measurement: under half of NVLink 4's 450 GB/s a direction (PCIe-only
  // GPUs reach ~20); --calibrate measures it where >= 2 GPUs are visible.
  double nccl_bus_gbps = 200;
  // In-process ranks sharing one GPU: the memory traffic rate of their collective kernels (the default is
  // hbm_gbps's; --calibrate times a two-rank all-reduce on the device).
  double device_group_gbps = 4000;
  // Measured on the GPU by --calibrate (JSON keys layer_fixed_us, layer_token_ns, layer_score_ps as
  // [[L, ps], ...], layer_forward_fixed_us, layer_forward_token_ns, layer_forward_score_ps (the same
  // lengths), layer_recompute_fixed_us, layer_recompute_token_ns, layer_recompute_score_ps, head_fixed_us,
  // head_token_ns: all or none, and layer_model, an object of the LayerDims, with them); absent in the
  // defaults.
  MeasuredLayerCost layer;

  // Throws zt::Error naming the file and key on a missing file, bad JSON, a non-positive figure, an unknown
  // key or a partial set of the measured layer keys; keys not in the file keep their defaults.
  static MachineFigures load(const std::string& path);
  void save(const std::string& path) const;
};

// Where `--calibrate` keeps this machine's figures when no --machine_figures is given, and where the planner
// looks for them: $ZT_MACHINE_FIGURES, else $XDG_CACHE_HOME/zerotrain/machine_figures.json, else
// ~/.cache/zerotrain/machine_figures.json (the relative ".cache/..." when HOME is unset too).
std::string default_machine_figures_path();

// The figures a plan is ranked with: `path` when given (it must load), else the cached calibration at
// default_machine_figures_path() when that file exists, else the built-in ones; `source` says which and
// where, for the plan's report.
struct PlanningFigures {
  MachineFigures figures;
  std::string source;
};
PlanningFigures planning_figures(const std::string& path);

// The step's parts in milliseconds (per rank); total() is the predicted step.
struct StepCost {
  double compute_ms = 0;     // GEMMs + memory-bound kernels + launch floor, all micro-batches
  double zero_ms = 0;        // the stage's extra work (folds, gathers, accumulating reads)
  double optimizer_ms = 0;   // the update: GPU AdamW, or the exposed offload parts, or both (partial)
  double transfer_ms = 0;    // parameter offload uploads, exposed gradient downloads
  double hidden_ms = 0;      // the next forward hidden under the overlapped CPU update (subtracted)
  double comm_ms = 0;        // the collectives between ranks not hidden under backward (0 at world size 1)
  std::string compute_note;  // why measured layer costs were not used for the compute part ("" if they were
                             // or there were none)
  double total() const { return compute_ms + zero_ms + optimizer_ms + transfer_ms - hidden_ms + comm_ms; }
};

// How the ranks' collectives run (runtime/communicator.h).
enum class CollectiveTransport {
  nccl,           // one rank per GPU (mpirun -np W): NCCL's ring collectives
  shared_device,  // --world_size W in one process on one GPU: the in-process device group's kernels
};

struct CostInputs {
  const DebertaConfig* model = nullptr;  // the architecture (gradient_checkpointing is the plan's)
  int64_t max_length = 128;
  int world_size = 1;
  int64_t parameters = 0;  // total parameters of the model
  CollectiveTransport collectives = CollectiveTransport::nccl;
  double compute_bytes = 2;    // the compute dtype's bytes a parameter: what the all-gathers move
  bool overlap_comm = false;   // zero_optimization.overlap_comm: the reductions on the comm stream (nccl)
  bool reduce_scatter = true;  // zero_optimization.reduce_scatter: false all-reduces the gradients instead
};

// One collective of `bytes` (the whole buffer: an all-reduce's, a reduce-scatter's input, an all-gather's
// output) for one rank, milliseconds (the table above); 0 at world size 1.
double collective_ms(CollectiveKind kind, double bytes, int world_size, CollectiveTransport transport,
                     const MachineFigures& figures);

// A step's collectives (per rank, all micro-batches), milliseconds.
struct CollectiveCost {
  double gradient_ms = 0;  // the gradients' all-reduce or reduce-scatters
  double gather_ms = 0;  // the parameters' all-gathers (stages 1/2: the updated copy; 3: forward + backward)
  double hidden_ms = 0;  // of gradient_ms, under backward (overlap_comm over NCCL)
  double exposed_ms() const { return gradient_ms + gather_ms - hidden_ms; }
};
// `backward_ms`: one micro-batch's backward (what a reduction can hide under).
CollectiveCost predict_collectives(const Plan& plan, const CostInputs& inputs, const MachineFigures& figures,
                                   double backward_ms);

// Timings of the model's forward + backward (and forward alone) at `layers` encoder layers, for the fit.
struct LayerTiming {
  int64_t layers = 0, batch = 0, length = 0;
  double pair_ms = 0;               // forward + backward
  double forward_ms = 0;            // forward alone
  double checkpointed_pair_ms = 0;  // forward + backward with gradient checkpointing; 0: not timed
};
// The least-squares fit of MeasuredLayerCost to timings at two depths for each (batch, length) (their
// difference over the layers added is a layer, the rest of the shallow model embeddings + head). score_ps
// gets a value at each length in `score_lengths`; timings at lengths below the first share its value, which
// separates the per-token cost from the per-score one (at one length both grow with B alone). Needs two batch
// sizes at the shortest length and lengths besides; throws zt::Error on missing pairs or a singular fit.
// Negative intercepts (noise) become 0. The recompute is fitted where every timing has its checkpointed pair
// (a forward's terms where none has; some but not all throws).
MeasuredLayerCost fit_layer_cost(std::span<const LayerTiming> timings, int64_t heads,
                                 std::vector<double> score_lengths);

// Why the figures' measured layer costs do not apply to `model` ("" when they do or there are none): they
// were timed for another model's dims, or do not say which.
std::string measured_layer_cost_mismatch(const MachineFigures& figures, const DebertaConfig& model);

StepCost predict_step(const Plan& plan, const CostInputs& inputs, const MachineFigures& figures);

}  // namespace zt::plan
