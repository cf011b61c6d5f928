#include "tools/zt_bench/cuda/timing.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <tuple>

#include <nlohmann/json.hpp>

#include "kernels/cuda/gemm.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"

namespace zt_bench {

namespace kernels = zt::kernels;

Timer::Timer(int reps) : start_(static_cast<size_t>(reps)), stop_(static_cast<size_t>(reps)) {
  int l2 = 0;
  ZT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  l2_bytes = static_cast<size_t>(l2);
  flush_bytes = std::max<size_t>(size_t{256} << 20, 4 * l2_bytes);
  ZT_CUDA_CHECK(cudaMalloc(&flush_, flush_bytes));
  for (size_t r = 0; r < start_.size(); ++r) {
    ZT_CUDA_CHECK(cudaEventCreate(&start_[r]));
    ZT_CUDA_CHECK(cudaEventCreate(&stop_[r]));
  }
}

Timer::~Timer() {
  for (size_t r = 0; r < start_.size(); ++r) cudaEventDestroy(start_[r]), cudaEventDestroy(stop_[r]);
  cudaFree(flush_);
}

std::pair<double, double> Timer::time(const std::function<void()>& call) {
  for (int i = 0; i < kWarmup; ++i) call();
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  for (size_t r = 0; r < start_.size(); ++r) {
    ZT_CUDA_CHECK(cudaMemsetAsync(flush_, static_cast<int>(r & 0xff), flush_bytes, kStream));
    ZT_CUDA_CHECK(cudaEventRecord(start_[r], kStream));
    call();
    ZT_CUDA_CHECK(cudaEventRecord(stop_[r], kStream));
  }
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> us(start_.size());
  for (size_t r = 0; r < us.size(); ++r) {
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_[r], stop_[r]));
    us[r] = 1000.0 * ms;
  }
  std::sort(us.begin(), us.end());
  const size_t half = us.size() / 2;
  return {us.size() % 2 ? us[half] : 0.5 * (us[half - 1] + us[half]), us.front()};
}

void time_kernel(Timer& timer, Setup (*setup_fn)(Env&, const Dims&), const Dims& dims, Result& r) {
  TimingEnv env;
  const Setup setup = setup_fn(env, dims);
  if (setup.before) setup.before(env.gpu(), true);
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  std::tie(r.median_us, r.min_us) = timer.time([&] { setup.run(env.gpu(), true); });
  r.shape = setup.shape, r.bytes = setup.bytes, r.flops = setup.flops;
}

Setup hbm_copy(Env& e, const Dims&) {
  const int src = e.in(bf16, {int64_t{1} << 30}), dst = e.out("dst", bf16, {int64_t{1} << 30});
  return Setup("2 GiB D2D", 4.0 * (int64_t{1} << 30), 0, [=](const Args& t, bool) {
    ZT_CUDA_CHECK(
        cudaMemcpyAsync(t[dst].data(), t[src].data(), t[src].nbytes(), cudaMemcpyDeviceToDevice, kStream));
  });
}

Setup gemm_bf16(Env& e, const Dims&) {
  constexpr int64_t n = 8192;
  const int a = e.in(bf16, {n, n}), b = e.in(bf16, {n, n}), c = e.out("c", bf16, {n, n});
  return Setup("8192x8192x8192", 0, 2.0 * n * n * n, [=](const Args& t, bool) {
    kernels::GemmProblem p;
    p.m = p.n = p.k = n;
    p.input_dtype = p.c.dtype = bf16;
    p.a.data = t[a].data(), p.b.data = t[b].data(), p.c.data = t[c].data();
    p.a.ld = p.b.ld = p.c.ld = n;
    p.transpose_b = true;
    kernels::gemm(p, kStream);
  });
}

void print_table(const std::vector<Result>& rows, const Ceilings& ceilings) {
  size_t name_w = 6, shape_w = 5, dtype_w = 5;
  for (const Result& r : rows) {
    name_w = std::max(name_w, r.name.size()), shape_w = std::max(shape_w, r.shape.size());
    dtype_w = std::max(dtype_w, r.dtype.size());
  }
  const int nw = static_cast<int>(name_w), sw = static_cast<int>(shape_w), dw = static_cast<int>(dtype_w);
  std::printf("\n%-*s  %-*s  %-*s  %8s  %10s  %10s  %8s  %8s  %s\n", nw, "kernel", sw, "shape", dw, "dtype",
              "check", "median us", "min us", "GB/s", "TFLOP/s", "roofline");
  for (const Result& r : rows) {
    const std::string check = r.status == "ok"        ? str(std::scientific, std::setprecision(1), r.rel_err)
                              : r.status == "ceiling" ? std::string("-")
                                                      : r.status;
    std::printf("%-*s  %-*s  %-*s  %8s", nw, r.name.c_str(), sw, r.shape.c_str(), dw, r.dtype.c_str(),
                check.c_str());
    if (!r.timed()) {
      std::printf("  %10s  %10s  %8s  %8s  %s\n", "-", "-", "-", "-", "-");
      continue;
    }
    const std::string gbps = r.bytes > 0 ? str(std::fixed, std::setprecision(1), r.gbps()) : "-";
    const std::string tflops = r.flops > 0 ? str(std::fixed, std::setprecision(1), r.tflops()) : "-";
    std::printf("  %10.1f  %10.1f  %8s  %8s  %5.1f%% %s\n", r.median_us, r.min_us, gbps.c_str(),
                tflops.c_str(), 100.0 * ceilings.fraction(r), ceilings.gemm_bound(r) ? "GEMM" : "HBM");
  }
  for (const Result& r : rows) {
    if (!r.timed()) std::printf("%s %s: %s\n", r.status.c_str(), r.name.c_str(), r.detail.c_str());
  }
}

void write_json(const std::string& path, const std::vector<Result>& rows, const Ceilings& ceilings,
                const Timer& timer, int reps) {
  nlohmann::json results = nlohmann::json::array();
  for (const Result& r : rows) {
    nlohmann::json j = {{"name", r.name}, {"shape", r.shape}, {"dtype", r.dtype}, {"status", r.status}};
    if (!r.detail.empty()) j["detail"] = r.detail;
    if (r.status == "ok") j["rel_err"] = r.rel_err;
    if (r.timed()) {
      j.update({{"median_us", r.median_us},
                {"min_us", r.min_us},
                {"bytes", r.bytes},
                {"flops", r.flops},
                {"GBps", r.gbps()},
                {"TFLOPs", r.tflops()},
                {"bound", ceilings.gemm_bound(r) ? "gemm" : "hbm"},
                {"roofline_fraction", ceilings.fraction(r)}});
    }
    results.push_back(std::move(j));
  }
  const nlohmann::json doc = {
      {"device", zt::describe_devices()},
      {"l2_bytes", timer.l2_bytes},
      {"flush_bytes", timer.flush_bytes},
      {"warmup", kWarmup},
      {"reps", reps},
      {"ceilings", {{"hbm_GBps", ceilings.hbm_gbps}, {"gemm_bf16_TFLOPs", ceilings.gemm_tflops}}},
      {"results", std::move(results)}};
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  ZT_CHECK(out.good(), "zt_bench: cannot write --json ", path);
}

}  // namespace zt_bench
