#include "runtime/arena.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <utility>

#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/stream.h"
#endif

namespace zt {

namespace {
size_t round_up(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}
}  // namespace

std::string_view memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::host:
      return "host";
    case MemoryKind::pinned_host:
      return "pinned host";
    case MemoryKind::device:
      return "device";
  }
  return "?";
}

// ---- ArenaLayout ----

ArenaLayout::ArenaLayout(size_t alignment) : alignment_(alignment) {
  ZT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
           "arena alignment must be a power of two, got ", alignment);
}

ArenaLayout::ArenaLayout(std::span<const TensorSpec> specs, size_t alignment) : ArenaLayout(alignment) {
  for (const TensorSpec& spec : specs) add(spec);
}

ArenaLayout::ArenaLayout(std::initializer_list<TensorSpec> specs, size_t alignment)
    : ArenaLayout(std::span<const TensorSpec>(specs.begin(), specs.size()), alignment) {}

const ArenaSlot& ArenaLayout::add(const TensorSpec& spec) {
  ZT_CHECK(!spec.name.empty(), "arena tensor needs a name");
  ZT_CHECK(!index_.contains(spec.name), "duplicate arena tensor name '", spec.name, "'");
  for (int i = 0; i < spec.shape.rank; ++i)
    ZT_CHECK(spec.shape[i] >= 0, "arena tensor '", spec.name, "' has a negative dimension ",
             spec.shape.to_string());
  ArenaSlot slot;
  slot.name = spec.name;
  slot.shape = spec.shape;
  slot.dtype = spec.dtype;
  slot.offset = round_up(used_bytes(), alignment_);
  slot.nbytes = static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
  index_.emplace(spec.name, slots_.size());
  slots_.push_back(std::move(slot));
  return slots_.back();
}

void ArenaLayout::set_shard_count(int count) {
  ZT_CHECK(count >= 1, "shard count must be at least 1, got ", count);
  shard_count_ = count;
}

bool ArenaLayout::contains(std::string_view name) const {
  return index_.contains(std::string(name));
}

const ArenaSlot& ArenaLayout::slot(std::string_view name) const {
  auto it = index_.find(std::string(name));
  ZT_CHECK(it != index_.end(), "no tensor named '", name, "' in this arena layout (", slots_.size(),
           " tensors)");
  return slots_[it->second];
}

size_t ArenaLayout::used_bytes() const {
  return std::max(reserved_, slots_.empty() ? size_t{0} : slots_.back().end());
}

void ArenaLayout::pad_to_multiple(size_t bytes) {
  ZT_CHECK(bytes > 0 && bytes % alignment_ == 0, "arena padding must be a multiple of the alignment ",
           alignment_, ", got ", bytes);
  reserved_ = round_up(used_bytes(), bytes);
}

size_t ArenaLayout::total_bytes() const {
  return round_up(used_bytes(), alignment_ * static_cast<size_t>(shard_count_));
}

size_t ArenaLayout::shard_offset(int rank) const {
  ZT_CHECK(rank >= 0 && rank < shard_count_, "shard rank ", rank, " out of range [0, ", shard_count_, ")");
  return static_cast<size_t>(rank) * shard_bytes();
}

std::string ArenaLayout::describe(std::string_view title) const {
  std::ostringstream out;
  out << title << ": " << slots_.size() << " tensors, " << format_memory_size(total_bytes());
  if (shard_count_ > 1) out << " in " << shard_count_ << " shards of " << format_memory_size(shard_bytes());
  out << "\n";
  for (const ArenaSlot& s : slots_) {
    out << "  " << std::left << std::setw(56) << s.name << " " << std::setw(5) << dtype_name(s.dtype) << " "
        << std::setw(20) << s.shape.to_string() << std::right << " @" << std::setw(12) << s.offset << " "
        << format_memory_size(s.nbytes) << "\n";
  }
  return out.str();
}

// ---- Arena ----

