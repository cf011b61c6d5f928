// Device-side helpers shared by the GEMM-based CUDA kernels (linear, conv1d, disentangled attention):
// storage <-> f32 conversion, the dtype dispatch, scratch buffers and the bias-gradient column sum.
// Internal to kernels/cuda; include only from .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>
#include <utility>

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/grad_write.h"
#include "runtime/check.h"
#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// Storage types: f32, bf16, f16 hold values; arithmetic is always f32 (conversions shared with the pointwise
// kernels, launch_common.cuh).
using cuda_detail::from_float;
using cuda_detail::to_float;

template <typename T>
struct StorageTag {
  using type = T;
};

// Calls f(StorageTag<T>{}) with T the device type of a floating storage dtype (f32, bf16, f16).
template <typename F>
void dispatch_storage(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      std::forward<F>(f)(StorageTag<float>{});
      return;
    case DType::bf16:
      std::forward<F>(f)(StorageTag<__nv_bfloat16>{});
      return;
    case DType::f16:
      std::forward<F>(f)(StorageTag<__half>{});
      return;
    default:
      ZT_FAIL(op, ": unsupported storage dtype ", dtype_name(dtype));
  }
}

inline bool is_storage_dtype(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
}

// Grid size for a 1-D launch over n elements (at least one block so empty launches stay valid).
inline unsigned int blocks_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

// A scratch buffer on the current device from the thread's capped caching allocator (device_allocator(): a
// rank's own under its AllocatorScope; category scratch). Work queued on one stream may use it; release it
// only after that work is queued on the same stream (the allocator's stream rule), which the RAII handle at
// the end of the entry point does.
inline DeviceBuffer scratch_buffer(size_t bytes, std::string_view name) {
  return device_allocator().allocate(bytes, MemoryCategory::scratch, name);
}

// Throws unless t is defined, on the GPU, contiguous and (when dtype is given) of that dtype.
void check_cuda_arg(const Tensor& t, const char* op, const char* name);
void check_cuda_arg(const Tensor& t, DType dtype, const char* op, const char* name);

// out[c] += sum_r x[r, c] for x [rows, cols] of storage `dtype` (GradWrite::overwrite: out[c] = 0 + sum),
// summed in f32 in a fixed order (deterministic: rows cut into at most 64 chunks of >= 128 rows,
// kernels/cuda/column_sum.cuh; chunk partials in scratch, added in chunk order): the bias gradient of
// linear and conv1d.
void column_sum_into(const void* x, DType dtype, int64_t rows, int64_t cols, float* out, GradWrite write,
                     cudaStream_t stream);

// out[c] += sum_k partial[k, c] for partial [chunks, cols] (f32; overwrite: out[c] = 0 + sum): the second
// pass of the chunked column reductions (column_sum_into, the LayerNorm parameter gradients), summed in a
// fixed order.
void add_chunk_partials(const float* partial, int64_t chunks, int64_t cols, float* out, GradWrite write,
                        cudaStream_t stream);

}  // namespace zt::kernels::gpu
