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
#include <charconv>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "runtime/device.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iomanip>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/arg_checks.h"
#include "kernels/conv1d.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/disentangled_attention.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "kernels/relative_position.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#include "optim/grad_clip.h"
#include "runtime/arena.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"
#endif

namespace {

constexpr const char* kUsage =
    "usage: zt_bench [--only SUBSTRING] [--reps N] [--batch B] [--seq L] [--json PATH] [--help]\n"
    "  Kernel microbenchmarks at the DeBERTa-v2-xlarge training shapes (B 40, L 128): each kernel is\n"
    "  validated against its CPU reference, then timed with the L2 flushed; reports GB/s or TFLOP/s and\n"
    "  the fraction of the HBM copy bandwidth / bf16 GEMM throughput measured in the same run.\n"
    "  --only SUBSTRING  run only kernels whose name contains SUBSTRING (the ceilings always run)\n"
    "  --reps N          timed calls per kernel, N >= 1 (default 20)\n"
    "  --batch B, --seq L  the timed shape's batch and sequence length (default 40 and 128; L <= 512)\n"
    "  --json PATH       also write every result as JSON to PATH\n"
    "  --help            print this and exit\n";

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

// Accepts "--flag value" and "--flag=value"; anything else is a UsageError (exit 2).
Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], inline_value;
    const size_t eq = flag.find('=');
    const bool has_inline = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) inline_value = flag.substr(eq + 1), flag.resize(eq);
    auto value = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) throw UsageError(zt::str(flag, " needs a value"));
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      options.help = true;
    } else if (flag == "--only") {
      options.only = value();
    } else if (flag == "--reps" || flag == "--batch" || flag == "--seq") {
      const std::string text = value();
      int64_t number = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
      const int64_t most = flag == "--seq" ? 512 : 1 << 20;  // the model's max_position_embeddings
      if (ec != std::errc{} || end != text.data() + text.size() || number < 1 || number > most)
        throw UsageError(zt::str(flag, " needs a whole number in [1, ", most, "], got '", text, "'"));
      if (flag == "--reps") options.reps = static_cast<int>(number);
      if (flag == "--batch") options.batch = number;
      if (flag == "--seq") options.seq = number;
    } else if (flag == "--json") {
      options.json_path = value();
    } else {
      throw UsageError(zt::str("unknown flag '", flag, "' (zt_bench --help lists the flags)"));
    }
  }
  return options;
}

#ifdef ZT_WITH_CUDA

using zt::DeviceBuffer;
using zt::DType;
using zt::Shape;
using zt::str;
using zt::Tensor;
namespace kernels = zt::kernels;
namespace optim = zt::optim;

// The legacy default stream: with no StreamScope in this tool it is the current stream, where the
// stream-less entry points run (runtime/stream.h).
constexpr cudaStream_t kStream = nullptr;
constexpr int kWarmup = 3;
constexpr DType bf16 = DType::bf16;
constexpr DType f32 = DType::f32;

// ---- values between host and device --------------------------------------------------------------------

float round_through(DType dtype, float x) {
  if (dtype == DType::bf16) return zt::bf16_to_float(zt::float_to_bf16(x));
  if (dtype == DType::f16) return zt::f16_to_float(zt::float_to_f16(x));
  return x;
}

// f32 host values to a device tensor of f32, bf16 or f16 (round to nearest even), and back.
void upload(const Tensor& t, const float* values) {
  const size_t n = static_cast<size_t>(t.numel()), size = zt::dtype_size(t.dtype());
  std::vector<unsigned char> raw(t.nbytes());
  for (size_t i = 0; i < n; ++i) {
    const uint16_t bits =
        t.dtype() == bf16 ? zt::float_to_bf16(values[i]).bits : zt::float_to_f16(values[i]).bits;
    std::memcpy(&raw[i * size], t.dtype() == f32 ? static_cast<const void*>(&values[i]) : &bits, size);
  }
  ZT_CUDA_CHECK(cudaMemcpy(t.data(), raw.data(), raw.size(), cudaMemcpyHostToDevice));
}

