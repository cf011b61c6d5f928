#include "optim/zero/swapped_parameter_shard.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <utility>

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
  std::vector<std::span<std::byte>> buffers(static_cast<size_t>(options.buffer_count));
  const auto address = reinterpret_cast<uintptr_t>(buffers_.data());
  std::byte* first = static_cast<std::byte*>(buffers_.data()) + (round_up_to_alignment(address) - address);
  for (size_t i = 0; i < buffers.size(); ++i) buffers[i] = {first + i * stride_, stride_};
  // The cache checks that each buffer is aligned and holds the largest record.
  cache_ = std::make_unique<swap::SwapRecordCache>(
      *store_, std::move(buffers),
      swap::SwapRecordCacheOptions{.what = "parameters on disk", .unit = "record"});
}

// The cache waits for its transfers when it goes, before the buffers and the file go.
SwappedParameterShard::~SwappedParameterShard() = default;

const SwappedParameterStats& SwappedParameterShard::stats() const {
  const swap::SwapRecordCacheStats& s = cache_->stats();
  stats_ = {.records_read = s.records_read,
            .records_prefetched = s.records_prefetched,
            .prefetch_hits = s.prefetch_hits,
            .records_written = s.records_written,
            .io_wait_seconds = s.io_wait_seconds};
  return stats_;
}

Tensor SwappedParameterShard::acquire(size_t record, bool read) {
  const std::span<std::byte> buffer = cache_->acquire(record, read);
  return Tensor(buffer.data(), Shape{record_numel_[record]}, dtype_);
}

void SwappedParameterShard::release(size_t record, bool modified) {
  cache_->release(record, modified);
}

void SwappedParameterShard::prefetch(std::span<const size_t> upcoming) {
  const size_t ahead =
      std::min(upcoming.size(), static_cast<size_t>(buffer_count() - 1));  // one is the caller's
  const std::span<const size_t> window = upcoming.first(ahead);
  for (const size_t record : window) {
    if (cache_->has(record)) continue;
    // Without waiting: a buffer whose transfer is in flight is passed over.
    if (!cache_->prefetch(record, window, /*wait=*/false)) return;
  }
}

void SwappedParameterShard::wait_for_transfers() {
  cache_->wait_all();
}

}  // namespace zt::optim
