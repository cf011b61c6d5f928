// The caching, cap and accounting logic of DeviceAllocator, run on the CPU through HostMemoryBackend.
#include <gtest/gtest.h>

#include <barrier>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/device_allocator.h"

namespace zt {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// An allocator over a fake device, keeping a pointer to the backend to observe what reaches it.
struct FakeDevice {
  explicit FakeDevice(size_t device_bytes = SIZE_MAX, size_t cap = DeviceAllocator::kNoLimit) {
    auto b = std::make_unique<HostMemoryBackend>(device_bytes);
    backend = b.get();
    allocator = std::make_unique<DeviceAllocator>(std::move(b), cap);
  }
  HostMemoryBackend* backend;
  std::unique_ptr<DeviceAllocator> allocator;
};

TEST(DeviceAllocator, SizeClassesBoundWasteAndAreMonotone) {
  EXPECT_EQ(DeviceAllocator::size_class(0), 0u);
  EXPECT_EQ(DeviceAllocator::size_class(1), 512u);
  EXPECT_EQ(DeviceAllocator::size_class(512), 512u);
  EXPECT_EQ(DeviceAllocator::size_class(513), 1024u);
  EXPECT_EQ(DeviceAllocator::size_class(kMiB), kMiB);
  EXPECT_EQ(DeviceAllocator::size_class(kMiB + 1), kMiB + kMiB / 16);
  size_t previous = 0;
  for (size_t bytes = 1; bytes < (size_t{1} << 34); bytes = bytes * 3 / 2 + 7) {
    size_t c = DeviceAllocator::size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_LE(c - bytes, std::max<size_t>(511, bytes / 16)) << bytes;
    EXPECT_EQ(c % 512, 0u);
    EXPECT_GE(c, previous);
    previous = c;
  }
}

TEST(DeviceAllocator, ReusesReleasedBlocksOfTheSameClass) {
  FakeDevice d;
  void* first = nullptr;
  {
    DeviceBuffer a = d.allocator->allocate(3 * kMiB, MemoryCategory::activations, "a");
    first = a.data();
    EXPECT_EQ(a.size(), 3 * kMiB);
    EXPECT_EQ(d.allocator->stats().in_use_total, 3 * kMiB);
  }
  EXPECT_EQ(d.allocator->stats().in_use_total, 0u);
  EXPECT_EQ(d.allocator->stats().cached, 3 * kMiB);
  DeviceBuffer b = d.allocator->allocate(3 * kMiB - 100, MemoryCategory::scratch, "b");  // same class
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(d.backend->allocation_count(), 1);
  DeviceMemoryStats s = d.allocator->stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.cached, 0u);
  DeviceBuffer c = d.allocator->allocate(5 * kMiB, MemoryCategory::scratch, "c");  // another class: new block
  EXPECT_EQ(d.backend->allocation_count(), 2);
}

TEST(DeviceAllocator, TracksInUseAndPeakPerCategory) {
  FakeDevice d;
  auto p = d.allocator->allocate(4 * kMiB, MemoryCategory::parameters, "params");
  {
    auto g1 = d.allocator->allocate(2 * kMiB, MemoryCategory::gradients, "g1");
    auto g2 = d.allocator->allocate(2 * kMiB, MemoryCategory::gradients, "g2");
  }
  auto g3 = d.allocator->allocate(kMiB, MemoryCategory::gradients, "g3");
  DeviceMemoryStats s = d.allocator->stats();
  auto at = [](const auto& array, MemoryCategory c) { return array[static_cast<size_t>(c)]; };
  EXPECT_EQ(at(s.in_use, MemoryCategory::parameters), 4 * kMiB);
  EXPECT_EQ(at(s.in_use, MemoryCategory::gradients), kMiB);
  EXPECT_EQ(at(s.peak, MemoryCategory::gradients), 4 * kMiB);
  EXPECT_EQ(at(s.in_use, MemoryCategory::optimizer), 0u);
  EXPECT_EQ(s.in_use_total, 5 * kMiB);
  EXPECT_EQ(s.peak_in_use_total, 8 * kMiB);
  EXPECT_EQ(s.cached, 4 * kMiB);
  d.allocator->reset_peaks();
  EXPECT_EQ(at(d.allocator->stats().peak, MemoryCategory::gradients), kMiB);
  std::string report = d.allocator->report();
  EXPECT_NE(report.find("parameters"), std::string::npos) << report;
  EXPECT_NE(report.find("gradients"), std::string::npos) << report;
  EXPECT_EQ(report.find("optimizer"), std::string::npos) << report;  // unused categories are left out
}

