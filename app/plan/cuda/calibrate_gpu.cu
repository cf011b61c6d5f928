// measure_gpu_figures (app/plan/calibrate.h): the cost model's device rates on the current GPU. Every figure
// is the best of `repeats` timed passes (CUDA events on the thread's current stream) after one untimed pass,
// so first-use costs (cuBLASLt plans, the GEMM workspace, page mapping of pinned memory) are not in it.
// time_model scales each encoder timing by its sustained clock (sustained_factor).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <exception>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "app/plan/calibrate.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "model/deberta.h"
#include "model/init.h"
#include "model/parameters.h"
#include "optim/cuda/adamw.cuh"
#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/log.h"
#include "runtime/stream.h"

namespace zt::plan {

namespace {

// The device time of what `enqueue` puts on the current stream, milliseconds (CUDA events around it).
template <typename Enqueue>
double event_ms(Enqueue&& enqueue) {
  cudaStream_t stream = current_stream();
  cudaEvent_t start, stop;
  ZT_CUDA_CHECK(cudaEventCreate(&start));
  ZT_CUDA_CHECK(cudaEventCreate(&stop));
  ZT_CUDA_CHECK(cudaEventRecord(start, stream));
  enqueue();
  ZT_CUDA_CHECK(cudaEventRecord(stop, stream));
  ZT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  ZT_CUDA_CHECK(cudaEventDestroy(start));
  ZT_CUDA_CHECK(cudaEventDestroy(stop));
  return static_cast<double>(ms);
}

// The best time of `repeats` runs of `pass` (after one untimed run) on the current stream, milliseconds.
template <typename Pass>
double best_ms(int repeats, Pass&& pass) {
  pass();
  ZT_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) best = std::min(best, event_ms(pass));
  return best;
}

// The mean time of `pass` run back to back under the power limiter, over the burst best `burst_ms`: after
// kWarmMs of runs, at least kTimedMs (and 3 runs) timed together. An H100's power reading is a ~1 s average
// (docs/bench/2026-12-06-h100-rerun, call 11: it climbs ~115 W a 200 ms sample from idle); the step at
// 128 x 128 tokens settles at the 700 W cap at ~1770 MHz, the calibration's bursts ran at 1980 (493 W) and
// the 200 ms warm-up tried in session 19 changed nothing. So 1.5 s, more than that window.
template <typename Pass>
double sustained_factor(double burst_ms, Pass&& pass) {
  constexpr double kWarmMs = 1500, kTimedMs = 400;
  const auto warm = static_cast<int>(std::ceil(kWarmMs / burst_ms));
  const int timed = std::max(3, static_cast<int>(std::ceil(kTimedMs / burst_ms)));
  for (int r = 0; r < warm; ++r) pass();
  const double ms = event_ms([&] {
    for (int r = 0; r < timed; ++r) pass();
  });
  return std::max(1.0, ms / timed / burst_ms);
}

DeviceBuffer zeroed(size_t bytes, const char* name) {
  DeviceBuffer b = device_allocator().allocate(bytes, MemoryCategory::scratch, name);
  ZT_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, bytes, current_stream()));
  return b;
}

// n bf16 values ~ N(0, stddev^2) on the device: a GEMM's rate under the power limiter depends on its
// operands (zeros toggle no bits). A block of 2^20 host normals, repeated.
DeviceBuffer normal_bf16(int64_t n, float stddev, const char* name) {
  constexpr int64_t kBlock = int64_t{1} << 20;
  std::vector<bf16> block(static_cast<size_t>(std::min(n, kBlock)));
  std::mt19937 random(11);
  std::normal_distribution<float> normal(0.0f, stddev);
  for (bf16& v : block) v = float_to_bf16(normal(random));
  DeviceBuffer b = device_allocator().allocate(static_cast<size_t>(n) * 2, MemoryCategory::scratch, name);
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t count = std::min(kBlock, n - at);
    ZT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(b.data()) + at * 2, block.data(),
                                  static_cast<size_t>(count) * 2, cudaMemcpyHostToDevice, current_stream()));
  }
  ZT_CUDA_CHECK(cudaStreamSynchronize(current_stream()));  // the host block goes out of scope
  return b;
}

double gbps(double bytes, double ms) {
  return bytes / (ms * 1e-3) / 1e9;
}

