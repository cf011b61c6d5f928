#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <cstdlib>
#include <vector>

#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"
#include "tests/support/stream_capture.h"

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

// The control for every capture-based test of the current-stream rule: one memset on the legacy stream
// breaks the capture of a blocking stream, while the same memset on current_stream() is captured.
TEST(StreamGpu, CaptureOfABlockingStreamRejectsLegacyStreamWork) {
  ZT_SKIP_WITHOUT_GPU();
  void* buffer = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&buffer, 4096));
  {
    test::BlockingStream stream;
    StreamScope on_stream(stream);
    test::CapturedGraph legacy(stream, [&] { ZT_CUDA_CHECK(cudaMemsetAsync(buffer, 1, 4096, nullptr)); });
    EXPECT_FALSE(legacy.ok());
    test::CapturedGraph current(stream,
                                [&] { ZT_CUDA_CHECK(cudaMemsetAsync(buffer, 1, 4096, current_stream())); });
    EXPECT_TRUE(current.ok()) << current.error();
    EXPECT_EQ(current.node_count(), 1u);
    test::CapturedGraph synchronizing(stream,
                                      [&] { ZT_CUDA_CHECK(cudaStreamSynchronize(current_stream())); });
    EXPECT_FALSE(synchronizing.ok());
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ZT_CUDA_CHECK(cudaFree(buffer));
}

// The last kTailWords int32 of a device buffer of `bytes` bytes: where a fill queued last is checked.
constexpr int64_t kTailWords = 1 << 18;
Tensor tail_of(void* data, size_t bytes) {
  return Tensor(static_cast<char*>(data) + bytes - kTailWords * 4, {kTailWords}, DType::i32,
                DeviceKind::cuda);
}

// copy_tensor reads after the work queued on the thread's current stream, which here is a non-blocking
// stream: a copy on the legacy stream would not wait for it and could read the buffer mid-fill.
TEST(StreamGpu, CopyTensorIsOrderedOnTheCurrentStream) {
  ZT_SKIP_WITHOUT_GPU();
  const size_t n = size_t{256} << 20;  // each fill takes ~0.1 ms on an H200: the copy would overtake them
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  AllocatorScope use_allocator(allocator);
  DeviceBuffer buffer = device_allocator().allocate(n, MemoryCategory::other, "fill target");
  ZT_CUDA_CHECK(cudaMemset(buffer.data(), 0, n));
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<int32_t> tail(kTailWords, -1);
  {
    Stream stream;
    StreamScope on_stream(stream);
    for (int value = 1; value <= 8; ++value) ZT_CUDA_CHECK(cudaMemsetAsync(buffer.data(), value, n, stream));
    copy_tensor(tail_of(buffer.data(), n), Tensor(tail.data(), {kTailWords}, DType::i32));
    EXPECT_TRUE(stream.idle());  // copy_tensor synchronized the current stream
  }
  for (size_t i = 0; i < tail.size(); i += 1024) ASSERT_EQ(tail[i], 0x08080808) << "word " << i;
}

// An arena's zero fill is queued on the current stream, behind work still writing the recycled block it
// reuses (the allocator hands a block back at once; only same-stream order protects it).
TEST(StreamGpu, ArenaZeroFillIsOrderedOnTheCurrentStream) {
  ZT_SKIP_WITHOUT_GPU();
  const size_t n = size_t{256} << 20;
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  AllocatorScope use_allocator(allocator);
  Stream stream;
  StreamScope on_stream(stream);
  void* recycled = nullptr;
  {
    DeviceBuffer earlier = device_allocator().allocate(n, MemoryCategory::activations, "earlier");
    recycled = earlier.data();
    for (int value = 1; value <= 8; ++value) ZT_CUDA_CHECK(cudaMemsetAsync(earlier.data(), value, n, stream));
  }  // released while the fills are still queued
  Arena arena("zeroed", ArenaLayout({{"words", {static_cast<int64_t>(n / 4)}, DType::i32}}),
              {.kind = MemoryKind::device, .category = MemoryCategory::activations, .zero_fill = true});
  ASSERT_EQ(arena.data(), recycled) << "the arena must reuse the cached block for this test to mean anything";
  std::vector<int32_t> tail(kTailWords, -1);
  copy_tensor(tail_of(arena.data(), n), Tensor(tail.data(), {kTailWords}, DType::i32));
  for (size_t i = 0; i < tail.size(); i += 1024) ASSERT_EQ(tail[i], 0) << "word " << i;
}

}  // namespace
}  // namespace zt

#else
TEST(StreamGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
