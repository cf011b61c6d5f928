#include "optim/swap/swapped_state_store.h"

#include <algorithm>

#include "optim/swap/swap_pipeline.h"
#include "runtime/check.h"

namespace zt::swap {

namespace {

// Record k: master | m | v of block k, 12 bytes an element (Note [Swapped optimizer state]).
std::vector<size_t> record_bytes_for(const std::vector<int64_t>& numel) {
  std::vector<size_t> bytes;
  bytes.reserve(numel.size());
  for (const int64_t n : numel)
    bytes.push_back(3 * static_cast<size_t>(std::max<int64_t>(n, 0)) * sizeof(float));
  return bytes;
}

// A buffer holds any record: the largest, aligned.
size_t buffer_bytes_for_records(const std::vector<int64_t>& numel) {
  size_t largest = 0;
  for (const size_t bytes : record_bytes_for(numel))
    largest = std::max(largest, round_up_to_alignment(bytes));
  return largest;
}

}  // namespace

size_t SwappedStateStore::buffer_bytes_for(const SwappedStateOptions& options) {
  return static_cast<size_t>(std::max(options.buffer_count, 0)) *
         buffer_bytes_for_records(options.block_numel);
}

uint64_t SwappedStateStore::file_bytes_for(const SwappedStateOptions& options) {
  return swap_file_bytes(record_bytes_for(options.block_numel));
}

SwappedStateStore::SwappedStateStore(const SwappedStateOptions& options, const IoOptions& io_options)
    : block_numel_(options.block_numel) {
  ZT_CHECK(!block_numel_.empty(), "a swapped optimizer state needs at least one block");
  for (const int64_t n : block_numel_) ZT_CHECK(n >= 0, "swapped optimizer state: block of ", n, " elements");
  const int needed = swap_pipeline_min_buffers(
      {.pipeline_read = options.pipeline_read, .pipeline_write = options.pipeline_write});
  ZT_CHECK(options.buffer_count >= needed, "offload_optimizer.buffer_count ", options.buffer_count,
           " is too few for the disk tier: it needs ", needed, " with pipeline_read ",
           options.pipeline_read ? "true" : "false", " and pipeline_write ",
           options.pipeline_write ? "true" : "false");
  const auto blocks = static_cast<int64_t>(block_numel_.size());
  if (options.pipeline_read) {
    lookahead_ =
        std::min<int64_t>(std::max(1, options.buffer_count - (options.pipeline_write ? 2 : 1)), blocks - 1);
  }
  io_ = std::make_unique<AsyncFileIo>(io_options);
  store_ = std::make_unique<SwapStore>(SwapStoreOptions{.directory = options.directory,
                                                        .rank = options.rank,
                                                        .record_bytes = record_bytes_for(block_numel_),
                                                        .direct = options.direct},
                                       *io_);
  cache_ = std::make_unique<SwapRecordCache>(
      *store_, options.buffer_count,
      SwapRecordCacheOptions{
          .what = "swapped optimizer state", .unit = "block", .write_behind = options.pipeline_write});
}

// The cache waits for its transfers when it goes, before the store closes the file.
SwappedStateStore::~SwappedStateStore() = default;

size_t SwappedStateStore::buffer_bytes() const {
  return static_cast<size_t>(cache_->buffer_count()) * store_->largest_transfer_bytes();
}

const SwappedStateStats& SwappedStateStore::stats() const {
  const SwapRecordCacheStats& s = cache_->stats();
  stats_ = {.bytes_read = s.bytes_read,
            .bytes_written = s.bytes_written,
            .blocks_read = s.records_read,
            .blocks_written = s.records_written,
            .io_wait_seconds = s.io_wait_seconds};
  return stats_;
}

SwappedStateBlock SwappedStateStore::view(size_t block, std::span<std::byte> buffer) const {
  const auto n = static_cast<size_t>(block_numel_[block]);
  auto* floats = reinterpret_cast<float*>(buffer.data());
  return {{floats, n}, {floats + n, n}, {floats + 2 * n, n}};
}

SwappedStateBlock SwappedStateStore::acquire(size_t block) {
  const std::span<std::byte> buffer = cache_->acquire(block);
  // Reads ahead: the next blocks of the pass, kept out of each other's way.
  std::vector<size_t> window = {block};
  for (int64_t d = 1; d <= lookahead_; ++d)
    window.push_back((block + static_cast<size_t>(d)) % block_numel_.size());
  for (size_t w = 1; w < window.size(); ++w) {
    if (!cache_->has(window[w])) cache_->prefetch(window[w], window, /*wait=*/true);
  }
  return view(block, buffer);
}

void SwappedStateStore::release(size_t block, bool modified, WriteBack when) {
  cache_->release(block, modified, when);
}

void SwappedStateStore::flush() {
  cache_->flush();
}

}  // namespace zt::swap