std::vector<float> download(const Tensor& t) {
  const size_t size = zt::dtype_size(t.dtype());
  std::vector<unsigned char> raw(t.nbytes());
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  ZT_CUDA_CHECK(cudaMemcpy(raw.data(), t.data(), raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> values(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits = 0;
    std::memcpy(t.dtype() == f32 ? static_cast<void*>(&values[i]) : &bits, &raw[i * size], size);
    if (t.dtype() == bf16) values[i] = zt::bf16_to_float(zt::bf16{bits});
    if (t.dtype() == DType::f16) values[i] = zt::f16_to_float(zt::f16{bits});
  }
  return values;
}

// SplitMix64: one multiply-xorshift hash per element, cheap enough for inputs of many GiB.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Element i of a uniform [lo, hi) stream: the hash's top 24 bits, exact in f32.
float uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(splitmix64(splitmix64(seed) + i) >> 40) * (1.0f / 16777216.0f);
}

// ---- a kernel's tensors, made for validation or for timing ---------------------------------------------

using Args = std::vector<Tensor>;  // a kernel's tensors on one side (GPU or CPU), indexed by handle

enum class Role : uint8_t {
  input,        // random values
  output,       // written by the kernel; compared
  accumulated,  // random start, updated by the kernel; compared
  work,         // written by one call, read by another (a forward's saved statistics); not compared
};

class ValidationEnv;

// Where a kernel's tensors come from. The validation side makes each twice (GPU storage and an f32 host
// copy of the same values); the timing side once, on the GPU, at full size. Handles index Args.
class Env {
 public:
  virtual ~Env() = default;
  int in(DType t, Shape s, float lo = -1.0f, float hi = 1.0f) { return make(Role::input, "", t, s, lo, hi); }
  int out(const char* name, DType t, Shape s) { return make(Role::output, name, t, s, 0, 0); }
  int acc(const char* name, DType t, Shape s, float lo = -1.0f, float hi = 1.0f) {
    return make(Role::accumulated, name, t, s, lo, hi);
  }
  int work(DType t, Shape s) { return make(Role::work, "", t, s, 0, 0); }
  virtual int ids(Shape s, const std::vector<int64_t>& values) = 0;  // i64, the same on both sides
  const Args& gpu() const { return gpu_; }
  // "x[40,128,1536]", for the table.
  std::string desc(const char* name, int h) const {
    std::string s = str(name, "[");
    for (int i = 0; i < gpu_[h].rank(); ++i) s += str(i ? "," : "", gpu_[h].dim(i));
    return s + "]";
  }

 protected:
  virtual int make(Role role, const char* name, DType dtype, Shape shape, float lo, float hi) = 0;
  Tensor device_tensor(DType dtype, Shape shape) {
    buffers_.push_back(zt::device_allocator().allocate(shape.numel() * zt::dtype_size(dtype),
                                                       zt::MemoryCategory::other, "zt_bench"));
    return Tensor(buffers_.back().data(), shape, dtype, zt::DeviceKind::cuda);
  }
  Args gpu_;
  std::vector<DeviceBuffer> buffers_;
};

using Run = std::function<void(const Args&, bool on_gpu)>;

// What a kernel declares: its call, an optional untimed call run first on each side (the forward whose
// outputs a backward reads), comparisons the generic ones cannot make, and its minimal traffic/arithmetic.
struct Setup {
  Setup(std::string shape_, double bytes_, double flops_, Run run_, Run before_ = nullptr)
      : shape(std::move(shape_)),
        bytes(bytes_),
        flops(flops_),
        run(std::move(run_)),
        before(std::move(before_)) {}
  std::string shape;
  double bytes, flops;
  Run run, before;
  std::function<void(ValidationEnv&)> check;
};

class TimingEnv final : public Env {
 public:
  int ids(Shape s, const std::vector<int64_t>& values) override {
    gpu_.push_back(device_tensor(DType::i64, s));
    ZT_CUDA_CHECK(
        cudaMemcpy(gpu_.back().data(), values.data(), gpu_.back().nbytes(), cudaMemcpyHostToDevice));
    return static_cast<int>(gpu_.size() - 1);
  }

 private:
  // Random data for inputs and accumulators, zeros for the rest. 4 Mi elements are made on the host, then
  // the buffer doubles by device copies: the repeats do not matter to bandwidth or tensor-core timing.
  int make(Role role, const char*, DType dtype, Shape shape, float lo, float hi) override {
    const Tensor t = device_tensor(dtype, shape);
    gpu_.push_back(t);
    ZT_CUDA_CHECK(cudaMemset(t.data(), 0, t.nbytes()));
    if (role != Role::input && role != Role::accumulated) return static_cast<int>(gpu_.size() - 1);
    const int64_t chunk = std::min<int64_t>(t.numel(), int64_t{1} << 22);
    std::vector<float> host(static_cast<size_t>(chunk));
    for (size_t i = 0; i < host.size(); ++i) host[i] = uniform(gpu_.size(), i, lo, hi);
    upload(Tensor(t.data(), Shape{chunk}, dtype, zt::DeviceKind::cuda), host.data());
    char* base = static_cast<char*>(t.data());
    for (size_t done = static_cast<size_t>(chunk) * zt::dtype_size(dtype); done < t.nbytes();) {
      const size_t n = std::min(done, t.nbytes() - done);
      ZT_CUDA_CHECK(cudaMemcpy(base + done, base, n, cudaMemcpyDeviceToDevice));
      done += n;
    }
    return static_cast<int>(gpu_.size() - 1);
  }
};

class ValidationEnv final : public Env {
 public:
  explicit ValidationEnv(DType storage) : storage_(storage) {}

  int ids(Shape s, const std::vector<int64_t>& values) override {
    host_i64_.push_back(values);  // the inner buffers never move
    host_f32_.emplace_back();
    roles_.push_back(Role::input);
    names_.push_back("ids");
    cpu_.push_back(Tensor(host_i64_.back().data(), s, DType::i64));
    gpu_.push_back(device_tensor(DType::i64, s));
    ZT_CUDA_CHECK(
        cudaMemcpy(gpu_.back().data(), values.data(), gpu_.back().nbytes(), cudaMemcpyHostToDevice));
    return static_cast<int>(gpu_.size() - 1);
  }
  const Args& cpu() const { return cpu_; }

  // Runs `before` and the kernel on both sides (GPU first, so it runs while the CPU computes), then compares
  // every output and accumulator.
  void validate(const Setup& setup) {
    for (const bool on_gpu : {true, false}) {
      if (setup.before) setup.before(on_gpu ? gpu_ : cpu_, on_gpu);
      setup.run(on_gpu ? gpu_ : cpu_, on_gpu);
    }
    for (size_t h = 0; h < gpu_.size(); ++h) {
      if (roles_[h] != Role::output && roles_[h] != Role::accumulated) continue;
      const std::vector<float> got = download(gpu_[h]);
      double diff = 0, norm = 0;
      bool finite = true;
      for (size_t i = 0; i < got.size(); ++i) {
        const double want = host_f32_[h][i];
        finite = finite && std::isfinite(got[i]);
        diff += (got[i] - want) * (got[i] - want);
        norm += want * want;
      }
      record(names_[h], finite ? std::sqrt(diff / std::max(norm, 1e-300)) : INFINITY, gpu_[h].dtype());
    }
    if (setup.check) setup.check(*this);
  }
  void compare_value(const std::string& what, double got, double want) {
    record(what, std::abs(got - want) / std::max(std::abs(want), 1e-300), f32);
  }
  double worst() const { return worst_; }
  const std::string& failures() const { return failures_; }  // empty when every output passed

 private:
  int make(Role role, const char* name, DType dtype, Shape shape, float lo, float hi) override {
    std::vector<float>& host = host_f32_.emplace_back(static_cast<size_t>(shape.numel()), 0.0f);
    roles_.push_back(role);
    names_.push_back(name);
    cpu_.push_back(Tensor(host.data(), shape, f32));
    gpu_.push_back(device_tensor(dtype, shape));
    if (role == Role::input || role == Role::accumulated) {
      for (size_t i = 0; i < host.size(); ++i)
        host[i] = round_through(dtype, uniform(gpu_.size(), i, lo, hi));
      upload(gpu_.back(), host.data());
    } else {  // all-ones bytes: NaN in f32, bf16 and f16
      ZT_CUDA_CHECK(cudaMemset(gpu_.back().data(), role == Role::output ? 0xff : 0, gpu_.back().nbytes()));
    }
    return static_cast<int>(gpu_.size() - 1);
  }
  void record(const std::string& what, double error, DType output) {
    const double tolerance = storage_ == f32 && output == f32 ? 1e-5 : 1e-2;
    worst_ = std::max(worst_, error);
    if (!(error <= tolerance))
      failures_ += str(failures_.empty() ? "" : "; ", what, ": ", error, " > ", tolerance);
  }

  DType storage_;
  Args cpu_;
  std::vector<Role> roles_;                   // by handle
  std::vector<std::string> names_;            // by handle
  std::vector<std::vector<float>> host_f32_;  // indexed by handle (ids leave theirs empty)
  std::vector<std::vector<int64_t>> host_i64_;
  double worst_ = 0;
  std::string failures_;
};

// ---- the kernels -----------------------------------------------------------------------------------------

// Sizes a kernel is set up at: the small validation shape or the xlarge training shape.
struct Dims {
  int64_t B, L, D, N, I, V, K;  // batch, length, hidden, heads, intermediate, vocab, conv kernel
  float eps, hidden_dropout, attention_dropout;
  kernels::RelativePositionConfig positions;
  zt::DebertaConfig model;  // whose parameter arena AdamW and grad_stats run over
  int64_t R() const { return B * L; }
};

Dims xlarge_dims(int64_t batch, int64_t seq) {
  const zt::DebertaConfig c = zt::deberta_v2_xlarge_config();
  const auto positions = kernels::RelativePositionConfig::from_model_config(
      c.position_buckets, c.max_relative_positions, c.max_position_embeddings);
  const auto f = [](double x) { return static_cast<float>(x); };
  return {batch,
          seq,
          c.hidden_size,
          c.num_attention_heads,
          c.intermediate_size,
          c.vocab_size,
          c.conv_kernel_size,
          f(c.layer_norm_eps),
          f(c.hidden_dropout_prob),
          f(c.attention_probs_dropout_prob),
          positions,
          c};
}

// Buckets 16 over 64 positions: L 19 runs past the bucket midpoint 8 into the log buckets.
Dims validation_dims() {
  const auto positions = kernels::RelativePositionConfig::from_model_config(16, -1, 64);
  return {3, 19, 48, 3, 56, 97, 3, 1e-7f, 0.1f, 0.1f, positions, zt::deberta_small_cpu_config()};
}

// Random ids in [0, vocab) with a duplicate and padding_idx 0 among them.
std::vector<int64_t> token_ids(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>(splitmix64(i) % static_cast<uint64_t>(vocab));
  ids[1] = ids[0], ids[2] = 0;
  return ids;
}

// 1 for real tokens, 0 for padding: every odd batch item is padded after two thirds of L.
std::vector<int64_t> padding_mask(int64_t batch, int64_t length) {
  std::vector<int64_t> mask(static_cast<size_t>(batch * length));
  for (int64_t i = 0; i < batch * length; ++i)
    mask[i] = i % length < length - (i / length % 2) * (length / 3);
  return mask;
}

// y = x W^T + b.  bytes = 2 (R D + I D + I + R I): x, W, b read, y written;  flops = 2 R I D.
Setup linear_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.I, d.D}, -0.1f, 0.1f), b = e.in(bf16, {d.I});
  const int y = e.out("y", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x) + " " + e.desc("W", w), 2.0 * (d.R() * d.D + d.I * d.D + d.I + d.R() * d.I),
               2.0 * d.R() * d.I * d.D,
               [=](const Args& t, bool) { kernels::linear_forward(t[x], t[w], t[b], t[y]); });
}

