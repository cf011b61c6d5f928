// bench_cpu_adam: the CPU AdamW (optim/adamw.h: SIMD body, persistent pinned thread pool) on one flat fp32
// shard, against the host's memory bandwidth measured in the same run, as JSON on stdout.
//
//   bench_cpu_adam                              # 887M parameters (DeBERTa-v2-xlarge), all cores, bf16 copy
//   bench_cpu_adam --params 100M --threads 8 --copy none --isa avx2 --reps 10
//
// In order:
//   1. Validation: the chosen body against the scalar reference on 100003 elements (a ragged tail), bit
//      for bit, params, m, v and the 16-bit copy. A mismatch exits 1 before anything is timed.
//   2. First touch of every buffer by the pool's threads (pages land on the node of the core that uses them).
//   3. Bandwidth, with the same threads and blocks: STREAM triad a = b + s c (2 reads, 1 write: 12 B per
//      element) and an Adam-like loop reading three arrays and writing two (20 B per element), over
//      --params elements each; median of --reps.
//   4. AdamW steps over --params elements (one range, weight decay on), the --copy 16-bit output written in
//      the same pass; median of --reps after one warm-up. Traffic: read p, g, m, v and write p, m, v = 28 B
//      per parameter, + 2 with a 16-bit copy. The fraction compares that traffic's GB/s with the Adam-like
//      loop's (the reachable bandwidth for this access pattern).
//
// Exit status: 0 ok; 1 validation failed; 2 bad flags.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "runtime/check.h"
#include "runtime/flag_table.h"
#include "runtime/parallel_blocks.h"
#include "runtime/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int64_t params = 887'000'000;
  int threads = 0;  // 0: all hardware threads
  int reps = 5;
  std::string copy = "bf16";  // none | bf16 | f16
  std::string isa = "auto";   // auto | scalar | avx2 | avx512
};

int64_t parse_count(std::string_view flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = used == 0 ? "?" : text.substr(used);
  const double scale = unit.empty() ? 1 : unit == "K" ? 1e3 : unit == "M" ? 1e6 : unit == "G" ? 1e9 : -1;
  ZT_CHECK(scale > 0 && v > 0, "--", flag, ": expected a count such as 887M, got '", text, "'");
  return static_cast<int64_t>(v * scale);
}

using V = const std::string&;
using F = std::string_view;

const auto kFlags = std::to_array<zt::Flag<Flags>>({
    {"params", "COUNT", "parameters of the shard (K, M, G suffixes)",
     [](Flags& f, F n, V v) { f.params = parse_count(n, v); },
     [](const Flags& f) { return std::to_string(f.params); }},
    {"threads", "N", "threads of the pool; 0 = all hardware threads",
     [](Flags& f, F n, V v) { f.threads = static_cast<int>(zt::parse_integer_flag(n, v, 0, 1 << 16)); },
     [](const Flags& f) { return std::to_string(f.threads); }},
    {"reps", "N", "timed repetitions (the median is reported)",
     [](Flags& f, F n, V v) { f.reps = static_cast<int>(zt::parse_integer_flag(n, v, 1, 1 << 20)); },
     [](const Flags& f) { return std::to_string(f.reps); }},
    {"copy", "none|bf16|f16", "16-bit parameter copy written in the same pass",
     [](Flags& f, F n, V v) {
       f.copy = zt::parse_choice_flag(n, v, {"none", "bf16", "f16"});
     },
     [](const Flags& f) { return f.copy; }},
    {"isa", "auto|scalar|avx2|avx512", "the SIMD body to run",
     [](Flags& f, F n, V v) {
       f.isa = zt::parse_choice_flag(n, v, {"auto", "scalar", "avx2", "avx512"});
     },
     [](const Flags& f) { return f.isa; }},
});

zt::optim::CpuIsa isa_of(const std::string& name) {
  if (name == "scalar") return zt::optim::CpuIsa::scalar;
  if (name == "avx2") return zt::optim::CpuIsa::avx2;
  if (name == "avx512") return zt::optim::CpuIsa::avx512;
  return zt::optim::best_cpu_isa();
}

