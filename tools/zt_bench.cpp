// zt_bench: kernel microbenchmarks at the DeBERTa-v2-xlarge training shapes. Every kernel is first checked
// against its CPU reference, then timed with the L2 flushed, against ceilings measured in the same run.
//
//   zt_bench                                  # every kernel, 20 timed calls each
//   zt_bench --only attention                 # kernels whose name contains "attention"
//   zt_bench --reps 50 --json out/bench.json  # also write every result as JSON
//   zt_bench --help
//
// In order:
//   1. Ceilings. HBM: a 2 GiB device-to-device cudaMemcpyAsync, counting bytes read + written. Tensor cores:
//      an 8192^3 bf16 GEMM through zt::kernels::gemm (what linear, conv1d and attention call), 2 m n k
//      flops. Both on random data: tensor-core power, hence clocks, depends on the bits.
//   2. Validation on a small awkward shape (B 3, L 19, D 48, 3 heads, I 56, vocab 97, the small CPU model's
//      parameter arena): the entry point on GPU tensors against the same entry point on f32 CPU tensors
//      holding the same storage-rounded values. Per output, ||gpu - cpu|| / ||cpu|| <= 1e-2 where the kernel
//      stores or the output is 16-bit, else 1e-5: a bf16 kernel rounds intermediates to bf16, so even its
//      f32 outputs (dW) carry bf16 accuracy only. Outputs start as NaN on the GPU, so a skipped element
//      fails. Feature widths are multiples of 8, so 16-bit rows stay 16-byte aligned and the vectorized and
//      cuBLASLt paths checked are the paths timed. A kernel that fails is reported FAIL and not timed.
//   3. Timing at B 40, L 128 (or --batch, --seq; hidden 1536, 24 heads, intermediate 6144, vocab 128100,
//   relative table
//      2 x 256 rows, conv k 3, the xlarge parameter arena): 3 warm-up calls, then --reps calls, each after
//      a memset of max(256 MiB, 4 x L2) so no input is still cached, timed by CUDA events around the call
//      alone on the legacy default stream (the entry points' current stream here). Host work inside a call
//      that stalls the stream (a synchronous upload) is counted: a training step pays it too. Median and min
//      reported.
//   4. A table on stdout: GB/s from the minimal traffic (each input read once, each output written once,
//      accumulated outputs read and written; the formula is at each kernel), TFLOP/s where the kernel runs
//      GEMMs (linear, conv1d, attention), and the fraction of the roofline: a call cannot beat
//      max(bytes / HBM GB/s, flops / GEMM TFLOP/s), the larger term names the bound, and the fraction is
//      that time over the median. Progress and failures go to stderr.
//
// Exit status: 0 every kernel passed; 1 a kernel failed validation or threw; 2 bad flags, no GPU, or a
// build without CUDA (ZT_WITH_CUDA off).
#include <array>
#include <charconv>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/flag_table.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <string_view>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#include "tools/zt_bench/cuda/bench_env.h"
#include "tools/zt_bench/cuda/kernel_setups.h"
#include "tools/zt_bench/cuda/timing.h"
#endif

namespace {

constexpr const char* kUsage =
    "usage: zt_bench [--flag value] ...\n"
    "  Kernel microbenchmarks at the DeBERTa-v2-xlarge training shapes (B 40, L 128): each kernel is\n"
    "  validated against its CPU reference, then timed with the L2 flushed; reports GB/s or TFLOP/s and\n"
    "  the fraction of the HBM copy bandwidth / bf16 GEMM throughput measured in the same run.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  bool help = false;
  std::string only;  // empty: every kernel
  int reps = 20;
  int64_t batch = 40, seq = 128;  // the timed (xlarge) shape
  std::string json_path;          // empty: no JSON
};

using V = const std::string&;
using F = std::string_view;

const auto kFlags = std::to_array<zt::Flag<Options>>({
    {"only", "SUBSTRING", "run only kernels whose name contains SUBSTRING (the ceilings always run)",
     [](Options& o, F, V v) { o.only = v; }, [](const Options& o) { return o.only; }},
    {"reps", "N", "timed calls per kernel",
     [](Options& o, F f, V v) { o.reps = static_cast<int>(zt::parse_integer_flag(f, v, 1, 1 << 20)); },
     [](const Options& o) { return std::to_string(o.reps); }},
    {"batch", "B", "the timed shape's batch",
     [](Options& o, F f, V v) { o.batch = zt::parse_integer_flag(f, v, 1, 1 << 20); },
     [](const Options& o) { return std::to_string(o.batch); }},
    // Past 1024 only the flash attention runs (the stored attention's scores stop there).
    {"seq", "L", "the timed shape's sequence length (at most 16384; past 1024 with --only flash)",
     [](Options& o, F f, V v) { o.seq = zt::parse_integer_flag(f, v, 1, 16384); },
     [](const Options& o) { return std::to_string(o.seq); }},
    {"json", "PATH", "also write every result as JSON to PATH", [](Options& o, F, V v) { o.json_path = v; },
     [](const Options& o) { return o.json_path; }},
});