// dx = dy W, dW += dy^T x, db += sum dy.  bytes = 2 (R I + 2 R D + I D): dy, x, W read, dx written
// + 4 * 2 (I D + I): dW, db read and written;  flops = 4 R I D (one GEMM each for dx and dW).
Setup linear_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.I, d.D}, -0.1f, 0.1f);
  const int dy = e.in(bf16, {d.B, d.L, d.I}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dw = e.acc("dw", f32, {d.I, d.D}), db = e.acc("db", f32, {d.I});
  return Setup(
      e.desc("dy", dy) + " " + e.desc("W", w),
      2.0 * (d.R() * d.I + 2 * d.R() * d.D + d.I * d.D) + 8.0 * (d.I * d.D + d.I), 4.0 * d.R() * d.I * d.D,
      [=](const Args& t, bool) { kernels::linear_backward(t[dy], t[x], t[w], t[dx], t[dw], t[db]); });
}

// bytes = 2 (2 R D + 2 D): x read, y written, gamma, beta read + 4 * 2 R: mean, rstd written. gamma and
// beta are bf16 like the 16-bit parameter copy.
Setup layernorm_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), gamma = e.in(bf16, {d.D}, 0.5f, 1.5f), beta = e.in(bf16, {d.D});
  const int y = e.out("y", bf16, {d.B, d.L, d.D}), mean = e.out("mean", f32, {d.B, d.L}),
            rstd = e.out("rstd", f32, {d.B, d.L});
  const float eps = d.eps;
  return Setup(e.desc("x", x), 2.0 * (2 * d.R() * d.D + 2 * d.D) + 8.0 * d.R(), 0, [=](const Args& t, bool) {
    kernels::layernorm_forward(t[x], t[gamma], t[beta], eps, t[y], t[mean], t[rstd]);
  });
}

