// Helpers for the GPU tests of the GEMM-based kernels (linear, conv1d, disentangled attention): device
// copies of host float vectors in any storage dtype, and the host-side rounding that gives the CPU
// reference exactly the inputs the GPU sees. Copies go through copy_tensor, i.e. the calling thread's
// current stream and allocator (runtime/stream.h), so the helpers also serve threads that act as ranks.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt::test {

// Owns the device memory behind `tensor`.
struct DeviceTensor {
  DeviceBuffer buffer;
  Tensor tensor;
};

// x rounded to `dtype` and back (identity for f32).
inline std::vector<float> round_to(const std::vector<float>& x, DType dtype) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    switch (dtype) {
      case DType::bf16:
        out[i] = bf16_to_float(float_to_bf16(x[i]));
        break;
      case DType::f16:
        out[i] = f16_to_float(float_to_f16(x[i]));
        break;
      default:
        out[i] = x[i];
    }
  }
  return out;
}

// A device tensor of `dtype` holding x (converted with round-to-nearest-even).
inline DeviceTensor to_device(const std::vector<float>& x, Shape shape, DType dtype) {
  ZT_CHECK(static_cast<int64_t>(x.size()) == shape.numel(), "to_device: ", x.size(), " values for ",
           shape.to_string());
  std::vector<uint8_t> bytes(x.size() * dtype_size(dtype));
  for (size_t i = 0; i < x.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(bytes.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t bits = dtype == DType::bf16 ? float_to_bf16(x[i]).bits : float_to_f16(x[i]).bits;
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  DeviceTensor t;
  t.buffer = device_allocator().allocate(bytes.size(), MemoryCategory::other, "test");
  t.tensor = Tensor(t.buffer.data(), shape, dtype, DeviceKind::cuda);
  copy_tensor(Tensor(bytes.data(), shape, dtype), t.tensor);
  return t;
}

inline DeviceTensor to_device_i64(const std::vector<int64_t>& x, Shape shape) {
  DeviceTensor t;
  t.buffer = device_allocator().allocate(x.size() * 8, MemoryCategory::other, "test");
  t.tensor = Tensor(t.buffer.data(), shape, DType::i64, DeviceKind::cuda);
  copy_tensor(Tensor(const_cast<int64_t*>(x.data()), shape, DType::i64), t.tensor);
  return t;
}

// The tensor's values as floats (waits for the current stream).
inline std::vector<float> to_host(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint8_t> bytes(n * dtype_size(t.dtype()));
  copy_tensor(t, Tensor(bytes.data(), t.shape(), t.dtype()));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype() == DType::f32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = t.dtype() == DType::bf16 ? bf16_to_float(bf16{bits}) : f16_to_float(f16{bits});
    }
  }
  return out;
}

}  // namespace zt::test
