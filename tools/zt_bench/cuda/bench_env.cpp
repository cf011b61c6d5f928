#include "tools/zt_bench/cuda/bench_env.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cuda_check.h"

namespace zt_bench {

float round_through(DType dtype, float x) {
  if (dtype == DType::bf16) return zt::bf16_to_float(zt::float_to_bf16(x));
  if (dtype == DType::f16) return zt::f16_to_float(zt::float_to_f16(x));
  return x;
}

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

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(splitmix64(splitmix64(seed) + i) >> 40) * (1.0f / 16777216.0f);
}

std::string Env::desc(const char* name, int h) const {
  std::string s = str(name, "[");
  for (int i = 0; i < gpu_[h].rank(); ++i) s += str(i ? "," : "", gpu_[h].dim(i));
  return s + "]";
}

Tensor Env::device_tensor(DType dtype, Shape shape) {
  buffers_.push_back(zt::device_allocator().allocate(shape.numel() * zt::dtype_size(dtype),
                                                     zt::MemoryCategory::other, "zt_bench"));
  return Tensor(buffers_.back().data(), shape, dtype, zt::DeviceKind::cuda);
}

int TimingEnv::ids(Shape s, const std::vector<int64_t>& values) {
  gpu_.push_back(device_tensor(DType::i64, s));
  ZT_CUDA_CHECK(cudaMemcpy(gpu_.back().data(), values.data(), gpu_.back().nbytes(), cudaMemcpyHostToDevice));
  return static_cast<int>(gpu_.size() - 1);
}

int TimingEnv::make(Role role, const char*, DType dtype, Shape shape, float lo, float hi) {
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

int ValidationEnv::ids(Shape s, const std::vector<int64_t>& values) {
  host_i64_.push_back(values);  // the inner buffers never move
  host_f32_.emplace_back();
  roles_.push_back(Role::input);
  names_.push_back("ids");
  cpu_.push_back(Tensor(host_i64_.back().data(), s, DType::i64));
  gpu_.push_back(device_tensor(DType::i64, s));
  ZT_CUDA_CHECK(cudaMemcpy(gpu_.back().data(), values.data(), gpu_.back().nbytes(), cudaMemcpyHostToDevice));
  return static_cast<int>(gpu_.size() - 1);
}

void ValidationEnv::validate(const Setup& setup) {
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

void ValidationEnv::compare_value(const std::string& what, double got, double want) {
  record(what, std::abs(got - want) / std::max(std::abs(want), 1e-300), f32);
}

int ValidationEnv::make(Role role, const char* name, DType dtype, Shape shape, float lo, float hi) {
  std::vector<float>& host = host_f32_.emplace_back(static_cast<size_t>(shape.numel()), 0.0f);
  roles_.push_back(role);
  names_.push_back(name);
  cpu_.push_back(Tensor(host.data(), shape, f32));
  gpu_.push_back(device_tensor(dtype, shape));
  if (role == Role::input || role == Role::accumulated) {
    for (size_t i = 0; i < host.size(); ++i) host[i] = round_through(dtype, uniform(gpu_.size(), i, lo, hi));
    upload(gpu_.back(), host.data());
  } else {  // all-ones bytes: NaN in f32, bf16 and f16
    ZT_CUDA_CHECK(cudaMemset(gpu_.back().data(), role == Role::output ? 0xff : 0, gpu_.back().nbytes()));
  }
  return static_cast<int>(gpu_.size() - 1);
}

void ValidationEnv::record(const std::string& what, double error, DType output) {
  const double tolerance = storage_ == f32 && output == f32 ? 1e-5 : 1e-2;
  worst_ = std::max(worst_, error);
  if (!(error <= tolerance))
    failures_ += str(failures_.empty() ? "" : "; ", what, ": ", error, " > ", tolerance);
}

}  // namespace zt_bench
