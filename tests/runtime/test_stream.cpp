// The calling thread's current stream and the stream retire hooks (runtime/stream.h). Neither touches the
// GPU: the handles below are never dereferenced by CUDA, so this runs on any CUDA build.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cuda_runtime.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "runtime/stream.h"

namespace zt {
namespace {

cudaStream_t fake_stream(uintptr_t id) {
  return reinterpret_cast<cudaStream_t>(id);
}

TEST(StreamScope, DefaultsToTheLegacyStreamAndNests) {
  EXPECT_EQ(current_stream(), nullptr);
  {
    StreamScope outer(fake_stream(0x100));
    EXPECT_EQ(current_stream(), fake_stream(0x100));
    {
      StreamScope inner(fake_stream(0x200));
      EXPECT_EQ(current_stream(), fake_stream(0x200));
      {
        StreamScope legacy(nullptr);  // a scope may return a thread to the legacy stream
        EXPECT_EQ(current_stream(), nullptr);
      }
      EXPECT_EQ(current_stream(), fake_stream(0x200));
    }
    EXPECT_EQ(current_stream(), fake_stream(0x100));
  }
  EXPECT_EQ(current_stream(), nullptr);
}

// Each rank thread sets its own stream; neither sees the other's, and the main thread keeps its own.
TEST(StreamScope, IsPerThread) {
  StreamScope main_scope(fake_stream(0x1));
  std::vector<cudaStream_t> seen_at_start(2), seen_in_scope(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([rank, &seen_at_start, &seen_in_scope] {
      seen_at_start[rank] = current_stream();
      StreamScope mine(fake_stream(0x10 + static_cast<uintptr_t>(rank)));
      for (int i = 0; i < 1000; ++i) std::this_thread::yield();  // overlap with the other rank's scope
      seen_in_scope[rank] = current_stream();
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(seen_at_start[0], nullptr);
  EXPECT_EQ(seen_at_start[1], nullptr);
  EXPECT_EQ(seen_in_scope[0], fake_stream(0x10));
  EXPECT_EQ(seen_in_scope[1], fake_stream(0x11));
  EXPECT_EQ(current_stream(), fake_stream(0x1));
}

std::vector<cudaStream_t>& retired_log() {
  static std::vector<cudaStream_t> log;
  return log;
}
void log_retired(cudaStream_t stream) {
  retired_log().push_back(stream);
}

TEST(StreamRetireHooks, RunOncePerRetiredStreamAndNeverForTheLegacyStream) {
  retired_log().clear();
  add_stream_retire_hook(&log_retired);
  add_stream_retire_hook(&log_retired);  // registering twice must not run it twice
  retire_stream(fake_stream(0x300));
  retire_stream(nullptr);
  ASSERT_EQ(retired_log().size(), 1u);
  EXPECT_EQ(retired_log()[0], fake_stream(0x300));
}

}  // namespace
}  // namespace zt

#else
TEST(StreamScope, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA: there are no streams";
}
#endif