// The layer's projections, forward + dX + dW each (kernels::linear, bf16 storage, f32 weight gradients).
double measure_gemm_tflops(int64_t h, int64_t inter, int64_t rows, int repeats) {
  const int64_t widest = std::max(h, inter);
  DeviceBuffer x = normal_bf16(rows * widest, 1.0f, "calibrate x");
  DeviceBuffer y = zeroed(static_cast<size_t>(rows * widest) * 2, "calibrate y");
  DeviceBuffer dx = zeroed(static_cast<size_t>(rows * widest) * 2, "calibrate dx");
  DeviceBuffer w = normal_bf16(h * inter, 0.02f, "calibrate w");
  DeviceBuffer dw = zeroed(static_cast<size_t>(h * inter) * 4, "calibrate dw");
  struct Projection {
    int64_t in, out;
  };
  // Q, K, V, O, the feed-forward up and down.
  const std::array<Projection, 6> layer = {{{h, h}, {h, h}, {h, h}, {h, h}, {h, inter}, {inter, h}}};
  double flops = 0;
  for (const Projection& p : layer) flops += 3.0 * 2.0 * static_cast<double>(rows * p.in * p.out);
  const double ms = best_ms(repeats, [&] {
    for (const Projection& p : layer) {
      const Tensor tx(x.data(), {rows, p.in}, DType::bf16, DeviceKind::cuda);
      const Tensor tdx(dx.data(), {rows, p.in}, DType::bf16, DeviceKind::cuda);
      const Tensor tw(w.data(), {p.out, p.in}, DType::bf16, DeviceKind::cuda);
      const Tensor tdw(dw.data(), {p.out, p.in}, DType::f32, DeviceKind::cuda);
      const Tensor ty(y.data(), {rows, p.out}, DType::bf16, DeviceKind::cuda);
      kernels::linear_forward(tx, tw, Tensor{}, ty);
      kernels::linear_backward(ty, tx, tw, tdx, tdw, Tensor{});
    }
  });
  return flops / (ms * 1e-3) / 1e12;
}

// One (layers, batch, length) point of time_encoder_layers on `params` (bf16) and `grads` (f32): forward +
// backward and forward alone, then forward + backward with gradient checkpointing (a model of its own,
// built once the first is gone: its buffers are planned for one layer's activations).
LayerTiming time_model(const DebertaConfig& config, const Arena& params, const Arena& grads, int64_t batch,
                       int64_t length) {
  Arena inputs("calibrate batch",
               ArenaLayout({{"ids", {batch, length}, DType::i64},
                            {"mask", {batch, length}, DType::i64},
                            {"labels", {batch}, DType::i64}}),
               {.kind = MemoryKind::device});
  std::vector<int64_t> ids(static_cast<size_t>(batch * length)), mask(ids.size(), 1),
      labels(static_cast<size_t>(batch));
  std::mt19937_64 random(7);
  for (int64_t& id : ids) id = static_cast<int64_t>(random() % static_cast<uint64_t>(config.vocab_size));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 2);
  copy_tensor(Tensor(ids.data(), {batch, length}, DType::i64), inputs.tensor("ids"));
  copy_tensor(Tensor(mask.data(), {batch, length}, DType::i64), inputs.tensor("mask"));
  copy_tensor(Tensor(labels.data(), {batch}, DType::i64), inputs.tensor("labels"));
  const DebertaBatch data{inputs.tensor("ids"), inputs.tensor("mask"), inputs.tensor("labels")};
  const DropoutSchedule dropout{.training = true, .seed = 1, .step = 0};
  LayerTiming t{.layers = config.num_hidden_layers, .batch = batch, .length = length};
  auto pair_pass = [&](DebertaForSequenceClassification& model) {
    return [&params, &grads, &data, &dropout, &model] {
      model.forward(params, data, dropout);
      model.backward(params, grads);
    };
  };
  double factor = 1.0;  // the sustained clock's slowdown at this point
  {
    DebertaForSequenceClassification model(config, batch, length, DeviceKind::cuda, DType::bf16);
    const auto pair = pair_pass(model);
    t.pair_ms = best_ms(3, pair);
    t.forward_ms = best_ms(3, [&] { model.forward(params, data, dropout); });
    factor = sustained_factor(t.pair_ms, pair);
    ZT_LOG(info) << "calibrating: " << config.num_hidden_layers << " layers at " << batch << " x " << length
                 << ": sustained " << factor << " x the burst's " << t.pair_ms << " ms";
  }
  DebertaConfig checkpointed = config;
  checkpointed.gradient_checkpointing = true;
  DebertaForSequenceClassification model(checkpointed, batch, length, DeviceKind::cuda, DType::bf16);
  t.checkpointed_pair_ms = best_ms(3, pair_pass(model)) * factor;
  t.pair_ms *= factor;
  t.forward_ms *= factor;
  return t;
}

