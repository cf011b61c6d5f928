// zt_bench's timing and results: the L2-flushing event timer, a kernel's row of the table, the roofline
// from the two ceilings measured in the same run (an HBM copy and a bf16 GEMM), and the table and JSON.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tools/zt_bench/cuda/bench_env.h"
#include "tools/zt_bench/cuda/kernel_setups.h"

namespace zt_bench {

class Timer {
 public:
  explicit Timer(int reps);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // {median, min} in microseconds. Every repetition is queued before any event is read, so the host runs
  // ahead and the events measure the device's time for the call, not the host's launch latency.
  std::pair<double, double> time(const std::function<void()>& call);

  size_t l2_bytes = 0, flush_bytes = 0;

 private:
  void* flush_ = nullptr;
  std::vector<cudaEvent_t> start_, stop_;
};

struct Result {
  Result(std::string name_, std::string dtype_, std::string status_ = "ok")
      : name(std::move(name_)), dtype(std::move(dtype_)), status(std::move(status_)) {}
  std::string name, dtype, status;  // status: ok, ceiling, FAIL, ERROR
  std::string shape = "-", detail;  // detail: the failed outputs or the error
  double rel_err = 0, median_us = 0, min_us = 0, bytes = 0, flops = 0;
  bool timed() const { return status == "ok" || status == "ceiling"; }
  double gbps() const { return bytes / (median_us * 1e3); }    // bytes / (us * 1e-6) / 1e9
  double tflops() const { return flops / (median_us * 1e6); }  // flops / (us * 1e-6) / 1e12
};

// The roofline of a call: it cannot beat max(bytes / HBM, flops / GEMM) (in us below); the larger term is
// its bound, and the fraction is that time over the measured median.
struct Ceilings {
  double hbm_gbps = 0, gemm_tflops = 0;
  double hbm_us(const Result& r) const { return r.bytes / (hbm_gbps * 1e3); }
  double gemm_us(const Result& r) const { return r.flops / (gemm_tflops * 1e6); }
  bool gemm_bound(const Result& r) const { return gemm_us(r) > hbm_us(r); }
  double fraction(const Result& r) const { return std::max(hbm_us(r), gemm_us(r)) / r.median_us; }
};

// Sets up `setup_fn` at full size and times it into r.
void time_kernel(Timer& timer, Setup (*setup_fn)(Env&, const Dims&), const Dims& dims, Result& r);

// HBM: 2 GiB copied device to device, bytes = 2 * 2 GiB (each byte read and written).
Setup hbm_copy(Env& e, const Dims&);

// C = A B^T, bf16 in and out, f32 compute, m = n = k = 8192 (linear_forward's operand layout);
// flops = 2 m n k.
Setup gemm_bf16(Env& e, const Dims&);

void print_table(const std::vector<Result>& rows, const Ceilings& ceilings);
void write_json(const std::string& path, const std::vector<Result>& rows, const Ceilings& ceilings,
                const Timer& timer, int reps);

}  // namespace zt_bench