// bytes = 2 (3 R D + D): dy, x read, dx written, gamma read + 4 * 2 R: mean, rstd read
// + 4 * 4 D: dgamma, dbeta read and written.
Setup layernorm_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), gamma = e.in(bf16, {d.D}, 0.5f, 1.5f), beta = e.in(bf16, {d.D});
  const int y = e.work(bf16, {d.B, d.L, d.D}), mean = e.work(f32, {d.B, d.L}), rstd = e.work(f32, {d.B, d.L});
  const int dy = e.in(bf16, {d.B, d.L, d.D}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dgamma = e.acc("dgamma", f32, {d.D}), dbeta = e.acc("dbeta", f32, {d.D});
  const float eps = d.eps;
  return Setup(
      e.desc("x", x), 2.0 * (3 * d.R() * d.D + d.D) + 8.0 * d.R() + 16.0 * d.D, 0,
      [=](const Args& t, bool) {
        kernels::layernorm_backward(t[dy], t[x], t[gamma], t[mean], t[rstd], t[dx], t[dgamma], t[dbeta]);
      },
      [=](const Args& t, bool) {
        kernels::layernorm_forward(t[x], t[gamma], t[beta], eps, t[y], t[mean], t[rstd]);
      });
}

// On the intermediate activation. bytes = 2 * 2 n: x read, y written.
Setup gelu_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.I}, -4.0f, 4.0f), y = e.out("y", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x), 4.0 * d.R() * d.I, 0,
               [=](const Args& t, bool) { kernels::gelu_forward(t[x], t[y]); });
}

// bytes = 3 * 2 n: dy, x read, dx written.
Setup gelu_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.I}, -4.0f, 4.0f), dy = e.in(bf16, {d.B, d.L, d.I});
  const int dx = e.out("dx", bf16, {d.B, d.L, d.I});
  return Setup(e.desc("x", x), 6.0 * d.R() * d.I, 0,
               [=](const Args& t, bool) { kernels::gelu_backward(t[dy], t[x], t[dx]); });
}

