#include "optim/zero/swapped_parameter_shard.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>

#include "runtime/check.h"

namespace zt::optim {

namespace {

// Each record's bytes: its slice in the dtype (the swap store aligns each; an empty slice takes no space).
std::vector<size_t> record_bytes_of(const std::vector<int64_t>& record_numel, DType dtype) {
  std::vector<size_t> bytes;
  for (const int64_t n : record_numel)
    bytes.push_back(static_cast<size_t>(std::max<int64_t>(n, 0)) * dtype_size(dtype));
  return bytes;
}

// A buffer's bytes: the largest record, aligned (at least one alignment unit, so that a shard of empty
// slices still has buffers).
size_t buffer_stride(const std::vector<int64_t>& record_numel, DType dtype) {
  size_t largest = 1;
  for (const size_t b : record_bytes_of(record_numel, dtype)) largest = std::max(largest, b);
  return round_up_to_alignment(largest);
}

// The one place the parameter file's swap store is made: one record per unit slice, of its own size.
std::unique_ptr<swap::SwapStore> open_parameter_swap_store(const SwappedParameterShardOptions& options,
                                                           AsyncFileIo& io) {
  return std::make_unique<swap::SwapStore>(
      swap::SwapStoreOptions{.directory = SwappedParameterShard::file_directory(options.directory),
                             .rank = options.rank,
                             .record_bytes = record_bytes_of(options.record_numel, options.dtype),
                             .direct = options.direct},
      io);
}

// The buffers' arena of `bytes` (SwappedParameterShard::buffer_bytes_for: the buffers plus one alignment
// unit, so that the first buffer can start at an aligned address whatever the allocator returns;
// cudaHostAlloc for pinned buffers promises no alignment).
ArenaLayout buffer_layout(size_t bytes) {
  ArenaLayout layout(kDirectIoAlignment);  // O_DIRECT transfers from aligned addresses
  layout.add({"parameter swap buffers", Shape{static_cast<int64_t>(bytes / 4)}, DType::i32});
  return layout;
}

}  // namespace

std::string SwappedParameterShard::file_directory(const std::string& nvme_path) {
  return (std::filesystem::path(nvme_path) / "zerotrain-parameters").string();
}

size_t SwappedParameterShard::buffer_bytes_for(const std::vector<int64_t>& record_numel, DType dtype,
                                               int buffer_count) {
  if (buffer_count <= 0) return 0;
  return static_cast<size_t>(buffer_count) * buffer_stride(record_numel, dtype) + kDirectIoAlignment;
}

size_t SwappedParameterShard::record_buffer_bytes(const std::vector<int64_t>& record_numel, DType dtype) {
  return buffer_stride(record_numel, dtype);
}

uint64_t SwappedParameterShard::file_bytes_for(const std::vector<int64_t>& record_numel, DType dtype) {
  return swap::swap_file_bytes(record_bytes_of(record_numel, dtype));
}

SwappedParameterShard::SwappedParameterShard(const SwappedParameterShardOptions& options,
                                             const IoOptions& io_options)
    : record_numel_(options.record_numel),
      dtype_(options.dtype),
      buffers_("parameter swap buffers",
               buffer_layout(buffer_bytes_for(options.record_numel, options.dtype, options.buffer_count)),
               {.kind = options.buffer_kind, .category = MemoryCategory::parameters, .zero_fill = true}) {
  ZT_CHECK(!record_numel_.empty(), "parameters on disk: the shard has no records");
  for (const int64_t n : record_numel_) ZT_CHECK(n >= 0, "parameters on disk: a record of ", n, " elements");
  ZT_CHECK(options.buffer_count >= 1, "offload_param.buffer_count must be at least 1, got ",
           options.buffer_count);
  std::error_code error;
  ZT_CHECK(std::filesystem::is_directory(options.directory, error), "offload_param.nvme_path ",
           options.directory, " is not a directory (create it first)");
  std::filesystem::create_directories(file_directory(options.directory), error);
  ZT_CHECK(!error, "cannot create ", file_directory(options.directory),
           " for the parameter swap file: ", error.message());
  io_ = std::make_unique<AsyncFileIo>(io_options);
  store_ = open_parameter_swap_store(options, *io_);
  stride_ = buffer_stride(record_numel_, dtype_);
  ZT_CHECK(stride_ >= store_->largest_transfer_bytes(), "parameters on disk: buffers of ", stride_,
           " bytes cannot hold the largest record of ", path(), " (", store_->largest_transfer_bytes(),
           " bytes)");
  slots_.resize(static_cast<size_t>(options.buffer_count));
  const auto address = reinterpret_cast<uintptr_t>(buffers_.data());
  std::byte* first = static_cast<std::byte*>(buffers_.data()) + (round_up_to_alignment(address) - address);
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].data = first + i * stride_;
}

SwappedParameterShard::~SwappedParameterShard() {
  for (const Slot& slot : slots_) slot.io.wait_quietly();
}

