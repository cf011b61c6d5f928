#include "runtime/device_allocator.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace zt {

std::string_view memory_category_name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::master:
      return "master";
    case MemoryCategory::optimizer:
      return "optimizer";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::scratch:
      return "scratch";
    case MemoryCategory::communication:
      return "communication";
    case MemoryCategory::other:
      return "other";
  }
  return "?";
}

// ---- HostMemoryBackend ----

HostMemoryBackend::HostMemoryBackend(size_t capacity) : capacity_(capacity) {}

HostMemoryBackend::~HostMemoryBackend() {
  if (allocated_ != 0) {
    ZT_LOG(error) << "host memory backend destroyed with " << allocated_ << " bytes held";
  }
}

void* HostMemoryBackend::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes > capacity_ - allocated_) return nullptr;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return nullptr;
  allocated_ += bytes;
  ++allocations_;
  return p;
}

void HostMemoryBackend::release(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  ZT_CHECK(bytes <= allocated_, "host backend: releasing ", bytes, " bytes but only ", allocated_, " held");
  allocated_ -= bytes;
  std::free(ptr);
}

size_t HostMemoryBackend::free_memory() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return capacity_ - allocated_;
}

size_t HostMemoryBackend::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocated_;
}

int64_t HostMemoryBackend::allocation_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

#ifndef ZT_WITH_CUDA
std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend(int device) {
  ZT_FAIL("cannot allocate on cuda:", device, ": zerotrain was built without CUDA");
}
#endif

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : owner_(other.owner_),
      data_(other.data_),
      size_(other.size_),
      block_size_(other.block_size_),
      category_(other.category_) {
  other.owner_ = nullptr;
  other.data_ = nullptr;
  other.size_ = other.block_size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = other.owner_;
    data_ = other.data_;
    size_ = other.size_;
    block_size_ = other.block_size_;
    category_ = other.category_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.size_ = other.block_size_ = 0;
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (owner_ != nullptr && data_ != nullptr) owner_->release(data_, block_size_, category_);
  owner_ = nullptr;
  data_ = nullptr;
  size_ = block_size_ = 0;
}

// ---- DeviceAllocator ----

DeviceAllocator::DeviceAllocator(std::unique_ptr<DeviceMemoryBackend> backend, size_t cap)
    : backend_(std::move(backend)) {
  ZT_CHECK(backend_ != nullptr, "device allocator needs a backend");
  stats_.cap = cap;
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_cache_locked();
  if (stats_.in_use_total != 0) {
    ZT_LOG(error) << "device allocator (" << backend_->name() << ") destroyed with "
                  << format_memory_size(stats_.in_use_total) << " still in use";
  }
}

size_t DeviceAllocator::size_class(size_t bytes) {
  if (bytes == 0) return 0;
  size_t granule = std::max<size_t>(512, std::bit_floor(bytes) / 16);
  return (bytes + granule - 1) / granule * granule;
}

DeviceBuffer DeviceAllocator::allocate(size_t bytes, MemoryCategory category, std::string_view name) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  const size_t block = size_class(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  void* ptr = nullptr;
  bool from_cache = false;
  if (auto it = cache_.find(block); it != cache_.end()) {
    ptr = it->second;
    cache_.erase(it);
    stats_.cached -= block;
    from_cache = true;
  } else {
    if (stats_.in_use_total + block > stats_.cap)
      throw_out_of_memory_locked(bytes, block, category, name, "the memory cap would be exceeded");
    if (stats_.reserved() + block > stats_.cap) {  // cached blocks of other sizes are in the way
      flush_cache_locked();
    }
    ptr = backend_->allocate(block);
    if (ptr == nullptr && !cache_.empty()) {  // the device itself is full: give back the cache and retry
      flush_cache_locked();
      ptr = backend_->allocate(block);
    }
    if (ptr == nullptr)
      throw_out_of_memory_locked(bytes, block, category, name, "the device is out of memory");
  }

  const auto c = static_cast<size_t>(category);
  stats_.in_use[c] += block;
  stats_.peak[c] = std::max(stats_.peak[c], stats_.in_use[c]);
  stats_.in_use_total += block;
  stats_.peak_in_use_total = std::max(stats_.peak_in_use_total, stats_.in_use_total);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved());
  ++stats_.allocations;
  if (from_cache) ++stats_.cache_hits;

  buffer.owner_ = this;
  buffer.data_ = ptr;
  buffer.size_ = bytes;
  buffer.block_size_ = block;
  buffer.category_ = category;
  return buffer;
}

