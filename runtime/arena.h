// Arenas: memory owned per lifetime class (parameters, gradients, fp32 master, Adam m/v, activations, ...).
//
// A spec table {name, shape, dtype} is laid out in one flat buffer, each tensor at a 128-byte-aligned
// offset (16-byte vector loads and cuBLASLt both want aligned pointers). ArenaLayout only computes offsets,
// so memory can be planned and printed before anything is allocated, and ZeRO sharding is offset arithmetic
// on the flat buffer: with shard_count = N the total is padded to a multiple of N * alignment, so every
// rank's shard [r * total/N, (r+1) * total/N) is equal in size and aligned. Arena allocates the buffer and
// hands out Tensor views by name.
//
//   ArenaLayout layout({{"w", {1024, 1024}, DType::bf16}, {"b", {1024}, DType::bf16}});
//   layout.set_shard_count(world_size);
//   Arena params("parameters", layout, {.kind = MemoryKind::device, .category = MemoryCategory::parameters});
//   Tensor w = params.tensor("w");
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt {

constexpr size_t kArenaAlignment = 128;

enum class MemoryKind : uint8_t {
  host,         // pageable host memory
  pinned_host,  // page-locked host memory for fast async copies (plain host memory where no GPU exists)
  device,       // device memory through the caching device allocator
};
std::string_view memory_kind_name(MemoryKind kind);

struct TensorSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
};

struct ArenaSlot {
  std::string name;
  Shape shape;
  DType dtype = DType::f32;
  size_t offset = 0;  // bytes from the start of the buffer, a multiple of the alignment
  size_t nbytes = 0;  // shape.numel() * dtype_size(dtype)
  size_t end() const { return offset + nbytes; }
};

class ArenaLayout {
 public:
  explicit ArenaLayout(size_t alignment = kArenaAlignment);
  ArenaLayout(std::span<const TensorSpec> specs, size_t alignment = kArenaAlignment);
  ArenaLayout(std::initializer_list<TensorSpec> specs, size_t alignment = kArenaAlignment);

  // Places a tensor after the previous one, at the next aligned offset; returns its slot. Duplicate names
  // are errors.
  const ArenaSlot& add(const TensorSpec& spec);
  // Pads the total so it splits into `count` equal, aligned shards (count >= 1).
  void set_shard_count(int count);
  // Moves the end of the layout up to the next multiple of `bytes` (a multiple of the alignment), so the
  // next tensor starts there: ZeRO pads each unit (a layer's tensors) to world * alignment this way.
  void pad_to_multiple(size_t bytes);

  bool contains(std::string_view name) const;
  const ArenaSlot& slot(std::string_view name) const;  // throws for an unknown name
  const std::vector<ArenaSlot>& slots() const { return slots_; }
  size_t alignment() const { return alignment_; }
  int shard_count() const { return shard_count_; }
  size_t used_bytes() const;   // end of the last tensor
  size_t total_bytes() const;  // bytes to allocate: used_bytes rounded up to shard_count * alignment
  size_t shard_bytes() const { return total_bytes() / static_cast<size_t>(shard_count_); }
  size_t shard_offset(int rank) const;  // byte offset of rank's shard; rank in [0, shard_count)
  // A table for logs: one line per tensor (name, dtype, shape, offset, bytes) and the totals.
  std::string describe(std::string_view title) const;

 private:
  size_t alignment_;
  int shard_count_ = 1;
  size_t reserved_ = 0;  // end of explicit padding (pad_to_multiple); used_bytes() >= it
  std::vector<ArenaSlot> slots_;
  std::unordered_map<std::string, size_t> index_;
};

struct ArenaOptions {
  MemoryKind kind = MemoryKind::host;
  MemoryCategory category = MemoryCategory::other;  // accounting category for device arenas
  DeviceAllocator* allocator = nullptr;             // device arenas; nullptr: device_allocator() (current)
  bool zero_fill = false;                           // zero at allocation (device: on the current stream)
};

class Arena {
 public:
  Arena(std::string name, ArenaLayout layout, ArenaOptions options = {});
  // An arena over memory owned elsewhere (layout.total_bytes() of it at `data`, aligned to the layout's
  // alignment, of `kind`): names and views as usual, nothing allocated or freed. The stage-0 gradients that
  // share the model's activation arena are one (model/deberta.h, GradientLayout).
  static Arena over(std::string name, ArenaLayout layout, void* data, MemoryKind kind);
  ~Arena();
  Arena(Arena&& other) noexcept;
  Arena& operator=(Arena&& other) noexcept;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Tensor tensor(std::string_view name) const;  // throws for an unknown name
  Tensor flat(DType dtype) const;              // the whole buffer as a 1-D tensor of dtype
  void* data() const { return data_; }
  size_t bytes() const { return layout_.total_bytes(); }
  const ArenaLayout& layout() const { return layout_; }
  const std::string& name() const { return name_; }
  MemoryKind kind() const { return options_.kind; }
  bool pinned() const { return pinned_; }  // pinned_host arenas that really are page-locked
  bool owns_memory() const { return owned_; }
  DeviceKind device() const {
    return options_.kind == MemoryKind::device ? DeviceKind::cuda : DeviceKind::cpu;
  }

 private:
  void release();

  std::string name_;
  ArenaLayout layout_;
  ArenaOptions options_;
  void* data_ = nullptr;
  bool pinned_ = false;
  bool owned_ = true;  // false: over()
  DeviceBuffer device_buffer_;
};

}  // namespace zt