Arena::Arena(std::string name, ArenaLayout layout, ArenaOptions options)
    : name_(std::move(name)), layout_(std::move(layout)), options_(options) {
  const size_t bytes = layout_.total_bytes();
  if (bytes == 0) return;
  bool host_accessible = true;
  switch (options_.kind) {
    case MemoryKind::host:
      data_ = std::aligned_alloc(layout_.alignment(), bytes);  // bytes is a multiple of the alignment
      ZT_CHECK(data_ != nullptr, "cannot allocate ", format_memory_size(bytes), " of host memory for arena '",
               name_, "'");
      break;
    case MemoryKind::pinned_host:
#ifdef ZT_WITH_CUDA
      if (cuda_available()) {
        cudaError_t status = cudaHostAlloc(&data_, bytes, cudaHostAllocPortable);
        if (status == cudaSuccess) {
          pinned_ = true;
          break;
        }
        (void)cudaGetLastError();
        data_ = nullptr;
        ZT_LOG(warn) << "cannot pin " << format_memory_size(bytes) << " for arena '" << name_ << "' ("
                     << cudaGetErrorString(status)
                     << "; check `ulimit -l` and free host memory): using pageable memory, host<->device "
                        "copies will be slower";
      }
#endif
      if (!pinned_) {
        static std::atomic<bool> told{false};
        if (!cuda_available() && !told.exchange(true)) {
          ZT_LOG(info) << "no GPU: pinned host arenas (first: '" << name_ << "') use plain host memory";
        }
        data_ = std::aligned_alloc(layout_.alignment(), bytes);
        ZT_CHECK(data_ != nullptr, "cannot allocate ", format_memory_size(bytes),
                 " of host memory for arena '", name_, "'");
      }
      break;
    case MemoryKind::device: {
      DeviceAllocator& allocator = options_.allocator != nullptr ? *options_.allocator : device_allocator();
      host_accessible = allocator.backend().host_accessible();
      device_buffer_ = allocator.allocate(bytes, options_.category, name_);
      data_ = device_buffer_.data();
      ZT_CHECK(reinterpret_cast<uintptr_t>(data_) % layout_.alignment() == 0, "device allocator returned ",
               data_, ", not aligned to ", layout_.alignment(), " bytes");
      break;
    }
  }
  if (options_.zero_fill) {
    if (host_accessible) {
      std::memset(data_, 0, bytes);
    } else {
#ifdef ZT_WITH_CUDA
      // On the thread's current stream, ahead of the work that will use the arena (a plain cudaMemset runs
      // on the legacy stream, which non-blocking rank streams do not wait for).
      cudaError_t status = cudaMemsetAsync(data_, 0, bytes, current_stream());
      ZT_CHECK(status == cudaSuccess, "cannot zero device arena '", name_, "': ", cudaGetErrorString(status));
#else
      ZT_FAIL("cannot zero arena '", name_, "': its memory is not host-accessible in a build without CUDA");
#endif
    }
  }
}

Arena Arena::over(std::string name, ArenaLayout layout, void* data, MemoryKind kind) {
  ZT_CHECK(data != nullptr || layout.total_bytes() == 0, "arena '", name, "' over no memory");
  ZT_CHECK(reinterpret_cast<uintptr_t>(data) % layout.alignment() == 0, "arena '", name, "' over memory at ",
           data, ", not aligned to ", layout.alignment(), " bytes");
  Arena arena(std::move(name), ArenaLayout(layout.alignment()), {.kind = kind});
  arena.layout_ = std::move(layout);
  arena.data_ = data;
  arena.owned_ = false;
  return arena;
}

Arena::~Arena() {
  release();
}

void Arena::release() {
  if (!owned_) {
    data_ = nullptr;
    return;
  }
  if (data_ != nullptr && options_.kind != MemoryKind::device) {
#ifdef ZT_WITH_CUDA
    if (pinned_) {
      (void)cudaFreeHost(data_);
    } else {
      std::free(data_);
    }
#else
    std::free(data_);
#endif
  }
  device_buffer_.reset();
  data_ = nullptr;
  pinned_ = false;
}

Arena::Arena(Arena&& other) noexcept
    : name_(std::move(other.name_)),
      layout_(std::move(other.layout_)),
      options_(other.options_),
      data_(std::exchange(other.data_, nullptr)),
      pinned_(std::exchange(other.pinned_, false)),
      owned_(std::exchange(other.owned_, true)),
      device_buffer_(std::move(other.device_buffer_)) {}

Arena& Arena::operator=(Arena&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    layout_ = std::move(other.layout_);
    options_ = other.options_;
    data_ = std::exchange(other.data_, nullptr);
    pinned_ = std::exchange(other.pinned_, false);
    owned_ = std::exchange(other.owned_, true);
    device_buffer_ = std::move(other.device_buffer_);
  }
  return *this;
}

Tensor Arena::tensor(std::string_view tensor_name) const {
  ZT_CHECK(layout_.contains(tensor_name), "arena '", name_, "' has no tensor named '", tensor_name, "'");
  const ArenaSlot& s = layout_.slot(tensor_name);
  return Tensor(static_cast<char*>(data_) + s.offset, s.shape, s.dtype, device());
}

Tensor Arena::flat(DType dtype) const {
  return Tensor(data_, Shape{static_cast<int64_t>(bytes() / dtype_size(dtype))}, dtype, device());
}

}  // namespace zt