// Uninitialized storage: the first touch happens on the pool's threads.
template <typename T>
std::unique_ptr<T[]> raw_array(int64_t n) {
  return std::unique_ptr<T[]>(new T[static_cast<size_t>(n)]);
}

constexpr int64_t kBandwidthBlock = int64_t{1} << 20;

template <typename Body>
void parallel_elements(int64_t n, int threads, const Body& body) {
  const int64_t blocks = (n + kBandwidthBlock - 1) / kBandwidthBlock;
  zt::detail::run_blocks_in_parallel(blocks, threads, [&](int64_t b) {
    const int64_t begin = b * kBandwidthBlock;
    body(begin, std::min(n, begin + kBandwidthBlock));
  });
}

template <typename Fn>
double median_seconds(int reps, const Fn& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

zt::optim::Params16Out copy_out(const std::string& kind, zt::bf16* b, zt::f16* h, int64_t n) {
  if (kind == "bf16") return std::span<zt::bf16>(b, static_cast<size_t>(n));
  if (kind == "f16") return std::span<zt::f16>(h, static_cast<size_t>(n));
  return {};
}

// The chosen body against the scalar one on a ragged length, bit for bit.
bool validate(zt::optim::CpuIsa isa, const std::string& copy) {
  const int64_t n = 100003;
  std::vector<float> p(n), g(n), m(n, 0.0f), v(n, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = 0.01f * static_cast<float>((i * 7919) % 2003 - 1001);
    g[i] = 0.001f * static_cast<float>((i * 104729) % 4001 - 2000);
  }
  std::vector<float> p2 = p, g2 = g, m2 = m, v2 = v;
  std::vector<zt::bf16> b1(n), b2(n);
  std::vector<zt::f16> h1(n), h2(n);
  zt::optim::AdamW ref({}, 1), fast({}, 0);
  ref.set_isa(zt::optim::CpuIsa::scalar);
  fast.set_isa(isa);
  const std::vector<zt::optim::TensorRange> ranges = {{0, n / 2, false}, {n / 2, n - n / 2, true}};
  for (int s = 0; s < 2; ++s) {
    ref.step({p, g, m, v}, ranges, 1e-3, copy_out(copy, b1.data(), h1.data(), n), 0.5f);
    fast.step({p2, g2, m2, v2}, ranges, 1e-3, copy_out(copy, b2.data(), h2.data(), n), 0.5f);
  }
  return std::memcmp(p.data(), p2.data(), n * 4) == 0 && std::memcmp(m.data(), m2.data(), n * 4) == 0 &&
         std::memcmp(v.data(), v2.data(), n * 4) == 0 && std::memcmp(b1.data(), b2.data(), n * 2) == 0 &&
         std::memcmp(h1.data(), h2.data(), n * 2) == 0;
}

int run(const Flags& f) {
  const zt::optim::CpuIsa isa = isa_of(f.isa);
  ZT_CHECK(zt::optim::cpu_supports(isa), "this CPU cannot run the ", zt::optim::cpu_isa_name(isa), " body");
  if (!validate(isa, f.copy)) {
    std::fprintf(stderr, "bench_cpu_adam: the %s body differs from the scalar reference\n",
                 std::string(zt::optim::cpu_isa_name(isa)).c_str());
    return 1;
  }
  const int64_t n = f.params;
  const int threads = zt::detail::resolve_thread_count(f.threads);
  std::fprintf(stderr, "bench_cpu_adam: %lld parameters, %d threads (%d pool workers, %d pinned), %s body\n",
               static_cast<long long>(n), threads, zt::ThreadPool::global().workers(),
               zt::ThreadPool::global().pinned_workers(), std::string(zt::optim::cpu_isa_name(isa)).c_str());
  auto p = raw_array<float>(n), g = raw_array<float>(n), m = raw_array<float>(n), v = raw_array<float>(n);
  auto out_b = raw_array<zt::bf16>(f.copy == "bf16" ? n : 1);
  auto out_h = raw_array<zt::f16>(f.copy == "f16" ? n : 1);
  auto init = [&] {
    parallel_elements(n, threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        p[i] = 0.01f * static_cast<float>(i % 1000 - 500);
        g[i] = 0.001f * static_cast<float>(i % 777 - 388);
        m[i] = 0.0f;
        v[i] = 0.0f;
      }
      if (f.copy == "bf16") std::memset(static_cast<void*>(out_b.get() + b), 0, (e - b) * 2);
      if (f.copy == "f16") std::memset(static_cast<void*>(out_h.get() + b), 0, (e - b) * 2);
    });
  };
  init();

  // Bandwidth: triad (12 B/element) and an Adam-like 3-read / 2-write loop (20 B/element).
  float* a = p.get();
  float* bb = g.get();
  float* c = m.get();
  const float s = 1.0001f;
  const double triad = median_seconds(f.reps, [&] {
    parallel_elements(n, threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) a[i] = bb[i] + s * c[i];
    });
  });
  const double adam_like = median_seconds(f.reps, [&] {
    parallel_elements(n, threads, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float x = a[i], y = bb[i], z = c[i];
        a[i] = x + s * y;
        c[i] = z * s + y;
      }
    });
  });
  init();

  zt::optim::AdamW adamw({}, threads);
  adamw.set_isa(isa);
  const std::vector<zt::optim::TensorRange> ranges = {{0, n, true}};
  const zt::optim::AdamWBuffers buffers{{p.get(), static_cast<size_t>(n)},
                                        {g.get(), static_cast<size_t>(n)},
                                        {m.get(), static_cast<size_t>(n)},
                                        {v.get(), static_cast<size_t>(n)}};
  const zt::optim::Params16Out out = copy_out(f.copy, out_b.get(), out_h.get(), n);
  adamw.step(buffers, ranges, 1e-3, out);  // warm-up
  const double step = median_seconds(f.reps, [&] { adamw.step(buffers, ranges, 1e-3, out); });

  const double bytes_per_param = f.copy == "none" ? 28 : 30;
  const double triad_gbs = 12.0 * static_cast<double>(n) / triad / 1e9;
  const double adam_like_gbs = 20.0 * static_cast<double>(n) / adam_like / 1e9;
  const double adamw_gbs = bytes_per_param * static_cast<double>(n) / step / 1e9;
  std::printf(
      "{\"params\": %lld, \"threads\": %d, \"pool_workers_pinned\": %d, \"isa\": \"%s\", \"copy\": \"%s\", "
      "\"reps\": %d,\n \"adamw_seconds_median\": %.6f, \"adamw_params_per_s\": %.4e, "
      "\"adamw_bytes_per_param\": %.0f, \"adamw_gb_per_s\": %.2f,\n \"triad_gb_per_s\": %.2f, "
      "\"adam_like_3r2w_gb_per_s\": %.2f, \"adamw_fraction_of_adam_like_bandwidth\": %.3f}\n",
      static_cast<long long>(n), threads, zt::ThreadPool::global().pinned_workers(),
      std::string(zt::optim::cpu_isa_name(isa)).c_str(), f.copy.c_str(), f.reps, step,
      static_cast<double>(n) / step, bytes_per_param, adamw_gbs, triad_gbs, adam_like_gbs,
      adamw_gbs / adam_like_gbs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Flags flags;
    const zt::ParsedFlags parsed =
        zt::parse_flags<Flags>(kFlags, std::vector<std::string>(argv + 1, argv + argc), flags);
    if (parsed.help) {
      std::fputs(zt::flags_help<Flags>(kFlags, Flags{}, "usage: bench_cpu_adam [--flag value] ...\n").c_str(),
                 stdout);
      return 0;
    }
    return run(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_adam: %s\n", e.what());
    return 2;
  }
}
