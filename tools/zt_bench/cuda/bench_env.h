// zt_bench's kernel tensors: where each benchmarked kernel gets its inputs and outputs. A kernel's setup
// (kernel_setups.h) asks an Env for tensors by role and gets back handles into Args; ValidationEnv makes each
// tensor twice (GPU storage and an f32 host copy of the same storage-rounded values) and compares the
// outputs after both sides ran, TimingEnv makes them once on the GPU at full size.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt_bench {

using zt::DeviceBuffer;
using zt::DType;
using zt::Shape;
using zt::str;
using zt::Tensor;

// The legacy default stream: with no StreamScope in this tool it is the current stream, where the
// stream-less entry points run (runtime/stream.h).
constexpr cudaStream_t kStream = nullptr;
constexpr int kWarmup = 3;
constexpr DType bf16 = DType::bf16;
constexpr DType f32 = DType::f32;

// ---- values between host and device --------------------------------------------------------------------

float round_through(DType dtype, float x);

// f32 host values to a device tensor of f32, bf16 or f16 (round to nearest even), and back.
void upload(const Tensor& t, const float* values);
std::vector<float> download(const Tensor& t);

// SplitMix64: one multiply-xorshift hash per element, cheap enough for inputs of many GiB.
uint64_t splitmix64(uint64_t x);

// Element i of a uniform [lo, hi) stream: the hash's top 24 bits, exact in f32.
float uniform(uint64_t seed, uint64_t i, float lo, float hi);

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
  std::string desc(const char* name, int h) const;

 protected:
  virtual int make(Role role, const char* name, DType dtype, Shape shape, float lo, float hi) = 0;
  Tensor device_tensor(DType dtype, Shape shape);
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
  int ids(Shape s, const std::vector<int64_t>& values) override;

 private:
  // Random data for inputs and accumulators, zeros for the rest. 4 Mi elements are made on the host, then
  // the buffer doubles by device copies: the repeats do not matter to bandwidth or tensor-core timing.
  int make(Role role, const char*, DType dtype, Shape shape, float lo, float hi) override;
};

class ValidationEnv final : public Env {
 public:
  explicit ValidationEnv(DType storage) : storage_(storage) {}

  int ids(Shape s, const std::vector<int64_t>& values) override;
  const Args& cpu() const { return cpu_; }

  // Runs `before` and the kernel on both sides (GPU first, so it runs while the CPU computes), then compares
  // every output and accumulator.
  void validate(const Setup& setup);
  void compare_value(const std::string& what, double got, double want);
  double worst() const { return worst_; }
  const std::string& failures() const { return failures_; }  // empty when every output passed

 private:
  int make(Role role, const char* name, DType dtype, Shape shape, float lo, float hi) override;
  void record(const std::string& what, double error, DType output);

  DType storage_;
  Args cpu_;
  std::vector<Role> roles_;                   // by handle
  std::vector<std::string> names_;            // by handle
  std::vector<std::vector<float>> host_f32_;  // indexed by handle (ids leave theirs empty)
  std::vector<std::vector<int64_t>> host_i64_;
  double worst_ = 0;
  std::string failures_;
};

}  // namespace zt_bench
