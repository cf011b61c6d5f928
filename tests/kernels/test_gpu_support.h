// GPU test helpers: device arrays of any storage dtype filled from / read back as floats, with an optional
// element offset so a view can start mid-pack (the kernels' scalar fallback), and host rounding through a
// dtype so a CPU reference sees exactly the values the GPU stores.
#pragma once

#ifdef ZT_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt::test {

inline float round_through(DType dtype, float x) {
  switch (dtype) {
    case DType::bf16:
      return bf16_to_float(float_to_bf16(x));
    case DType::f16:
      return f16_to_float(float_to_f16(x));
    default:
      return x;
  }
}

inline std::vector<float> round_through(DType dtype, std::vector<float> v) {
  for (float& x : v) x = round_through(dtype, x);
  return v;
}

// Uniform values in [lo, hi), reproducible from `seed`.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// cudaMalloc'd storage for one tensor, `offset_elements` past a 256-byte aligned base (1 makes an f32 view
// 4 bytes off a 16-byte boundary, a bf16 view 2 bytes off).
class DeviceArray {
 public:
  DeviceArray(DType dtype, Shape shape, int64_t offset_elements = 0)
      : dtype_(dtype),
        shape_(shape),
        offset_bytes_(static_cast<size_t>(offset_elements) * dtype_size(dtype)) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype) + offset_bytes_;
    ZT_CUDA_CHECK(cudaMalloc(&base_, bytes > 0 ? bytes : 1));
  }
  ~DeviceArray() { cudaFree(base_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void* data() const { return static_cast<char*>(base_) + offset_bytes_; }
  Tensor tensor() const { return Tensor(data(), shape_, dtype_, DeviceKind::cuda); }
  int64_t numel() const { return shape_.numel(); }

  // Converts to the storage dtype (round to nearest even) and copies to the device.
  void upload(const std::vector<float>& values) {
    std::vector<unsigned char> bytes(values.size() * dtype_size(dtype_));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype_ == DType::f32) {
        std::memcpy(&bytes[i * 4], &values[i], 4);
      } else {
        const uint16_t bits =
            dtype_ == DType::bf16 ? float_to_bf16(values[i]).bits : float_to_f16(values[i]).bits;
        std::memcpy(&bytes[i * 2], &bits, 2);
      }
    }
    upload_bytes(bytes.data(), bytes.size());
  }
  std::vector<float> download() const {
    std::vector<unsigned char> bytes(static_cast<size_t>(numel()) * dtype_size(dtype_));
    download_bytes(bytes.data(), bytes.size());
    std::vector<float> values(static_cast<size_t>(numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (dtype_ == DType::f32) {
        std::memcpy(&values[i], &bytes[i * 4], 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, &bytes[i * 2], 2);
        values[i] = dtype_ == DType::bf16 ? bf16_to_float(bf16{bits}) : f16_to_float(f16{bits});
      }
    }
    return values;
  }
  template <typename T>
  void upload_raw(const std::vector<T>& values) {
    upload_bytes(values.data(), values.size() * sizeof(T));
  }
  template <typename T>
  std::vector<T> download_raw() const {
    std::vector<T> values(static_cast<size_t>(numel()));
    download_bytes(values.data(), values.size() * sizeof(T));
    return values;
  }

 private:
  void upload_bytes(const void* src, size_t n) {
    ZT_CUDA_CHECK(cudaMemcpy(data(), src, n, cudaMemcpyHostToDevice));
  }
  void download_bytes(void* dst, size_t n) const {
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    ZT_CUDA_CHECK(cudaMemcpy(dst, data(), n, cudaMemcpyDeviceToHost));
  }

  DType dtype_;
  Shape shape_;
  size_t offset_bytes_;
  void* base_ = nullptr;
};

// Parameter of the GPU-vs-CPU suites: storage dtype x shape x (aligned | one element off).
struct GpuCase {
  DType dtype;
  Shape shape;
  int64_t offset;  // elements: 0 takes the vector path, 1 the scalar fallback
};

inline std::string gpu_case_name(const GpuCase& c) {
  std::string name(dtype_name(c.dtype));
  for (int i = 0; i < c.shape.rank; ++i) name.append("_").append(std::to_string(c.shape[i]));
  name.append(c.offset ? "_misaligned" : "_aligned");
  return name;
}

// dtype x {[7, 1000], [3, 5, 771], [13, 1024], [2, 3]} x {aligned, misaligned}: odd widths, widths that
// are not multiples of the 4/8-element packs or of 128, a pack-multiple width, and a sub-pack tensor.
inline std::vector<GpuCase> standard_gpu_cases() {
  std::vector<GpuCase> cases;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Shape& shape : {Shape{7, 1000}, Shape{3, 5, 771}, Shape{13, 1024}, Shape{2, 3}}) {
      for (int64_t offset : {0, 1}) cases.push_back({dtype, shape, offset});
    }
  }
  return cases;
}

}  // namespace zt::test

#endif  // ZT_WITH_CUDA