TEST(DeviceAllocator, CapCountsCachedBlocksAndFlushesThemBeforeFailing) {
  FakeDevice d(SIZE_MAX, 10 * kMiB);
  { auto a = d.allocator->allocate(6 * kMiB, MemoryCategory::activations, "a"); }
  EXPECT_EQ(d.allocator->stats().cached, 6 * kMiB);
  // 6 MiB cached + 8 MiB new would exceed the cap: the cache is returned to the device, then it fits.
  auto b = d.allocator->allocate(8 * kMiB, MemoryCategory::activations, "b");
  DeviceMemoryStats s = d.allocator->stats();
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.cache_flushes, 1);
  EXPECT_EQ(d.backend->allocated_bytes(), 8 * kMiB);
  EXPECT_LE(s.peak_reserved, 10 * kMiB);
}

TEST(DeviceAllocator, OutOfMemoryUnderTheCapSaysWhatAndHowMuch) {
  FakeDevice d(SIZE_MAX, 24 * kMiB);
  auto p = d.allocator->allocate(16 * kMiB, MemoryCategory::parameters, "parameters");
  auto o = d.allocator->allocate(6 * kMiB, MemoryCategory::optimizer, "adam m");
  try {
    auto x = d.allocator->allocate(4 * kMiB, MemoryCategory::activations, "layer 3 attention scores");
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* part :
         {"out of device memory", "layer 3 attention scores", "activations", "4 MiB", "parameters", "16 MiB",
          "optimizer", "6 MiB", "cached", "cap 24 MiB", "device free memory"})
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in:\n" << m;
  }
  EXPECT_EQ(d.allocator->stats().in_use_total, 22 * kMiB);  // a failed allocation changes nothing
}

TEST(DeviceAllocator, DeviceFullReleasesCacheAndRetries) {
  FakeDevice d(10 * kMiB);  // a 10 MiB device, no cap
  { auto a = d.allocator->allocate(6 * kMiB, MemoryCategory::scratch, "a"); }
  auto b = d.allocator->allocate(7 * kMiB, MemoryCategory::scratch, "b");  // fits only after the flush
  EXPECT_TRUE(b);
  EXPECT_EQ(d.allocator->stats().cache_flushes, 1);
  try {
    auto c = d.allocator->allocate(4 * kMiB, MemoryCategory::communication, "bucket 0");
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the device is out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("bucket 0"), std::string::npos) << m;
    EXPECT_NE(m.find("device free memory 3 MiB"), std::string::npos) << m;  // 10 - 7
  }
}

TEST(DeviceAllocator, LoweringTheCapDropsTheCache) {
  FakeDevice d;
  { auto a = d.allocator->allocate(4 * kMiB, MemoryCategory::other, "a"); }
  d.allocator->set_cap(2 * kMiB);
  EXPECT_EQ(d.allocator->stats().cached, 0u);
  EXPECT_EQ(d.backend->allocated_bytes(), 0u);
  EXPECT_THROW(d.allocator->allocate(3 * kMiB, MemoryCategory::other, "b"), Error);
}

TEST(DeviceAllocator, BuffersMoveAndResetExactlyOnce) {
  FakeDevice d;
  DeviceBuffer a = d.allocator->allocate(1000, MemoryCategory::scratch, "a");
  DeviceBuffer b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from buffers are empty by contract
  EXPECT_TRUE(b);
  DeviceBuffer c;
  c = std::move(b);
  EXPECT_EQ(d.allocator->stats().in_use_total, 1024u);
  c.reset();
  c.reset();
  EXPECT_EQ(d.allocator->stats().in_use_total, 0u);
  EXPECT_FALSE(d.allocator->allocate(0, MemoryCategory::scratch, "empty"));
  EXPECT_EQ(d.allocator->stats().allocations, 1);
}

