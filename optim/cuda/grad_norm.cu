#include "optim/cuda/grad_norm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"

namespace zt::optim::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kElementsPerThreadTarget = 16;  // pass-1 grid: about n / (256 * 16) blocks ...
constexpr int64_t kMaxPartials = 1024;            // ... but at most this many (pass 2 adds them)

__device__ __forceinline__ float widen(float x) {
  return x;
}
__device__ __forceinline__ float widen(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float widen(__half x) {
  return __half2float(x);
}

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ long long warp_sum(long long x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Block tree: warp butterflies, then thread 0 adds the warp totals in warp order. Valid in thread 0.
__device__ void block_sum(double& sum, long long& count) {
  __shared__ double warp_sums[kWarps];
  __shared__ long long warp_counts[kWarps];
  sum = warp_sum(sum);
  count = warp_sum(count);
  if (threadIdx.x % 32 == 0) {
    warp_sums[threadIdx.x / 32] = sum;
    warp_counts[threadIdx.x / 32] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    sum = 0;
    count = 0;
    for (int w = 0; w < kWarps; ++w) {
      sum += warp_sums[w];
      count += warp_counts[w];
    }
  }
}

// Pass 1: block b writes the sum of squares and the non-finite count of the elements its threads visit
// (thread t of block b: elements b * 256 + t, then every gridDim.x * 256 further).
template <typename T>
__global__ void grad_stats_partials_kernel(const T* x, int64_t n, double* partial_sums,
                                           long long* partial_counts) {
  double sum = 0;
  long long count = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float v = widen(x[i]);
    count += (__float_as_uint(v) & 0x7F800000u) == 0x7F800000u;  // exponent all ones: inf or NaN
    const double d = v;
    sum += d * d;
  }
  block_sum(sum, count);
  if (threadIdx.x == 0) {
    partial_sums[blockIdx.x] = sum;
    partial_counts[blockIdx.x] = count;
  }
}

// Pass 2: one block adds the partials (thread t: partials t, t + 256, ...), then the block tree.
__global__ void grad_stats_finish_kernel(const double* partial_sums, const long long* partial_counts,
                                         int partials, GradStats* result) {
  double sum = 0;
  long long count = 0;
  for (int i = static_cast<int>(threadIdx.x); i < partials; i += kThreads) {
    sum += partial_sums[i];
    count += partial_counts[i];
  }
  block_sum(sum, count);
  if (threadIdx.x == 0) {
    result->sum_of_squares = sum;
    result->non_finite = count;
  }
}

}  // namespace

namespace {
int partials_for(int64_t n) {
  return static_cast<int>(std::clamp<int64_t>(
      (n + kThreads * kElementsPerThreadTarget - 1) / (kThreads * kElementsPerThreadTarget), 1,
      kMaxPartials));
}
}  // namespace

size_t grad_stats_scratch_bytes(int64_t n) {
  return static_cast<size_t>(partials_for(n)) * (sizeof(double) + sizeof(long long));
}

void grad_stats_async(const Tensor& x, GradStats* device_result, cudaStream_t stream, void* scratch) {
  constexpr const char* op = "grad_stats (cuda)";
  ZT_CHECK(x.device() == DeviceKind::cuda && x.is_contiguous(), op,
           ": x must be a contiguous CUDA tensor, got ", x.describe());
  const int64_t n = x.numel();
  const int partials = partials_for(n);
  DeviceBuffer allocated;  // released once queued: ordered by `stream` for the allocating thread's later work
  if (scratch == nullptr) {
    allocated = device_allocator().allocate(grad_stats_scratch_bytes(n), MemoryCategory::scratch,
                                            "grad_stats partials");
    scratch = allocated.data();
  }
  double* sums = static_cast<double*>(scratch);
  long long* counts = reinterpret_cast<long long*>(sums + partials);
  switch (x.dtype()) {
    case DType::f32:
      grad_stats_partials_kernel<<<partials, kThreads, 0, stream>>>(static_cast<const float*>(x.data()), n,
                                                                    sums, counts);
      break;
    case DType::bf16:
      grad_stats_partials_kernel<<<partials, kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(x.data()), n, sums, counts);
      break;
    case DType::f16:
      grad_stats_partials_kernel<<<partials, kThreads, 0, stream>>>(static_cast<const __half*>(x.data()), n,
                                                                    sums, counts);
      break;
    default:
      ZT_FAIL(op, ": x must be f32, bf16 or f16, got ", x.describe());
  }
  ZT_CUDA_CHECK_LAUNCH("grad_stats_partials");
  grad_stats_finish_kernel<<<1, kThreads, 0, stream>>>(sums, counts, partials, device_result);
  ZT_CUDA_CHECK_LAUNCH("grad_stats_finish");
}

GradStats grad_stats(const Tensor& x, cudaStream_t stream) {
  DeviceBuffer result =
      device_allocator().allocate(sizeof(GradStats), MemoryCategory::scratch, "grad_stats result");
  grad_stats_async(x, result.data_as<GradStats>(), stream);
  GradStats host;
  ZT_CUDA_CHECK(cudaMemcpyAsync(&host, result.data(), sizeof(GradStats), cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace zt::optim::gpu