// Bad flags are a UsageError (exit 2).
Options parse_options(int argc, char** argv) {
  Options options;
  try {
    options.help =
        zt::parse_flags<Options>(kFlags, std::vector<std::string>(argv + 1, argv + argc), options).help;
  } catch (const zt::Error& e) {
    throw UsageError(e.message());
  }
  return options;
}

#ifdef ZT_WITH_CUDA

using namespace zt_bench;  // the kernels, their tensors and the timer: tools/zt_bench/cuda/

int run_benchmarks(const Options& options) {
  std::vector<const Kernel*> selected;
  for (const Kernel& k : kernel_table()) {
    if (std::string_view(k.name).find(options.only) != std::string_view::npos) selected.push_back(&k);
  }
  if (selected.empty()) throw UsageError(str("--only '", options.only, "' matches no kernel"));
  ZT_CUDA_CHECK(cudaSetDevice(0));
  Timer timer(options.reps);
  std::fprintf(stderr, "zt_bench: %s, L2 %.0f MiB; flush %.0f MiB; %d warm-up + %d timed calls per kernel\n",
               zt::describe_devices().c_str(), timer.l2_bytes / 1048576.0, timer.flush_bytes / 1048576.0,
               kWarmup, options.reps);
  const Dims xlarge = xlarge_dims(options.batch, options.seq), small = validation_dims();
  std::vector<Result> rows = {Result("ceiling: hbm_copy", "-", "ceiling"),
                              Result("ceiling: gemm_bf16", "bf16", "ceiling")};
  time_kernel(timer, hbm_copy, xlarge, rows[0]);
  time_kernel(timer, gemm_bf16, xlarge, rows[1]);
  zt::device_allocator().empty_cache();
  const Ceilings ceilings{rows[0].gbps(), rows[1].tflops()};
  std::fprintf(stderr, "ceilings: HBM copy %.0f GB/s, bf16 GEMM %.1f TFLOP/s\n", ceilings.hbm_gbps,
               ceilings.gemm_tflops);
  bool failed = false;
  for (size_t i = 0; i < selected.size(); ++i) {
    const Kernel& k = *selected[i];
    Result r(k.name, k.dtype);
    try {
      ValidationEnv check(k.storage);
      check.validate(k.setup(check, small));
      r.rel_err = check.worst();
      if (!check.failures().empty()) r.status = "FAIL", r.detail = check.failures();
      if (r.status == "ok") time_kernel(timer, k.setup, xlarge, r);
    } catch (const std::exception& e) {
      r.status = "ERROR", r.detail = e.what();
    }
    // The environments released their buffers above; nothing queued may still use them.
    (void)cudaDeviceSynchronize();
    zt::device_allocator().empty_cache();
    failed = failed || !r.timed();
    std::fprintf(stderr, "[%2zu/%zu] %-24s %s", i + 1, selected.size(), k.name, r.status.c_str());
    if (r.timed()) std::fprintf(stderr, " (rel err %.1e), median %.1f us", r.rel_err, r.median_us);
    std::fprintf(stderr, "%s%s\n", r.detail.empty() ? "" : ": ", r.detail.c_str());
    rows.push_back(std::move(r));
  }
  print_table(rows, ceilings);
  if (!options.json_path.empty()) write_json(options.json_path, rows, ceilings, timer, options.reps);
  return failed ? 1 : 0;
}

#endif  // ZT_WITH_CUDA

int run(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  if (options.help) {
    std::fputs(zt::flags_help<Options>(kFlags, Options{}, kUsage).c_str(), stdout);
    return 0;
  }
#ifdef ZT_WITH_CUDA
  if (zt::cuda_device_count() == 0) {
    std::fputs("zt_bench: error: no CUDA GPU found (no device or no driver); the benchmarks need one\n",
               stderr);
    return 2;
  }
  return run_benchmarks(options);
#else
  std::fputs(
      "zt_bench: error: built without CUDA (ZT_WITH_CUDA off); the benchmarks need a CUDA build and a GPU\n",
      stderr);
  return 2;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "zt_bench: error: %s\n", zt::error_text(e).c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zt_bench: error: %s\n", zt::error_text(e).c_str());
    return 1;
  }
}