struct PinnedDeleter {
  void operator()(void* p) const { cudaFreeHost(p); }
};

// The best host time of `repeats` all-reduces of `numel` f32 (a barrier before each, after one untimed) on
// rank 0 of `comms`, each rank on its own host thread, device and stream; seconds. A failing rank aborts the
// group (the others throw too) and the first error is rethrown.
double best_all_reduce_seconds(std::vector<std::unique_ptr<Communicator>>& comms, int64_t numel,
                               int repeats) {
  std::vector<double> best(comms.size(), 1e30);
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *comms[r];
      cudaStream_t stream = nullptr;
      void* data = nullptr;
      try {
        ZT_CUDA_CHECK(cudaSetDevice(comm.cuda_device()));
        ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        ZT_CUDA_CHECK(cudaMalloc(&data, static_cast<size_t>(numel) * 4));
        ZT_CUDA_CHECK(cudaMemsetAsync(data, 0, static_cast<size_t>(numel) * 4, stream));
        const Tensor buffer(data, {numel}, DType::f32, DeviceKind::cuda);
        comm.all_reduce_sum(buffer, stream);
        for (int i = 0; i < repeats; ++i) {
          comm.barrier(stream);
          const auto start = std::chrono::steady_clock::now();
          comm.all_reduce_sum(buffer, stream);
          ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
          best[r] = std::min(best[r],
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        comm.barrier(stream);
      } catch (...) {
        errors[r] = std::current_exception();
        comm.abort("the collective calibration failed on this rank");
      }
      if (stream != nullptr) (void)cudaStreamSynchronize(stream);
      if (data != nullptr) (void)cudaFree(data);
      if (stream != nullptr) (void)cudaStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return best.front();
}

}  // namespace

std::vector<LayerTiming> time_encoder_layers(const DebertaConfig& model,
                                             std::span<const LayerTimingPoint> points) {
  ZT_CHECK(cuda_available(), "timing the encoder layers needs a GPU: ", describe_devices());
  ZT_CHECK(!points.empty(), "time_encoder_layers: no points");
  std::vector<LayerTiming> timings;
  for (const int64_t layers : layer_timing_depths()) {
    // The run's layer dims; a small vocabulary (the word embeddings' gradient is not the encoder's cost).
    DebertaConfig config = model;
    config.num_hidden_layers = layers;
    config.vocab_size = 1024;
    const ParameterTable table(config);
    Arena params("calibrate params", table.layout(DType::bf16), {.kind = MemoryKind::device});
    Arena grads("calibrate grads", table.layout(DType::f32), {.kind = MemoryKind::device, .zero_fill = true});
    {
      // The from-scratch init (N(0, 0.02^2) weights, LayerNorm 1 / 0), not a constant: a GEMM's power draw
      // follows its operands' bit toggling, and the power limiter's clock is what the sustained timing
      // measures. With every weight 0.02 the 4-layer points drew ~540-590 W at 1980 MHz on an H100 (session
      // 21) while a 24-layer step at 16k tokens of random-init weights holds the 700 W cap at ~1786 MHz.
      Arena host("calibrate init", table.layout(DType::f32), {.kind = MemoryKind::host});
      init_parameters(config, table, host, /*seed=*/7);
      Arena staged("calibrate init f32", table.layout(DType::f32), {.kind = MemoryKind::device});
      copy_tensor(host.flat(DType::f32), staged.flat(DType::f32));
      kernels::copy(staged.flat(DType::f32), params.flat(DType::bf16));
    }
    for (const LayerTimingPoint& p : points)
      timings.push_back(time_model(config, params, grads, p.batch, p.length));
  }
  ZT_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
  return timings;
}

GpuFigures measure_gpu_figures(int64_t hidden, int64_t intermediate, int64_t tokens, int repeats) {
  ZT_CHECK(cuda_available(), "the GPU figures need a GPU: ", describe_devices());
  ZT_CHECK(hidden > 0 && intermediate > 0 && tokens > 0 && repeats > 0,
           "measure_gpu_figures: sizes and repeats must be positive");
  GpuFigures g;
  g.device = describe_devices();
  cudaStream_t stream = current_stream();
  g.gemm_tflops = measure_gemm_tflops(hidden, intermediate, tokens, repeats);

  {  // HBM: a device-to-device copy reads and writes every byte.
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer a = zeroed(bytes, "calibrate copy source");
    DeviceBuffer b = zeroed(bytes, "calibrate copy target");
    const double ms = best_ms(repeats, [&] {
      ZT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDefault, stream));
    });
    g.hbm_gbps = gbps(2.0 * static_cast<double>(bytes), ms);
  }

  {  // PCIe, pinned and pageable, each way.
    const size_t bytes = size_t{256} << 20;
    DeviceBuffer device = zeroed(bytes, "calibrate pcie");
    void* raw = nullptr;
    ZT_CUDA_CHECK(cudaMallocHost(&raw, bytes));
    const std::unique_ptr<void, PinnedDeleter> pinned(raw);
    std::vector<char> pageable(bytes, 1);
    auto copy = [&](void* to, const void* from) {
      return best_ms(repeats,
                     [&] { ZT_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, stream)); });
    };
    const double b = static_cast<double>(bytes);
    g.h2d_pinned_gbps = gbps(b, copy(device.data(), pinned.get()));
    g.d2h_pinned_gbps = gbps(b, copy(pinned.get(), device.data()));
    g.h2d_pageable_gbps = gbps(b, copy(device.data(), pageable.data()));
    g.d2h_pageable_gbps = gbps(b, copy(pageable.data(), device.data()));
  }

  {  // The fused GPU AdamW with the bf16 copy, as the resident update runs it.
    const int64_t n = int64_t{64} << 20;
    const size_t f32_bytes = static_cast<size_t>(n) * 4;
    DeviceBuffer p = zeroed(f32_bytes, "calibrate params"), gr = zeroed(f32_bytes, "calibrate grads");
    DeviceBuffer m = zeroed(f32_bytes, "calibrate m"), v = zeroed(f32_bytes, "calibrate v");
    DeviceBuffer p16 = zeroed(static_cast<size_t>(n) * 2, "calibrate params16");
    auto flat = [n](const DeviceBuffer& b, DType t) { return Tensor(b.data(), {n}, t, DeviceKind::cuda); };
    const optim::AdamWStepScalars s = optim::adamw_step_scalars(optim::AdamWHyper{.lr = 1e-5}, 1e-5, 1);
    const optim::TensorRange all{.offset = 0, .numel = n, .weight_decay = true};
    const double ms = best_ms(repeats, [&] {
      optim::gpu::adamw_update(s, flat(p, DType::f32), flat(gr, DType::f32), flat(m, DType::f32),
                               flat(v, DType::f32), {&all, 1}, flat(p16, DType::bf16), stream);
    });
    g.gpu_adamw_gparams = static_cast<double>(n) / (ms * 1e-3) / 1e9;
  }
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return g;
}

