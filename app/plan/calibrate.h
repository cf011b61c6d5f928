// `train_mrpc --calibrate`: the host side of the cost model measured on this machine and kept in the
// --machine_figures file, the figures that differ most between hosts (the CPU AdamW ran 3.92 and 5.45 G
// parameters/s on two H200 hosts, docs/PERFORMANCE.md) and that decide between offload and accumulation.
//   cpu_adamw_gparams  the real CPU AdamW (optim/adamw.h, all threads, the bf16 copy written as the offloaded
//                      update writes it) over `elements` parameters, the best of `repeats`: the threads the
//                      engine gives the update inside step() (a partial offload's, the non-overlapped full
//                      one's); the overlapped and delayed updates leave one core to the rank's thread
//   host_norm_gbps     a sum of squares over f32 gradients on all threads (reported, not stored: the GPU
//                      engine takes the gradient norm on the device, optim/zero/gradient_norm.cpp, and the
//                      model's host_gbps term stays the fitted figure; on one H100 host the measured 74 GB/s
//                      in its place predicted the ZeRO-1 + offload bs 40 step 16 % slow, the fitted one 5 %)
// With a GPU present (CUDA builds) `measure_gpu_figures` measures the device side on the current device:
//   gemm_tflops        the run's encoder layer's six projections (Q, K, V, O: h x h; the feed-forward h x I,
//   I x h)
//                      forward, dX and dW through kernels::linear (cuBLASLt, bf16, fp32 accumulate) at
//                      `tokens` rows: 3 x 2 x rows x (4 h^2 + 2 h I) FLOPs per pass, the best of `repeats`
//   hbm_gbps           a device-to-device copy of 1 GiB, read + write bytes
//   pcie_gbps          pinned copies of 256 MiB each way; the slower direction (both are on the offload's
//                      path: gradients down, 16-bit parameters up). Pageable copies are reported beside them
//                      (the plans pin their buffers, so the model does not use them).
//   gpu_adamw_gparams  the fused GPU AdamW (optim/cuda/adamw.cuh) over 64 M parameters with the bf16 copy
// and `time_encoder_layers` times the model's own encoder (MachineFigures::layer, which then replaces the
// GEMM, memory-bound and latency rows of the step's compute): DebertaForSequenceClassification at the run's
// dims (model_config_for_calibration: the flags' or the checkpoint's model; bf16, a 1024-token vocabulary,
// dropout on), at layer_timing_depths() (2 and 4 encoder layers), forward + backward,
// forward alone and forward + backward with gradient checkpointing, at each of layer_timing_points() (lengths
// 64 to 2048, 4096 and 16384 tokens a micro-batch), with the model's attention kernel (automatic: stored
// below 1024, flash from it; or the one it forces); fit_layer_cost (app/plan/cost_model.h) turns them into
// the per-layer fixed, per-token and per-score costs by length. Without them (old figures files)
// layer_latency_us and the memory-bound bytes per token stay as given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "app/plan/cost_model.h"
#include "model/config.h"

namespace zt::plan {

struct HostCalibration {
  MachineFigures figures;  // base with cpu_adamw_gparams measured
  double host_norm_gbps = 0;
};
HostCalibration calibrate_host(MachineFigures base, int64_t elements = int64_t{64} << 20, int repeats = 3);

struct GpuFigures {
  std::string device;  // describe_devices()
  double gemm_tflops = 0;
  double hbm_gbps = 0;
  double h2d_pinned_gbps = 0, d2h_pinned_gbps = 0;
  double h2d_pageable_gbps = 0, d2h_pageable_gbps = 0;
  double gpu_adamw_gparams = 0;
  std::string describe() const;  // one line of the figures, for --calibrate's report
};

// Measures the figures above on the current GPU for a layer of `hidden` x `intermediate` at `tokens` rows.
// Throws zt::Error without a GPU (or in a build without CUDA).
GpuFigures measure_gpu_figures(int64_t hidden, int64_t intermediate, int64_t tokens = 5120, int repeats = 5);

// The (batch, length) points time_encoder_layers times, each at both depths; and the lengths the per-score
// cost is fitted at (the shortest point, below the first, separates the per-token cost).
struct LayerTimingPoint {
  int64_t batch = 0, length = 0;
};
std::vector<LayerTimingPoint> layer_timing_points();
// The two encoder depths timed: a layer is their difference over the layers added. 2 and 4, not 1 and 2: the
// last layer's backward follows its own forward, so its activations are still in L2; in the step's deep
// model every other layer's are long gone. Timed at 1 and 2 layers (one H100, xlarge), a layer came out at
// 699 us fixed + 257 ns a token (+ scores); at 2 and 4, 633 us + 263 ns
// (docs/bench/2026-12-06-h100-session19); at 2 and the model's 24, 645 us + 280 ns
// (docs/bench/2026-12-06-h100-session20): deeper timing changes nothing that the planner's picks depend on,
// so it takes the cheap pair.
std::vector<int64_t> layer_timing_depths();
std::vector<double> layer_score_lengths();

// The model's forward + backward, forward alone and checkpointed forward + backward timed on the current GPU
// at `model`'s dims at each of layer_timing_depths() and each of `points`, the weights the from-scratch
// init's (a GEMM's power, hence the limiter's clock, follows its operands): each the best of three runs
// after an untimed one, scaled by its sustained clock (the mean of back-to-back runs after 1.5 s of them
// over that best: a step holds the power cap's clock, bursts do not). Throws zt::Error without a GPU (or in
// a build without CUDA).
std::vector<LayerTiming> time_encoder_layers(const DebertaConfig& model,
                                             std::span<const LayerTimingPoint> points);

// `base` with the measured layer costs in place, recorded as `model`'s (MeasuredLayerCost::dims: predict_step
// uses them for that model's dims only) and the name saying what was timed.
MachineFigures with_layer_cost(MachineFigures base, const MeasuredLayerCost& layer,
                               const DebertaConfig& model);

// `base` with the GPU's figures in place (pcie_gbps: the slower pinned direction) and the device named.
MachineFigures with_gpu_figures(MachineFigures base, const GpuFigures& gpu);

// The collectives' rates (MachineFigures::nccl_bus_gbps, device_group_gbps; cost_model.h's table), each an
// all-reduce of `bytes` of f32, one host thread a rank, the best of `repeats` (a barrier before each) after
// one untimed:
//   nccl_bus_gbps      across every visible GPU (make_nccl_group, one communicator a GPU): NCCL's bus
//                      bandwidth, bytes x 2 (W-1)/W / time; not measured (nccl_note says why) with fewer
//                      than 2 GPUs or without NCCL
//   device_group_gbps  two in-process ranks on the current GPU (make_in_process_device_group): the ranks'
//                      memory traffic, W (W + 3) bytes, over the time (the cost model charges each rank its
//                      (W + 3) bytes at this rate, its share of the one GPU)
struct CollectiveFigures {
  double nccl_bus_gbps = 0;  // 0: not measured
  int nccl_gpus = 0;
  std::string nccl_note;  // why it was not measured ("" when it was)
  double device_group_gbps = 0;
  std::string describe() const;
};
// Throws zt::Error without a GPU (or in a build without CUDA).
CollectiveFigures measure_collective_figures(int64_t bytes = int64_t{256} << 20, int repeats = 5);

// `base` with the measured collective rates in place (those not measured keep their values).
MachineFigures with_collective_figures(MachineFigures base, const CollectiveFigures& measured);

}  // namespace zt::plan