// Hidden dropout. bytes = 2 * 2 n: x read, y written (the keep mask is Philox arithmetic, not memory).
Setup dropout_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), y = e.out("y", bf16, {d.B, d.L, d.D});
  const kernels::DropoutSite site{d.hidden_dropout, 42, kernels::dropout_site_id(1, 0, 0)};
  return Setup(str(e.desc("x", x), " p=", site.p), 4.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::dropout_forward(t[x], t[y], site); });
}

// The residual sum. bytes = 3 * 2 n: a, b read, out written.
Setup residual_add(Env& e, const Dims& d) {
  const int a = e.in(bf16, {d.B, d.L, d.D}), b = e.in(bf16, {d.B, d.L, d.D}),
            out = e.out("out", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("a", a), 6.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::add(t[a], t[b], t[out]); });
}

// bytes = 8 R ids + 2 R D gathered rows read + 2 R D written (the rest of the table is never touched).
Setup embedding_forward(Env& e, const Dims& d) {
  const int ids = e.ids({d.B, d.L}, token_ids(d.R(), d.V)), table = e.in(bf16, {d.V, d.D});
  const int out = e.out("out", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("ids", ids) + " " + e.desc("table", table), 8.0 * d.R() + 4.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::embedding_forward(t[ids], t[table], t[out]); });
}

// Scatter-add into the f32 table gradient, padding_idx 0 skipped. bytes = 8 R ids + 2 R D dout read
// + 4 * 2 R D touched rows read and written (atomic adds).
Setup embedding_backward(Env& e, const Dims& d) {
  const int ids = e.ids({d.B, d.L}, token_ids(d.R(), d.V)), dout = e.in(bf16, {d.B, d.L, d.D});
  const int dtable = e.acc("dtable", f32, {d.V, d.D});
  return Setup(e.desc("dout", dout) + " " + e.desc("dtable", dtable), 8.0 * d.R() + 10.0 * d.R() * d.D, 0,
               [=](const Args& t, bool) { kernels::embedding_backward(t[ids], t[dout], t[dtable], 0); });
}

// Labels of B rows over 2 classes (MRPC), every fifth row ignored (-100).
std::vector<int64_t> class_labels(int64_t n) {
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 5 == 2 ? -100 : i % 2;
  return labels;
}

// f32 by contract; tiny, so launch-bound. bytes = 4 B C logits + 8 B labels read + 4 loss written.
Setup cross_entropy_forward(Env& e, const Dims& d) {
  const int logits = e.in(f32, {d.B, 2}, -3.0f, 3.0f), labels = e.ids({d.B}, class_labels(d.B));
  const int loss = e.out("loss", f32, {1});
  return Setup(e.desc("logits", logits), 8.0 * d.B + 8.0 * d.B + 4.0, 0,
               [=](const Args& t, bool) { kernels::cross_entropy_forward(t[logits], t[labels], t[loss]); });
}

// bytes = 2 * 4 B C: logits read, dlogits written + 8 B labels.
Setup cross_entropy_backward(Env& e, const Dims& d) {
  const int logits = e.in(f32, {d.B, 2}, -3.0f, 3.0f), labels = e.ids({d.B}, class_labels(d.B));
  const int dlogits = e.out("dlogits", f32, {d.B, 2});
  return Setup(e.desc("logits", logits), 16.0 * d.B + 8.0 * d.B, 0, [=](const Args& t, bool) {
    kernels::cross_entropy_backward(t[logits], t[labels], 0.5f, t[dlogits]);
  });
}

// Disentangled attention with c2p and p2c and attention dropout. q, k, v [B, L, D], tables [2S, D], probs
// [B, N, L, L], all bf16 (the GPU saves probs in the storage dtype). W = c(L-1, 0) - c(0, L-1) + 1 table rows
// are reached (255 at L 128), so the c2p and p2c score GEMMs are [L, d] x [d, W] per head; dpos_* are bf16,
// the dy of the position projections' linear.
struct Attention {
  int q, k, v, pos_key, pos_query, mask, context, probs;
  kernels::DisentangledAttentionConfig config;
  double bn, L, d, W, tables;  // B N, L, head size, W, elements of both tables
  Attention(Env& e, const Dims& dims, bool saved_only) {
    const int64_t rows = 2 * dims.positions.att_span();
    q = e.in(bf16, {dims.B, dims.L, dims.D}), k = e.in(bf16, {dims.B, dims.L, dims.D});
    v = e.in(bf16, {dims.B, dims.L, dims.D});
    pos_key = e.in(bf16, {rows, dims.D}), pos_query = e.in(bf16, {rows, dims.D});
    mask = e.ids({dims.B, dims.L}, padding_mask(dims.B, dims.L));
    context = saved_only ? e.work(bf16, {dims.B, dims.L, dims.D})
                         : e.out("context", bf16, {dims.B, dims.L, dims.D});
    probs = saved_only ? e.work(bf16, {dims.B, dims.N, dims.L, dims.L})
                       : e.out("probs", bf16, {dims.B, dims.N, dims.L, dims.L});
    config.num_heads = dims.N;
    config.positions = dims.positions;
    config.dropout_p = dims.attention_dropout;
    config.seed = 42;
    config.site_id = kernels::dropout_site_id(1, 0, 1);
    bn = static_cast<double>(dims.B * dims.N), L = static_cast<double>(dims.L);
    d = static_cast<double>(dims.D / dims.N), tables = 2.0 * static_cast<double>(rows * dims.D);
    W = static_cast<double>(kernels::c2p_index(dims.L - 1, 0, dims.positions) -
                            kernels::c2p_index(0, dims.L - 1, dims.positions) + 1);
  }
  void forward(const Args& t) const {
    kernels::disentangled_attention_forward(t[q], t[k], t[v], t[pos_key], t[pos_query], t[mask], config,
                                            t[context], t[probs]);
  }
  // The GPU side: the fused kernel (whatever ZT_FUSED_ATTENTION says) or the entry point; the CPU reference
  // on the CPU side.
  void forward_on(const Args& t, bool on_gpu, bool fused) const {
    if (!on_gpu || !fused) return forward(t);
    kernels::gpu::fused_disentangled_attention_forward(t[q], t[k], t[v], t[pos_key], t[pos_query], t[mask],
                                                       config, t[context], t[probs], kStream);
  }
};