CollectiveFigures measure_collective_figures(int64_t bytes, int repeats) {
  ZT_CHECK(cuda_available(), "the collectives' figures need a GPU: ", describe_devices());
  ZT_CHECK(bytes >= 1024 && repeats > 0, "measure_collective_figures: bytes and repeats must be positive");
  const int64_t numel = bytes / 4;
  const double b = static_cast<double>(numel) * 4;
  CollectiveFigures c;
  int current = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&current));
  {  // Two in-process ranks on this GPU: W (W + 3) bytes of memory traffic (see the cost model).
    constexpr int kRanks = 2;
    auto comms = make_in_process_device_group(kRanks, current);
    const double seconds = best_all_reduce_seconds(comms, numel, repeats);
    c.device_group_gbps = kRanks * (kRanks + 3) * b / seconds / 1e9;
  }
  const int gpus = cuda_device_count();
#ifdef ZT_WITH_NCCL
  if (gpus >= 2) {
    std::vector<int> devices(static_cast<size_t>(gpus));
    for (int d = 0; d < gpus; ++d) devices[static_cast<size_t>(d)] = d;
    auto comms = make_nccl_group(devices);
    const double seconds = best_all_reduce_seconds(comms, numel, repeats);
    c.nccl_gpus = gpus;
    c.nccl_bus_gbps = b * 2 * (gpus - 1) / gpus / seconds / 1e9;
  } else {
    c.nccl_note = str(gpus, " GPU visible: NCCL's rate needs 2 or more");
  }
#else
  c.nccl_note = str("a build without NCCL (", gpus, " GPUs visible)");
#endif
  ZT_CUDA_CHECK(cudaSetDevice(current));
  return c;
}

}  // namespace zt::plan
