// The caching device allocator: every device allocation in zerotrain goes through one of these.
//
// Why: cudaMalloc/cudaFree are slow and synchronizing, and a training run must fit a memory budget that may
// be smaller than the card (--gpu_memory_limit 24GiB emulates a 24 GB card on an H200). So the allocator
//   - rounds each request up to a size class and, on release, keeps the block in a per-class cache for reuse;
//   - honours a hard cap on *reserved* bytes (in use + cached), because cached blocks occupy device memory;
//   - tracks in-use and peak bytes per category (parameters, gradients, ...) for the memory report;
//   - before failing, returns the cache to the device and retries; a final failure throws an out-of-memory
//     zt::Error naming the allocation (name, category, bytes), the in-use bytes per category, the cached
//     bytes, the cap and the device's free memory.
// The raw memory source is a DeviceMemoryBackend, so all of the above is tested on the CPU with a host
// backend; the CUDA backend (cudaMalloc) is the production one.
//
// Stream safety: a released block is reusable at once. The caller must ensure no queued device work still
// touches it (work on the single compute stream is ordered anyway; buffers shared with copy/communication
// streams must be released only after an event or a synchronize says that work is done).
//
// Ranks sharing a device: N in-process ranks (host threads) on one GPU each construct their own allocator
// (CUDA backend, the rank's own cap) and install it with an AllocatorScope on their thread;
// device_allocator() then returns it, so the arenas, kernel scratch and GEMM workspace of a rank land in its
// allocator, its peak and categories are its own, and scratch one rank releases is never reused by another
// rank's stream while that rank's kernels still run (see runtime/stream.h, the current-stream rule).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

// What an allocation is for; the memory report is broken down by these.
enum class MemoryCategory : uint8_t {
  parameters,
  gradients,
  master,
  optimizer,
  activations,
  scratch,
  communication,
  other
};
constexpr int kMemoryCategoryCount = 8;
std::string_view memory_category_name(MemoryCategory category);

// Where the bytes come from. allocate returns nullptr when the device is out of memory (it throws only for
// errors that are not "out of memory").
class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* ptr, size_t bytes) = 0;
  virtual size_t free_memory() const = 0;                 // what the device reports free right now
  virtual std::string name() const = 0;                   // for messages: "cuda:0", "host"
  virtual bool host_accessible() const { return false; }  // may the CPU dereference its pointers?
};

// Host memory pretending to be a device of `capacity` bytes: the CPU backend and the tests' fake device.
class HostMemoryBackend final : public DeviceMemoryBackend {
 public:
  explicit HostMemoryBackend(size_t capacity = SIZE_MAX);
  ~HostMemoryBackend() override;
  void* allocate(size_t bytes) override;
  void release(void* ptr, size_t bytes) override;
  size_t free_memory() const override;
  std::string name() const override { return "host"; }
  bool host_accessible() const override { return true; }
  size_t allocated_bytes() const;  // currently held from the host (in use + cached by the allocator)
  int64_t allocation_count() const;

 private:
  mutable std::mutex mutex_;
  size_t capacity_;
  size_t allocated_ = 0;
  int64_t allocations_ = 0;
};

// cudaMalloc on `device`. Throws where the build has no CUDA.
std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend(int device);

struct DeviceMemoryStats {
  std::array<size_t, kMemoryCategoryCount> in_use{};  // bytes of live blocks (size-class rounded)
  std::array<size_t, kMemoryCategoryCount> peak{};    // per-category maximum of in_use
  size_t in_use_total = 0;
  size_t peak_in_use_total = 0;
  size_t cached = 0;         // released blocks kept for reuse
  size_t peak_reserved = 0;  // maximum of in_use_total + cached
  size_t cap = 0;
  int64_t allocations = 0;    // allocate() calls that returned memory
  int64_t cache_hits = 0;     // ... of which were served from the cache
  int64_t cache_flushes = 0;  // times the cache was returned to the backend under pressure
  size_t reserved() const { return in_use_total + cached; }
};

