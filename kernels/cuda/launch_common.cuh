// Shared pieces of the CUDA kernels, for .cu files only (device code): storage <-> f32 conversion, 16-byte
// packs, the dtype dispatch table, warp reductions, grid sizing and the argument checks of the tensor-level
// entry points.
//
// Storage vs accumulate: tensors are stored as f32, bf16 (__nv_bfloat16) or f16 (__half); every kernel
// converts to f32 on load, computes in f32 (or f64 where the CPU reference does and the op is tiny) and
// rounds to the storage type once on store (round to nearest even, as the host float_to_bf16/f16).
//
// Vectorized access: a thread moves one Pack128<T> (16 bytes: 4 f32 or 8 bf16/f16) per load. The vector
// path is a template flag chosen on the host by is_aligned16() over every pointer (and, for row ops, the row
// pitch); anything else (a view starting mid-pack, a row width that is not a multiple of the pack) takes the
// scalar path of the same kernel, so both paths compute the same values.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/arg_checks.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt::kernels::cuda_detail {

// ---- storage types -------------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

// 16 bytes of T: the unit of one vectorized load/store (llm.c's Packed128).
template <typename T>
struct alignas(16) Pack128 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T v[kSize];
};

template <typename T>
__device__ __forceinline__ Pack128<T> load128(const T* p) {
  return *reinterpret_cast<const Pack128<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Pack128<T>& pack) {
  *reinterpret_cast<Pack128<T>*>(p) = pack;
}

// kVec consecutive elements of T at p, as f32: one Pack128 load when kVec is the pack size (p 16-byte
// aligned), one scalar load when kVec is 1. Lets a kernel take its column count per thread as a template
// parameter with one body for both.
template <typename T, int kVec>
struct FloatSlice {
  float v[kVec];
  __device__ __forceinline__ explicit FloatSlice(const T* p) {
    if constexpr (kVec == 1) {
      v[0] = to_float(*p);
    } else {
      static_assert(kVec == Pack128<T>::kSize, "a vector slice is one Pack128");
      const Pack128<T> pack = load128(p);
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[k] = to_float(pack.v[k]);
    }
  }
  __device__ __forceinline__ float operator[](int k) const {
    return v[k];
  }
};

inline bool is_aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- dtype dispatch ------------------------------------------------------------------------------------

// Calls f(T{}) with T the storage type of `dtype` (f32, bf16, f16); other dtypes are an error naming `op`.
template <typename F>
void dispatch_float_storage(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(float{});
      return;
    case DType::bf16:
      f(__nv_bfloat16{});
      return;
    case DType::f16:
      f(__half{});
      return;
    default:
      ZT_FAIL(op, ": storage dtype must be f32, bf16 or f16, got ", dtype_name(dtype));
  }
}

// Calls f(T{}) with T the 16-bit storage type of `dtype` (bf16, f16: the tensor-core kernels); other dtypes
// are an error naming `op`.
template <typename F>
void dispatch_half(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::bf16:
      return f(__nv_bfloat16{});
    case DType::f16:
      return f(__half{});
    default:
      ZT_FAIL(op, ": bf16 or f16 only, got ", dtype_name(dtype));
  }
}

// ---- reductions ----------------------------------------------------------------------------------------

// Butterfly sum over the 32 lanes; every lane gets the total. The order is fixed, so the result is too.
template <typename A>
__device__ __forceinline__ A warp_sum(A x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// ---- launch geometry -----------------------------------------------------------------------------------

constexpr int kThreadsPerBlock = 256;
// Grid-stride kernels cap the grid here: enough blocks to fill an H200 (132 SMs x 8 blocks of 256) many times
// over, and far below the 2^31 - 1 limit of gridDim.x.
constexpr int64_t kMaxBlocks = 65536;

inline unsigned blocks_for(int64_t work_items, int threads = kThreadsPerBlock) {
  const int64_t blocks = (work_items + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

// The current device's figures that launch choices depend on (how many blocks fill the GPU, how much shared
// memory a block may take: 227 KiB opted in on the H100, 228 KiB a multiprocessor, 1 KiB of it kept per
// block by the system); asked of the driver once per (thread, device), since such choices are made on every
// launch.
struct DeviceLaunchLimits {
  int multiprocessors = 0;
  int shared_per_block_optin = 0, shared_per_multiprocessor = 0, shared_reserved_per_block = 0;
};
inline const DeviceLaunchLimits& current_device_limits() {
  thread_local int cached_device = -1;
  thread_local DeviceLaunchLimits limits;
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&limits.multiprocessors, cudaDevAttrMultiProcessorCount, device));
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&limits.shared_per_block_optin,
                                         cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&limits.shared_per_multiprocessor,
                                         cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&limits.shared_reserved_per_block,
                                         cudaDevAttrReservedSharedMemoryPerBlock, device));
    cached_device = device;
  }
  return limits;
}
inline int current_device_multiprocessors() {
  return current_device_limits().multiprocessors;
}

__device__ __forceinline__ int64_t global_thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_thread_count() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---- argument checks -----------------------------------------------------------------------------------

// Throws unless t is defined, of `dtype`, contiguous and in CUDA device memory.
inline void check_cuda_arg(const Tensor& t, DType dtype, const char* op, const char* name) {
  ZT_CHECK(t.defined(), op, ": ", name, " is undefined");
  ZT_CHECK(t.dtype() == dtype, op, ": ", name, " must be ", dtype_name(dtype), ", got ", t.describe());
  ZT_CHECK(t.device() == DeviceKind::cuda, op, ": ", name, " must be a CUDA tensor, got ", t.describe());
  ZT_CHECK(t.is_contiguous(), op, ": ", name, " must be contiguous, got ", t.describe());
}

template <typename T>
T* typed(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace zt::kernels::cuda_detail