TEST(DeviceAllocator, ThreadsShareOneAllocatorSafely) {
  FakeDevice d(SIZE_MAX, 64 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto b = d.allocator->allocate((i % 7 + 1) * 4096 + t, MemoryCategory::scratch, "worker");
        static_cast<char*>(b.data())[0] = 1;
      }
    });
  }
  for (auto& th : threads) th.join();
  DeviceMemoryStats s = d.allocator->stats();
  EXPECT_EQ(s.in_use_total, 0u);
  EXPECT_EQ(s.allocations, 2000);
  EXPECT_EQ(s.cached, d.backend->allocated_bytes());
  d.allocator->empty_cache();
  EXPECT_EQ(d.backend->allocated_bytes(), 0u);
}

// The allocator device_allocator() gives this thread, or nullptr where it has none to give (no scope, and
// no CUDA device for a process-wide one: CPU builds, machines without a GPU).
const DeviceAllocator* allocator_or_null() {
  try {
    return &device_allocator();
  } catch (const Error&) {
    return nullptr;
  }
}

TEST(AllocatorScope, NestsAndRestoresThePreviousChoice) {
  FakeDevice a, b;
  const DeviceAllocator* before = allocator_or_null();
  {
    AllocatorScope use_a(*a.allocator);
    EXPECT_EQ(&device_allocator(), a.allocator.get());
    EXPECT_EQ(&device_allocator(0), a.allocator.get());  // device 0 is the current device (or the fake one)
    {
      AllocatorScope use_b(*b.allocator);
      EXPECT_EQ(&device_allocator(), b.allocator.get());
    }
    EXPECT_EQ(&device_allocator(), a.allocator.get());
    // Process-wide caches bypass the scope: whatever process_device_allocator() is, it is not `a`.
    try {
      EXPECT_NE(&process_device_allocator(), a.allocator.get());
    } catch (const Error&) {
      // no CUDA device: there is no process-wide allocator to return
    }
  }
  EXPECT_EQ(allocator_or_null(), before);
}

// Two ranks on one device, each with its own allocator and cap: what each allocates (arenas, scratch) lands
// in its own allocator, so peaks, categories and the cap are per rank.
TEST(AllocatorScope, GivesEachThreadItsOwnAllocatorAndStats) {
  FakeDevice rank_device[2] = {FakeDevice(SIZE_MAX, 64 * kMiB), FakeDevice(SIZE_MAX, 64 * kMiB)};
  const size_t activations[2] = {3 * kMiB, 5 * kMiB};
  const size_t scratch[2] = {kMiB, 2 * kMiB};
  std::barrier both_allocated(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      AllocatorScope mine(*rank_device[rank].allocator);
      Arena acts("activations",
                 ArenaLayout({{"h", {static_cast<int64_t>(activations[rank] / 4)}, DType::f32}}),
                 {.kind = MemoryKind::device, .category = MemoryCategory::activations, .zero_fill = true});
      DeviceBuffer tmp = device_allocator().allocate(scratch[rank], MemoryCategory::scratch, "rank scratch");
      both_allocated.arrive_and_wait();  // both ranks hold their memory at once
      EXPECT_EQ(device_allocator().stats().in_use_total, activations[rank] + scratch[rank]);
      both_allocated.arrive_and_wait();  // neither releases before the other has looked
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    const DeviceMemoryStats s = rank_device[rank].allocator->stats();
    EXPECT_EQ(s.in_use_total, 0u) << "rank " << rank;
    EXPECT_EQ(s.peak[static_cast<size_t>(MemoryCategory::activations)], activations[rank]) << "rank " << rank;
    EXPECT_EQ(s.peak[static_cast<size_t>(MemoryCategory::scratch)], scratch[rank]) << "rank " << rank;
    EXPECT_EQ(s.peak_in_use_total, activations[rank] + scratch[rank]) << "rank " << rank;
    EXPECT_EQ(s.allocations, 2) << "rank " << rank;
  }
}

TEST(AllocatorScope, EnforcesTheRanksOwnCap) {
  FakeDevice small(SIZE_MAX, 4 * kMiB), large(SIZE_MAX, 64 * kMiB);
  {
    AllocatorScope use_small(*small.allocator);
    EXPECT_THROW(device_allocator().allocate(8 * kMiB, MemoryCategory::activations, "too big"), Error);
  }
  AllocatorScope use_large(*large.allocator);
  EXPECT_TRUE(device_allocator().allocate(8 * kMiB, MemoryCategory::activations, "fits"));
}

}  // namespace
}  // namespace zt