class DeviceAllocator;

// Owns one allocation; returns it to the allocator's cache when destroyed or reset. Move-only. The
// allocator must outlive its buffers.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return size_; }              // bytes requested
  size_t block_size() const { return block_size_; }  // bytes reserved (size class)
  MemoryCategory category() const { return category_; }
  explicit operator bool() const { return data_ != nullptr; }
  void reset();  // release now

 private:
  friend class DeviceAllocator;
  DeviceAllocator* owner_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t block_size_ = 0;
  MemoryCategory category_ = MemoryCategory::other;
};

class DeviceAllocator {
 public:
  static constexpr size_t kNoLimit = SIZE_MAX;

  explicit DeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend, size_t cap = kNoLimit);
  ~DeviceAllocator();  // returns the cache to the backend; live buffers at this point are a bug (logged)
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A zero-byte request returns an empty buffer. Throws the out-of-memory zt::Error described above.
  DeviceBuffer allocate(size_t bytes, MemoryCategory category, std::string_view name);

  void empty_cache();  // returns every cached block to the backend
  void set_cap(size_t cap_bytes);
  size_t cap() const;
  DeviceMemoryStats stats() const;
  void reset_peaks();          // peaks restart from the current in-use values
  std::string report() const;  // multi-line table: per category in use / peak, cached, cap
  const DeviceMemoryBackend& backend() const { return *backend_; }

  // Requests are rounded up to a multiple of max(512, 2^floor(log2(bytes)) / 16) bytes: at most ~6% waste,
  // and 16 size classes per power of two so released blocks are found again.
  static size_t size_class(size_t bytes);

 private:
  friend class DeviceBuffer;
  void release(void* ptr, size_t block_size, MemoryCategory category);
  void flush_cache_locked();
  [[noreturn]] void throw_out_of_memory_locked(size_t bytes, size_t block, MemoryCategory category,
                                               std::string_view name, std::string_view reason) const;
  std::string report_locked() const;

  mutable std::mutex mutex_;
  std::unique_ptr<DeviceMemoryBackend> backend_;
  std::multimap<size_t, void*> cache_;  // block size -> cached block
  DeviceMemoryStats stats_;
};

// The allocator this thread allocates device memory from: the innermost AllocatorScope's when one is active
// on the thread and `device` is the current device (device < 0 means the current device), else the
// process-wide allocator of `device`. Every device allocation in zerotrain asks here.
DeviceAllocator& device_allocator(int device = -1);
// Process-wide allocators, one per CUDA device (device < 0: the current device), created on first use with
// the CUDA backend and the limit set below. Never destroyed (device memory is reclaimed at process exit).
// Caches shared by every thread for the whole process (attention index tables) allocate here directly: a
// rank's scoped allocator may be destroyed before they are.
DeviceAllocator& process_device_allocator(int device = -1);
// Caps every process-wide device allocator, present and future (DeviceAllocator::kNoLimit: none).
// --gpu_memory_limit. Scoped per-rank allocators keep the cap they were constructed with.
void set_device_memory_limit(size_t cap_bytes);

// Makes device_allocator() return `allocator` on this thread (for the current device) until the scope ends,
// then restores the previous choice; scopes nest. The allocator must outlive the scope and everything
// allocated under it, including per-stream caches filled under it (destroy the rank's Streams first).
//
//   DeviceAllocator mine(make_cuda_memory_backend(0), rank_cap);
//   AllocatorScope use_mine(mine);
//   Stream compute;                       // destroyed before `mine`: its GEMM workspace came from `mine`
//   StreamScope on_compute(compute);
class AllocatorScope {
 public:
  explicit AllocatorScope(DeviceAllocator& allocator);
  ~AllocatorScope();
  AllocatorScope(const AllocatorScope&) = delete;
  AllocatorScope& operator=(const AllocatorScope&) = delete;

 private:
  DeviceAllocator* previous_;
};

}  // namespace zt