// flops = B N (4 L^2 d + 2 * 2 L W d): Q K^T and P~ V, and the c2p and p2c score GEMMs (the fused kernel's
// extra products over the table rows each key chunk reaches are not counted, as the unfused path's padded
// window is not).
// bytes = 2 (3 B L D + tables) q, k, v, tables read + 8 B L mask + 2 B L D context + 2 B N L^2 probs.
// fused: the fused kernel (kernels/cuda/fused_disentangled_attention.cuh) whatever ZT_FUSED_ATTENTION says,
// so that --only attention shows both paths; the unfused entry takes the fused path too when it is set.
Setup attention_forward_setup(Env& e, const Dims& d, bool fused) {
  const Attention a(e, d, false);
  return Setup(str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
               2.0 * (4.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 2.0 * a.bn * a.L * a.L,
               a.bn * (4.0 * a.L * a.L * a.d + 4.0 * a.L * a.W * a.d),
               [=](const Args& t, bool on_gpu) { a.forward_on(t, on_gpu, fused); });
}
Setup attention_forward(Env& e, const Dims& d) {
  return attention_forward_setup(e, d, false);
}
Setup attention_forward_fused(Env& e, const Dims& d) {
  return attention_forward_setup(e, d, true);
}

// flops = B N (8 L^2 d + 4 * 2 L W d): dV, dP, dQ, dK (one L^2 d GEMM each way), and per positional term
// one GEMM into dQ or dK and one into dpos.
// bytes = 2 (4 B L D + tables) q, k, v, dcontext, tables read + 8 B L mask + 2 B N L^2 probs read
//       + 2 * 3 B L D dq, dk, dv written + 2 * 2 tables dpos read and written.
// fused: the GPU side runs the fused backward whatever ZT_FUSED_ATTENTION_BACKWARD says, after the
// (switch-chosen) forward.
Setup attention_backward_setup(Env& e, const Dims& d, bool fused) {
  const Attention a(e, d, true);
  const int dc = e.in(bf16, {d.B, d.L, d.D}), dq = e.out("dq", bf16, {d.B, d.L, d.D});
  const int dk = e.out("dk", bf16, {d.B, d.L, d.D}), dv = e.out("dv", bf16, {d.B, d.L, d.D});
  const int dpk = e.acc("dpk", bf16, e.gpu()[a.pos_key].shape()),
            dpq = e.acc("dpq", bf16, e.gpu()[a.pos_query].shape());
  return Setup(
      str(e.desc("q", a.q), " ", e.desc("rel", a.pos_key), " h", d.N),
      2.0 * (4.0 * d.R() * d.D + a.tables) + 8.0 * d.R() + 2.0 * a.bn * a.L * a.L + 6.0 * d.R() * d.D +
          4.0 * a.tables,
      a.bn * (8.0 * a.L * a.L * a.d + 8.0 * a.L * a.W * a.d),
      [=](const Args& t, bool on_gpu) {
        if (on_gpu && fused) {
          kernels::gpu::fused_disentangled_attention_backward(
              t[a.q], t[a.k], t[a.v], t[a.pos_key], t[a.pos_query], t[a.mask], t[a.probs], t[dc], a.config,
              t[dq], t[dk], t[dv], t[dpk], t[dpq], kStream);
          return;
        }
        kernels::disentangled_attention_backward(t[a.q], t[a.k], t[a.v], t[a.pos_key], t[a.pos_query],
                                                 t[a.mask], t[a.probs], t[dc], a.config, t[dq], t[dk], t[dv],
                                                 t[dpk], t[dpq]);
      },
      [=](const Args& t, bool) { a.forward(t); });
}
Setup attention_backward(Env& e, const Dims& d) {
  return attention_backward_setup(e, d, false);
}
Setup attention_backward_fused(Env& e, const Dims& d) {
  return attention_backward_setup(e, d, true);
}

// The encoder's ConvLayer (D -> D, same padding). flops = 2 R D D k;
// bytes = 2 (2 R D + D D k + D): x, W, bias read, y written (the im2col scratch is not minimal traffic).
Setup conv1d_forward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.D, d.D, d.K}, -0.1f, 0.1f),
            b = e.in(bf16, {d.D});
  const int y = e.out("y", bf16, {d.B, d.L, d.D});
  return Setup(e.desc("x", x) + " " + e.desc("W", w), 2.0 * (2 * d.R() * d.D + d.D * d.D * d.K + d.D),
               2.0 * d.R() * d.D * d.D * d.K,
               [=](const Args& t, bool) { kernels::conv1d_forward(t[x], t[w], t[b], t[y]); });
}

