// runtime/side_stream.h: work queued on the side stream sees what the current stream queued before the fork,
// and the current stream's work after a wait or join sees what the side work wrote; with the side stream
// inactive the work runs at once, in place. 64 MiB copies: long enough that a missing wait shows.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/check.h"
#include "runtime/side_stream.h"
#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#include "tests/support/stream_capture.h"
#endif

namespace zt {
namespace {

TEST(SideStream, InactiveRunsTheWorkAtOnce) {
  SideStream side;
  EXPECT_FALSE(side.active());
  std::vector<int> order;
  side.fork();
  const SideStream::Ticket first = side.run([&] { order.push_back(1); });
  order.push_back(2);
  side.wait(first);
  side.run([&] { order.push_back(3); });
  side.join();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

#ifdef ZT_WITH_CUDA

struct DeviceBuffers {
  static constexpr size_t kBytes = size_t{64} << 20;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  DeviceBuffers() {
    for (void** p : {&a, &b, &c}) ZT_CUDA_CHECK(cudaMalloc(p, kBytes));
  }
  ~DeviceBuffers() {
    for (void* p : {a, b, c}) (void)cudaFree(p);
  }
  std::vector<unsigned char> host(const void* p) const {
    std::vector<unsigned char> out(kBytes);
    ZT_CUDA_CHECK(cudaMemcpy(out.data(), p, kBytes, cudaMemcpyDeviceToHost));
    return out;
  }
};

bool all_equal(const std::vector<unsigned char>& bytes, unsigned char value) {
  for (unsigned char x : bytes)
    if (x != value) return false;
  return true;
}

// main: a = v; side: b = a; main, after the wait: c = b. c == v only if both orderings hold.
void copy_through_the_side(SideStream& side, const DeviceBuffers& d, int value) {
  const size_t n = DeviceBuffers::kBytes;
  ZT_CUDA_CHECK(cudaMemsetAsync(d.a, value, n, current_stream()));
  side.fork();
  const SideStream::Ticket copied = side.run(
      [&] { ZT_CUDA_CHECK(cudaMemcpyAsync(d.b, d.a, n, cudaMemcpyDeviceToDevice, current_stream())); });
  side.wait(copied);
  ZT_CUDA_CHECK(cudaMemcpyAsync(d.c, d.b, n, cudaMemcpyDeviceToDevice, current_stream()));
  side.join();
}

TEST(SideStreamGpu, ForkAndWaitOrderTheTwoStreams) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceBuffers d;
  Stream main_stream;
  StreamScope on_main(main_stream);
  SideStream side = SideStream::on_current_device();
  EXPECT_TRUE(side.active());
  for (int value : {3, 5, 7}) {  // several rounds: events recorded again after each join
    copy_through_the_side(side, d, value);
    main_stream.synchronize();
    EXPECT_TRUE(all_equal(d.host(d.c), static_cast<unsigned char>(value))) << "value " << value;
  }
  EXPECT_THROW(side.wait(0), Error);  // no run since the last join
}

TEST(SideStreamGpu, RunQueuesOnTheSideStreamNotTheCurrentOne) {
  ZT_SKIP_WITHOUT_GPU();
  Stream main_stream;
  StreamScope on_main(main_stream);
  SideStream side = SideStream::on_current_device();
  cudaStream_t inside = nullptr;
  side.run([&] { inside = current_stream(); });
  EXPECT_NE(inside, static_cast<cudaStream_t>(main_stream));
  EXPECT_NE(inside, nullptr);
  EXPECT_EQ(current_stream(), static_cast<cudaStream_t>(main_stream));  // restored after run
  side.join();
}

TEST(SideStreamGpu, CapturesAcrossBothStreams) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceBuffers d;
  test::BlockingStream stream;
  StreamScope on_stream(stream);
  SideStream side = SideStream::on_current_device();
  copy_through_the_side(side, d, 1);  // eager once: the events exist before the capture
  test::CapturedGraph graph(stream, [&] { copy_through_the_side(side, d, 9); });
  ASSERT_TRUE(graph.ok()) << graph.error();
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(d.host(d.c), 1)) << "the capture must not run the work";
  graph.replay(stream);
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_TRUE(all_equal(d.host(d.c), 9));
}

#endif

}  // namespace
}  // namespace zt
