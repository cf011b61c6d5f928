// The caching allocator over real cudaMalloc (the CPU test covers the logic with a fake backend).
#include <gtest/gtest.h>

#include "runtime/check.h"
#include "runtime/device_allocator.h"
#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <vector>

#include "runtime/arena.h"
#include "runtime/cuda_check.h"

namespace zt {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(DeviceAllocatorGpu, AllocatesUsableDeviceMemoryAndReusesIt) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  std::vector<int> host(1000);
  for (int i = 0; i < 1000; ++i) host[i] = i * 3;
  void* first = nullptr;
  {
    DeviceBuffer b = allocator.allocate(host.size() * sizeof(int), MemoryCategory::scratch, "roundtrip");
    first = b.data();
    cudaPointerAttributes attributes{};
    ZT_CUDA_CHECK(cudaPointerGetAttributes(&attributes, b.data()));
    EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    ZT_CUDA_CHECK(cudaMemcpy(b.data(), host.data(), b.size(), cudaMemcpyHostToDevice));
    std::vector<int> back(host.size());
    ZT_CUDA_CHECK(cudaMemcpy(back.data(), b.data(), b.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(back, host);
  }
  DeviceBuffer again = allocator.allocate(3900, MemoryCategory::scratch, "again");  // same size class
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(allocator.stats().cache_hits, 1);
}

TEST(DeviceAllocatorGpu, CapEmulatesASmallerCardAndOomReportsDeviceFreeMemory) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceAllocator allocator(make_cuda_memory_backend(0), 64 * kMiB);
  DeviceBuffer a = allocator.allocate(48 * kMiB, MemoryCategory::parameters, "parameters");
  try {
    DeviceBuffer b = allocator.allocate(32 * kMiB, MemoryCategory::optimizer, "adam v");
    FAIL() << "expected out of memory under a 64 MiB cap";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("adam v"), std::string::npos) << m;
    EXPECT_NE(m.find("cap 64 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("device free memory"), std::string::npos) << m;
    EXPECT_EQ(m.find("device free memory unknown"), std::string::npos) << m;
  }
  EXPECT_GT(allocator.backend().free_memory(), 0u);
}

TEST(DeviceAllocatorGpu, RealDeviceExhaustionIsAnErrorNotACrash) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  size_t free_bytes = allocator.backend().free_memory();
  EXPECT_THROW(allocator.allocate(free_bytes + (size_t{64} << 30), MemoryCategory::activations, "too big"),
               Error);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed cudaMalloc left no sticky error behind
  DeviceBuffer ok = allocator.allocate(kMiB, MemoryCategory::activations, "fits");
  EXPECT_TRUE(ok);
}

TEST(DeviceAllocatorGpu, ProcessWideAllocatorBacksDeviceArenas) {
  ZT_SKIP_WITHOUT_GPU();
  ZT_CUDA_CHECK(cudaSetDevice(0));
  DeviceAllocator& global = device_allocator();
  const size_t before = global.stats().in_use[static_cast<size_t>(MemoryCategory::master)];
  {
    Arena master("master", ArenaLayout({{"w", {256, 256}, DType::f32}}),
                 {.kind = MemoryKind::device, .category = MemoryCategory::master, .zero_fill = true});
    EXPECT_EQ(global.stats().in_use[static_cast<size_t>(MemoryCategory::master)] - before,
              DeviceAllocator::size_class(256 * 256 * 4));
    std::vector<float> back(256 * 256, 1.0f);
    ZT_CUDA_CHECK(
        cudaMemcpy(back.data(), master.tensor("w").data(), back.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(back[12345], 0.0f);
    Arena pinned("staging", ArenaLayout({{"w", {256}, DType::bf16}}), {.kind = MemoryKind::pinned_host});
    EXPECT_TRUE(pinned.pinned());
  }
  EXPECT_EQ(global.stats().in_use[static_cast<size_t>(MemoryCategory::master)], before);
}

}  // namespace
}  // namespace zt

#else
TEST(DeviceAllocatorGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