// flops = 4 R D D k; bytes = 2 (3 R D + D D k): dy, x, W read, dx written + 4 * 2 (D D k + D): dW, db.
Setup conv1d_backward(Env& e, const Dims& d) {
  const int x = e.in(bf16, {d.B, d.L, d.D}), w = e.in(bf16, {d.D, d.D, d.K}, -0.1f, 0.1f);
  const int dy = e.in(bf16, {d.B, d.L, d.D}), dx = e.out("dx", bf16, {d.B, d.L, d.D});
  const int dw = e.acc("dw", f32, {d.D, d.D, d.K}), db = e.acc("db", f32, {d.D});
  return Setup(e.desc("x", x) + " " + e.desc("W", w),
               2.0 * (3 * d.R() * d.D + d.D * d.D * d.K) + 8.0 * (d.D * d.D * d.K + d.D),
               4.0 * d.R() * d.D * d.D * d.K, [=](const Args& t, bool) {
                 kernels::conv1d_backward(t[dy], t[x], t[w], t[dx], t[dw], t[db]);
               });
}

// The model's f32 parameter arena (master, grads, m and v share its layout): one range per tensor, the
// alignment gaps between them untouched.
std::vector<optim::TensorRange> parameter_ranges(const zt::DebertaConfig& model, int64_t& elements) {
  const zt::ParameterTable table(model);
  const zt::ArenaLayout layout = table.layout(f32);
  elements = static_cast<int64_t>(layout.total_bytes() / 4);
  std::vector<optim::TensorRange> ranges;
  for (const zt::ParameterInfo& p : table.entries())
    ranges.push_back({static_cast<int64_t>(layout.slot(p.name).offset / 4), p.numel(), p.weight_decay});
  return ranges;
}

// Fused AdamW as the trainer calls it: gradients multiplied by the clip/unscale factor on load, zeroed once
// read, the bf16 parameter copy written. The CPU side is optim's per-element update after the same float
// product, which the GPU matches bit for bit. bytes = 34 per updated element: params, grads, m, v read (16),
// params, grads (zeroed), m, v written (16), the bf16 copy written (2).
Setup adamw_update(Env& e, const Dims& d) {
  int64_t n = 0, updated = 0;
  const std::vector<optim::TensorRange> ranges = parameter_ranges(d.model, n);
  for (const optim::TensorRange& r : ranges) updated += r.numel;
  const int p = e.acc("params", f32, {n}, -0.05f, 0.05f), g = e.acc("grads", f32, {n}, -1e-3f, 1e-3f);
  const int m = e.acc("exp_avg", f32, {n}, -1e-4f, 1e-4f), v = e.acc("exp_avg_sq", f32, {n}, 0.0f, 1e-6f);
  const int p16 = e.acc("params16", bf16, {n});
  const optim::AdamWStepScalars s = optim::adamw_step_scalars(optim::AdamWHyper{}, 3.5e-6, 3);
  constexpr float kGradScale = 0.37f;
  return Setup(
      str(updated, " params in ", ranges.size(), " tensors"), 34.0 * updated, 0,
      [=](const Args& t, bool on_gpu) {
        if (on_gpu) {
          optim::gpu::adamw_update(s, t[p], t[g], t[m], t[v], ranges, t[p16], kStream, kGradScale, true);
          return;
        }
        for (const optim::TensorRange& r : ranges) {
          float* param = t[p].data_as<float>() + r.offset;
          float* grad = t[g].data_as<float>() + r.offset;
          float* copy = t[p16].data_as<float>() + r.offset;  // a bf16 tensor's host mirror is f32
          for (int64_t i = 0; i < r.numel; ++i) grad[i] *= kGradScale;
          optim::adamw_update_elements(s, r.weight_decay, r.numel, param, grad,
                                       t[m].data_as<float>() + r.offset, t[v].data_as<float>() + r.offset);
          for (int64_t i = 0; i < r.numel; ++i) copy[i] = round_through(bf16, param[i]), grad[i] = 0;
        }
      });
}

