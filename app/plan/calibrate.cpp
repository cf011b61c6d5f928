#include "app/plan/calibrate.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "optim/adamw.h"
#include "runtime/check.h"
#include "runtime/device.h"

namespace zt::plan {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Sum of squares over `x` on every hardware thread, each its own slice (the host norm pass's pattern).
double parallel_sum_of_squares(const std::vector<float>& x) {
  const auto threads = static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  const auto n = static_cast<int64_t>(x.size());
  std::vector<double> partial(static_cast<size_t>(threads), 0.0);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // 16 independent f32 lanes, so the loop vectorizes without reassociation; the lanes add in double.
      float lanes[16] = {};
      const int64_t begin = n * t / threads, end = n * (t + 1) / threads;
      int64_t i = begin;
      for (; i + 16 <= end; i += 16)
        for (int k = 0; k < 16; ++k)
          lanes[k] += x[static_cast<size_t>(i + k)] * x[static_cast<size_t>(i + k)];
      double sum = 0;
      for (; i < end; ++i) sum += static_cast<double>(x[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      for (float lane : lanes) sum += lane;
      partial[static_cast<size_t>(t)] = sum;
    });
  }
  for (std::thread& th : pool) th.join();
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

}  // namespace

HostCalibration calibrate_host(MachineFigures base, int64_t elements, int repeats) {
  ZT_CHECK(elements > 0 && repeats > 0, "calibrate_host: elements and repeats must be positive");
  const auto n = static_cast<size_t>(elements);
  std::vector<float> params(n, 0.5f), grads(n, 1e-3f), m(n, 0.0f), v(n, 0.0f);
  std::vector<bf16> copy(n);
  optim::AdamW adamw(optim::AdamWHyper{.lr = 1e-5});
  const optim::TensorRange all{.offset = 0, .numel = elements, .weight_decay = true};
  double best_adam = 1e30, best_norm = 1e30, checksum = 0;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    adamw.step({.params = params, .grads = grads, .exp_avg = m, .exp_avg_sq = v}, {&all, 1}, 1e-5,
               std::span<bf16>(copy));
    best_adam = std::min(best_adam, seconds_since(start));
    start = std::chrono::steady_clock::now();
    checksum += parallel_sum_of_squares(grads);
    best_norm = std::min(best_norm, seconds_since(start));
  }
  ZT_CHECK(checksum > 0, "calibrate_host: the norm pass summed nothing");
  base.cpu_adamw_gparams = static_cast<double>(elements) / best_adam / 1e9;
  const std::string suffix = " + this host's CPU AdamW (--calibrate)";
  if (!base.name.ends_with(suffix)) base.name += suffix;
  return {.figures = base, .host_norm_gbps = static_cast<double>(elements) * 4 / best_norm / 1e9};
}

std::string GpuFigures::describe() const {
  return str(device, ": GEMM ", gemm_tflops, " TFLOP/s, HBM ", hbm_gbps, " GB/s, PCIe pinned ",
             h2d_pinned_gbps, " GB/s up / ", d2h_pinned_gbps, " down, pageable ", h2d_pageable_gbps, " up / ",
             d2h_pageable_gbps, " down, GPU AdamW ", gpu_adamw_gparams, " G parameters/s");
}

MachineFigures with_gpu_figures(MachineFigures base, const GpuFigures& gpu) {
  ZT_CHECK(gpu.gemm_tflops > 0 && gpu.hbm_gbps > 0 && gpu.h2d_pinned_gbps > 0 && gpu.d2h_pinned_gbps > 0 &&
               gpu.gpu_adamw_gparams > 0,
           "with_gpu_figures: a GPU figure is not positive (", gpu.describe(), ")");
  base.gemm_tflops = gpu.gemm_tflops;
  base.hbm_gbps = gpu.hbm_gbps;
  base.pcie_gbps = std::min(gpu.h2d_pinned_gbps, gpu.d2h_pinned_gbps);
  base.gpu_adamw_gparams = gpu.gpu_adamw_gparams;
  const std::string suffix = " + " + gpu.device + " measured (--calibrate)";
  if (!base.name.ends_with(suffix)) base.name += suffix;
  return base;
}

std::string CollectiveFigures::describe() const {
  return str("collectives: ",
             nccl_bus_gbps > 0
                 ? str("NCCL all-reduce across ", nccl_gpus, " GPUs ", nccl_bus_gbps, " GB/s bus")
                 : "NCCL not measured (" + nccl_note + ")",
             ", in-process device group ", device_group_gbps, " GB/s");
}

MachineFigures with_collective_figures(MachineFigures base, const CollectiveFigures& measured) {
  ZT_CHECK(measured.device_group_gbps > 0 && measured.nccl_bus_gbps >= 0,
           "with_collective_figures: a figure is not positive (", measured.describe(), ")");
  base.device_group_gbps = measured.device_group_gbps;
  std::string suffix = " + in-process collectives";
  if (measured.nccl_bus_gbps > 0) {
    base.nccl_bus_gbps = measured.nccl_bus_gbps;
    suffix += str(" + NCCL across ", measured.nccl_gpus, " GPUs");
  }
  suffix += " measured (--calibrate)";
  if (!base.name.ends_with(suffix)) base.name += suffix;
  return base;
}

std::vector<LayerTimingPoint> layer_timing_points() {
  std::vector<LayerTimingPoint> points;
  for (int64_t length : {64, 128, 512, 1024, 2048})
    for (int64_t tokens : {4096, 16384}) points.push_back({.batch = tokens / length, .length = length});
  return points;
}

std::vector<int64_t> layer_timing_depths() {
  return {2, 4};
}

std::vector<double> layer_score_lengths() {
  return {128, 512, 1024, 2048};
}

MachineFigures with_layer_cost(MachineFigures base, const MeasuredLayerCost& layer,
                               const DebertaConfig& model) {
  ZT_CHECK(layer.present(), "with_layer_cost: no measured layer cost");
  base.layer = layer;
  base.layer.dims = LayerDims::of(model);
  const std::string suffix = str(" + encoder layers (", base.layer.dims.describe(),
                                 ", bf16) timed forward + backward at lengths 64-2048 (--calibrate)");
  if (!base.name.ends_with(suffix)) base.name += suffix;
  return base;
}

#ifndef ZT_WITH_CUDA
GpuFigures measure_gpu_figures(int64_t, int64_t, int64_t, int) {
  ZT_FAIL("the GPU figures need a CUDA build with a GPU: ", describe_devices());
}

std::vector<LayerTiming> time_encoder_layers(const DebertaConfig&, std::span<const LayerTimingPoint>) {
  ZT_FAIL("timing the encoder layers needs a CUDA build with a GPU: ", describe_devices());
}

CollectiveFigures measure_collective_figures(int64_t, int) {
  ZT_FAIL("the collectives' figures need a CUDA build with a GPU: ", describe_devices());
}
#endif

}  // namespace zt::plan