void DeviceAllocator::release(void* ptr, size_t block_size, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto c = static_cast<size_t>(category);
  stats_.in_use[c] -= block_size;
  stats_.in_use_total -= block_size;
  if (stats_.reserved() + block_size > stats_.cap) {  // the cap was lowered meanwhile: do not cache
    backend_->release(ptr, block_size);
    return;
  }
  cache_.emplace(block_size, ptr);
  stats_.cached += block_size;
}

void DeviceAllocator::flush_cache_locked() {
  if (cache_.empty()) return;
  for (auto& [size, ptr] : cache_) backend_->release(ptr, size);
  cache_.clear();
  stats_.cached = 0;
  ++stats_.cache_flushes;
}

void DeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_cache_locked();
}

void DeviceAllocator::set_cap(size_t cap_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.cap = cap_bytes;
  if (stats_.reserved() > cap_bytes) flush_cache_locked();
}

size_t DeviceAllocator::cap() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.cap;
}

DeviceMemoryStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.in_use;
  stats_.peak_in_use_total = stats_.in_use_total;
  stats_.peak_reserved = stats_.reserved();
}

std::string DeviceAllocator::report() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return report_locked();
}

std::string DeviceAllocator::report_locked() const {
  std::ostringstream out;
  out << "device memory (" << backend_->name() << "), in use / peak per category:\n";
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    if (stats_.in_use[c] == 0 && stats_.peak[c] == 0) continue;
    out << "  " << std::left << std::setw(14) << memory_category_name(static_cast<MemoryCategory>(c))
        << std::right << std::setw(12) << format_memory_size(stats_.in_use[c]) << " / "
        << format_memory_size(stats_.peak[c]) << "\n";
  }
  out << "  total in use " << format_memory_size(stats_.in_use_total) << " (peak "
      << format_memory_size(stats_.peak_in_use_total) << "), cached " << format_memory_size(stats_.cached)
      << ", cap " << (stats_.cap == kNoLimit ? std::string("none") : format_memory_size(stats_.cap));
  return out.str();
}

void DeviceAllocator::throw_out_of_memory_locked(size_t bytes, size_t block, MemoryCategory category,
                                                 std::string_view name, std::string_view reason) const {
  size_t device_free = 0;
  std::string device_free_text;
  try {
    device_free = backend_->free_memory();
    device_free_text = format_memory_size(device_free);
  } catch (const Error&) {
    device_free_text = "unknown";
  }
  throw Error(str("out of device memory allocating '", name, "' (", memory_category_name(category), ", ",
                  format_memory_size(bytes), ", block ", format_memory_size(block), "): ", reason,
                  "; device free memory ", device_free_text, "\n", report_locked(),
                  "\n  hint: lower the batch size or use a higher ZeRO stage"));
}

// ---- process-wide allocators ----

namespace {
std::mutex g_allocators_mutex;
size_t g_memory_limit = DeviceAllocator::kNoLimit;
std::vector<DeviceAllocator*> g_allocators;  // index = device; leaked on purpose (see header)
thread_local DeviceAllocator* t_scoped_allocator = nullptr;

// Whether `device` names the device this thread works on. Without CUDA (or without a GPU) there is only
// the one fake device of the scoped allocator.
bool is_current_device(int device) {
  if (device < 0) return true;
#ifdef ZT_WITH_CUDA
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess) return device == current;
  (void)cudaGetLastError();
#endif
  return true;
}

}  // namespace

AllocatorScope::AllocatorScope(DeviceAllocator& allocator) : previous_(t_scoped_allocator) {
  t_scoped_allocator = &allocator;
}

AllocatorScope::~AllocatorScope() {
  t_scoped_allocator = previous_;
}

DeviceAllocator& device_allocator(int device) {
  if (t_scoped_allocator != nullptr && is_current_device(device)) return *t_scoped_allocator;
  return process_device_allocator(device);
}

DeviceAllocator& process_device_allocator(int device) {
#ifdef ZT_WITH_CUDA
  if (device < 0) {
    ZT_CHECK(cudaGetDevice(&device) == cudaSuccess, "cannot query the current CUDA device");
  }
#endif
  ZT_CHECK(device >= 0,
           "device_allocator: no current device in a build without CUDA (install an "
           "AllocatorScope for a fake device)");
  std::lock_guard<std::mutex> lock(g_allocators_mutex);
  if (g_allocators.size() <= static_cast<size_t>(device)) g_allocators.resize(device + 1, nullptr);
  if (g_allocators[device] == nullptr)
    g_allocators[device] = new DeviceAllocator(make_cuda_memory_backend(device), g_memory_limit);
  return *g_allocators[device];
}

void set_device_memory_limit(size_t cap_bytes) {
  std::lock_guard<std::mutex> lock(g_allocators_mutex);
  g_memory_limit = cap_bytes;
  for (DeviceAllocator* a : g_allocators)
    if (a != nullptr) a->set_cap(cap_bytes);
}

}  // namespace zt