// Sum of squares and non-finite count over the f32 gradient arena (clipping, overflow check); checked
// against optim::sum_of_squares. bytes = 4 n, read once.
Setup grad_stats(Env& e, const Dims& d) {
  static_assert(sizeof(optim::gpu::GradStats) == 16, "the result is one double and one int64");
  int64_t n = 0;
  parameter_ranges(d.model, n);
  const int x = e.in(f32, {n}, -1e-3f, 1e-3f), result = e.work(DType::i64, {2});
  Setup setup(e.desc("grads", x), 4.0 * n, 0, [=](const Args& t, bool on_gpu) {
    if (on_gpu)
      optim::gpu::grad_stats_async(t[x], static_cast<optim::gpu::GradStats*>(t[result].data()), kStream);
  });
  setup.check = [=](ValidationEnv& v) {
    optim::gpu::GradStats got;
    ZT_CUDA_CHECK(cudaMemcpy(&got, v.gpu()[result].data(), sizeof got, cudaMemcpyDeviceToHost));
    const Tensor& host = v.cpu()[x];
    v.compare_value("sum_of_squares", got.sum_of_squares,
                    optim::sum_of_squares(std::span<const float>(host.data_as<float>(), host.numel()), 1));
    v.compare_value("non_finite", static_cast<double>(got.non_finite), 0.0);
  };
  return setup;
}

struct Kernel {
  const char* name;
  const char* dtype;  // storage, for the table
  DType storage;      // f32: outputs that are f32 too are held to 1e-5
  Setup (*setup)(Env&, const Dims&);
};

const Kernel kKernels[] = {
    {"linear_forward", "bf16", bf16, linear_forward},
    {"linear_backward", "bf16/f32 dW", bf16, linear_backward},
    {"layernorm_forward", "bf16", bf16, layernorm_forward},
    {"layernorm_backward", "bf16/f32 dg", bf16, layernorm_backward},
    {"gelu_forward", "bf16", bf16, gelu_forward},
    {"gelu_backward", "bf16", bf16, gelu_backward},
    {"dropout_forward", "bf16", bf16, dropout_forward},
    {"add", "bf16", bf16, residual_add},
    {"embedding_forward", "bf16", bf16, embedding_forward},
    {"embedding_backward", "bf16/f32 dT", bf16, embedding_backward},
    {"cross_entropy_forward", "f32", f32, cross_entropy_forward},
    {"cross_entropy_backward", "f32", f32, cross_entropy_backward},
    {"attention_forward", "bf16", bf16, attention_forward},
    {"attention_forward_fused", "bf16", bf16, attention_forward_fused},
    {"attention_backward", "bf16", bf16, attention_backward},
    {"attention_backward_fused", "bf16", bf16, attention_backward_fused},
    {"conv1d_forward", "bf16", bf16, conv1d_forward},
    {"conv1d_backward", "bf16/f32 dW", bf16, conv1d_backward},
    {"adamw_update", "f32+bf16", f32, adamw_update},
    {"grad_stats", "f32", f32, grad_stats},
};

// ---- timing and results --------------------------------------------------------------------------------

class Timer {
 public:
  explicit Timer(int reps) : start_(static_cast<size_t>(reps)), stop_(static_cast<size_t>(reps)) {
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
  ~Timer() {
    for (size_t r = 0; r < start_.size(); ++r) cudaEventDestroy(start_[r]), cudaEventDestroy(stop_[r]);
    cudaFree(flush_);
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // {median, min} in microseconds. Every repetition is queued before any event is read, so the host runs
  // ahead and the events measure the device's time for the call, not the host's launch latency.
  std::pair<double, double> time(const std::function<void()>& call) {
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
void time_kernel(Timer& timer, Setup (*setup_fn)(Env&, const Dims&), const Dims& dims, Result& r) {
  TimingEnv env;
  const Setup setup = setup_fn(env, dims);
  if (setup.before) setup.before(env.gpu(), true);
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  std::tie(r.median_us, r.min_us) = timer.time([&] { setup.run(env.gpu(), true); });
  r.shape = setup.shape, r.bytes = setup.bytes, r.flops = setup.flops;
}

// HBM: 2 GiB copied device to device, bytes = 2 * 2 GiB (each byte read and written).
Setup hbm_copy(Env& e, const Dims&) {
  const int src = e.in(bf16, {int64_t{1} << 30}), dst = e.out("dst", bf16, {int64_t{1} << 30});
  return Setup("2 GiB D2D", 4.0 * (int64_t{1} << 30), 0, [=](const Args& t, bool) {
    ZT_CUDA_CHECK(
        cudaMemcpyAsync(t[dst].data(), t[src].data(), t[src].nbytes(), cudaMemcpyDeviceToDevice, kStream));
  });
}

// C = A B^T, bf16 in and out, f32 compute, m = n = k = 8192 (linear_forward's operand layout);
// flops = 2 m n k.
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

int run_benchmarks(const Options& options) {
  std::vector<const Kernel*> selected;
  for (const Kernel& k : kKernels) {
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
    std::fputs(kUsage, stdout);
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
