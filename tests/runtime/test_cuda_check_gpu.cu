// The check macros as kernel launchers use them, compiled by nvcc (so the macros and the runtime headers are
// proven to build in .cu files too).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#include "tests/support/gpu.h"

namespace zt {
namespace {

__global__ void fill_i32_kernel(int* out, int n, int value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

void fill_i32(int* out, int n, int value, int block, cudaStream_t stream) {
  fill_i32_kernel<<<(n + block - 1) / block, block, 0, stream>>>(out, n, value);
  ZT_CUDA_CHECK_LAUNCH();
}

TEST(CudaCheckGpu, GoodLaunchPassesAndBadLaunchIsNamed) {
  ZT_SKIP_WITHOUT_GPU();
  int* d = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&d, 1000 * sizeof(int)));
  Stream s;
  fill_i32(d, 1000, 5, 256, s);
  int back[1000];
  ZT_CUDA_CHECK(cudaMemcpyAsync(back, d, sizeof back, cudaMemcpyDeviceToHost, s));
  s.synchronize();
  EXPECT_EQ(back[999], 5);
  try {
    fill_i32(d, 1000, 5, 4096, s);  // more threads per block than any GPU allows
    FAIL() << "expected a launch error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("CUDA error launching fill_i32"), std::string::npos) << m;  // the launcher's name
    EXPECT_NE(m.find("test_cuda_check_gpu.cu"), std::string::npos) << m;
  }
  ZT_CUDA_CHECK(cudaFree(d));
}

TEST(CudaCheckGpu, SyncDebugModeSynchronizesEachLaunch) {
  ZT_SKIP_WITHOUT_GPU();
  setenv("ZT_SYNC_DEBUG", "1", 1);
  if (!sync_debug_enabled()) GTEST_SKIP() << "ZT_SYNC_DEBUG was read before this test set it";
  int* d = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&d, (1 << 24) * sizeof(int)));
  Stream s;
  fill_i32(d, 1 << 24, 3, 256, s);
  EXPECT_TRUE(s.idle());  // the launch check waited for the kernel
  ZT_CUDA_CHECK(cudaFree(d));
}

}  // namespace
}  // namespace zt
