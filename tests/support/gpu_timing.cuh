// Device-side waits for GPU tests that must prove event ordering: work queued behind these runs late, so a
// reader that does not wait for its event reads stale data.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda_check.h"

namespace zt::test {

__device__ inline uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ inline void sleep_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns) {
  }
}

// Blocks `stream` for `ms` milliseconds of GPU time.
inline void gpu_sleep(cudaStream_t stream, double ms) {
  sleep_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(ms * 1e6));
  ZT_CUDA_CHECK_LAUNCH("gpu_sleep");
}

// Spins until *flag (host memory mapped into the device) becomes non-zero, or `limit_ms` passed, so a test
// can hold a stream for as long as it needs (and a failed test never hangs the GPU for good).
__global__ inline void wait_for_flag_kernel(const volatile int* flag, uint64_t limit_ns) {
  const uint64_t start = global_timer_ns();
  while (*flag == 0 && global_timer_ns() - start < limit_ns) {
  }
}

}  // namespace zt::test
