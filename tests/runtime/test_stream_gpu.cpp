#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <cstdlib>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"

namespace zt {
namespace {

TEST(StreamGpu, EventsOrderWorkAcrossStreams) {
  ZT_SKIP_WITHOUT_GPU();
  const size_t n = size_t{64} << 20;  // 64 MiB copies: long enough that ordering matters
  void* a = nullptr;
  void* b = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&a, n));
  ZT_CUDA_CHECK(cudaMalloc(&b, n));
  std::vector<unsigned char> host(n);
  {
    Stream producer, consumer;
    Event ready;
    EXPECT_FALSE(ready.timing_enabled());
    ZT_CUDA_CHECK(cudaMemsetAsync(a, 7, n, producer));
    ready.record(producer);
    consumer.wait(ready);  // without this wait the copy could read a before the memset
    ZT_CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, consumer));
    consumer.synchronize();
    EXPECT_TRUE(consumer.idle());
    EXPECT_TRUE(ready.completed());
  }
  ZT_CUDA_CHECK(cudaMemcpy(host.data(), b, n, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[0], 7);
  EXPECT_EQ(host[n - 1], 7);
  ZT_CUDA_CHECK(cudaFree(a));
  ZT_CUDA_CHECK(cudaFree(b));
}

TEST(StreamGpu, TimingEventsMeasureElapsedTime) {
  ZT_SKIP_WITHOUT_GPU();
  void* a = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&a, size_t{256} << 20));
  Stream s;
  Event start(EventTiming::enabled), stop(EventTiming::enabled), plain;
  start.record(s);
  for (int i = 0; i < 4; ++i) ZT_CUDA_CHECK(cudaMemsetAsync(a, i, size_t{256} << 20, s));
  stop.record(s);
  plain.record(s);
  stop.synchronize();
  EXPECT_GT(Event::elapsed_ms(start, stop), 0.0f);
  EXPECT_THROW(Event::elapsed_ms(start, plain), Error);  // timing is opt-in
  Event never(EventTiming::enabled);
  EXPECT_THROW(Event::elapsed_ms(start, never), Error);
  Stream moved = std::move(s);
  moved.synchronize();
  ZT_CUDA_CHECK(cudaFree(a));
}

TEST(StreamGpu, CheckMacrosThrowWithTheStatementAndLibraryMessage) {
  ZT_SKIP_WITHOUT_GPU();
  try {
    ZT_CUDA_CHECK(cudaSetDevice(9999));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cudaSetDevice(9999)"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaErrorInvalidDevice"), std::string::npos) << m;
    EXPECT_NE(m.find("test_stream_gpu.cpp"), std::string::npos) << m;
  }
  EXPECT_THROW(ZT_CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED), Error);
  (void)cudaGetLastError();
  EXPECT_NO_THROW(ZT_CUDA_CHECK_LAUNCH());
  EXPECT_NO_THROW(ZT_CUDA_CHECK_LAUNCH("named_launch"));
}

}  // namespace
}  // namespace zt

#else
TEST(StreamGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