int SwappedParameterShard::find(size_t record) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state != SlotState::empty && slots_[i].record == record) return static_cast<int>(i);
  }
  return -1;
}

void SwappedParameterShard::settle(Slot& slot) {
  if (slot.state != SlotState::reading && slot.state != SlotState::writing) return;
  const auto start = std::chrono::steady_clock::now();
  IoTicket io = std::exchange(slot.io, IoTicket());
  const bool was_read = slot.state == SlotState::reading;
  const std::string failure = io.wait_quietly();
  stats_.io_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A failed read leaves nothing in the buffer; a failed write leaves the record's only up-to-date copy in
  // it, so the buffer stays clean (the error still ends the run).
  slot.state = was_read && !failure.empty() ? SlotState::empty : SlotState::clean;
  if (!failure.empty()) throw Error(failure);
}

SwappedParameterShard::Slot* SwappedParameterShard::free_slot(std::span<const size_t> keep, bool wait) {
  auto kept = [&](const Slot& s) { return std::find(keep.begin(), keep.end(), s.record) != keep.end(); };
  auto rank = [](SlotState state) {
    switch (state) {
      case SlotState::empty:
        return 0;
      case SlotState::clean:
        return 1;
      case SlotState::writing:
        return 2;
      case SlotState::reading:
        return 3;  // a read ahead that is no longer wanted
      case SlotState::held:
        break;
    }
    return 4;
  };
  Slot* best = nullptr;
  for (Slot& s : slots_) {
    if (s.state == SlotState::held || (s.state != SlotState::empty && kept(s))) continue;
    // A prefetch does not wait for a transfer to free a buffer: the rank thread has a gather to do.
    const bool in_flight = s.state == SlotState::reading || s.state == SlotState::writing;
    if (!wait && in_flight && !s.io.done()) continue;
    if (best == nullptr || rank(s.state) < rank(best->state) ||
        (rank(s.state) == rank(best->state) && s.last_use < best->last_use)) {
      best = &s;
    }
  }
  if (best == nullptr) return nullptr;
  settle(*best);
  best->state = SlotState::empty;
  return best;
}

void SwappedParameterShard::start_read(Slot& slot, size_t record, bool prefetched) {
  slot.record = record;
  slot.state = SlotState::reading;
  slot.prefetched = prefetched;
  slot.io = store_->read(static_cast<int64_t>(record), {slot.data, stride_});
  slot.last_use = ++clock_;
  ++stats_.records_read;
  if (prefetched) ++stats_.records_prefetched;
}

Tensor SwappedParameterShard::acquire(size_t record, bool read) {
  ZT_CHECK(record < record_numel_.size(), "parameters on disk: record ", record, " of ",
           record_numel_.size());
  for (const Slot& s : slots_) {
    ZT_CHECK(s.state != SlotState::held, "parameters on disk: record ", record, " acquired while record ",
             s.record, " is still held");
  }
  const int found = find(record);
  Slot* slot = found >= 0 ? &slots_[static_cast<size_t>(found)] : free_slot({}, /*wait=*/true);
  ZT_CHECK(slot != nullptr, "parameters on disk: no free buffer in ", path());
  if (found >= 0) {
    if (read && slot->prefetched) ++stats_.prefetch_hits;
  } else {
    slot->record = record;
    if (read) start_read(*slot, record, /*prefetched=*/false);
  }
  settle(*slot);
  slot->state = SlotState::held;
  slot->prefetched = false;
  slot->last_use = ++clock_;
  return Tensor(slot->data, Shape{record_numel_[record]}, dtype_);
}

void SwappedParameterShard::release(size_t record, bool modified) {
  const int found = find(record);
  ZT_CHECK(found >= 0 && slots_[static_cast<size_t>(found)].state == SlotState::held,
           "parameters on disk: release of record ", record, " which is not held");
  Slot& slot = slots_[static_cast<size_t>(found)];
  slot.last_use = ++clock_;
  if (!modified) {
    slot.state = SlotState::clean;
    return;
  }
  slot.state = SlotState::writing;
  slot.io = store_->write(static_cast<int64_t>(record), {slot.data, stride_});
  ++stats_.records_written;
}

void SwappedParameterShard::prefetch(std::span<const size_t> upcoming) {
  const size_t ahead = std::min(upcoming.size(), slots_.size() - 1);  // one buffer is the caller's
  const std::span<const size_t> window = upcoming.first(ahead);
  for (const size_t record : window) {
    ZT_CHECK(record < record_numel_.size(), "parameters on disk: prefetch of record ", record, " of ",
             record_numel_.size());
    if (find(record) >= 0) continue;
    Slot* slot = free_slot(window, /*wait=*/false);
    if (slot == nullptr) return;
    start_read(*slot, record, /*prefetched=*/true);
  }
}

}  // namespace zt::optim
