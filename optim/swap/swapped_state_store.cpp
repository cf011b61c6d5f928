#include "optim/swap/swapped_state_store.h"

#include <algorithm>
#include <chrono>

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
    : block_numel_(options.block_numel), pipeline_write_(options.pipeline_write) {
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
  slots_.resize(static_cast<size_t>(options.buffer_count));
  for (Slot& slot : slots_) slot.buffer = AlignedBuffer(store_->largest_transfer_bytes());
}

SwappedStateStore::~SwappedStateStore() {
  for (const Slot& slot : slots_) slot.io.wait_quietly();
}

size_t SwappedStateStore::buffer_bytes() const {
  return slots_.size() * store_->largest_transfer_bytes();
}

int SwappedStateStore::find(size_t block) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state != SlotState::empty && slots_[i].block == block) return static_cast<int>(i);
  }
  return -1;
}

void SwappedStateStore::settle(Slot& slot) {
  if (slot.state != SlotState::reading && slot.state != SlotState::writing) return;
  const auto start = std::chrono::steady_clock::now();
  IoTicket io = std::exchange(slot.io, IoTicket());
  const bool was_read = slot.state == SlotState::reading;
  const std::string error = io.wait_quietly();
  stats_.io_wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A failed read leaves nothing in the buffer; a failed write leaves the block's only up-to-date copy in
  // it, so the buffer stays clean (the error still ends the run).
  slot.state = was_read && !error.empty() ? SlotState::empty : SlotState::clean;
  if (!error.empty()) throw Error(error);
}

SwappedStateStore::Slot& SwappedStateStore::free_slot(const std::vector<size_t>& keep) {
  auto kept = [&](const Slot& s) { return std::find(keep.begin(), keep.end(), s.block) != keep.end(); };
  Slot* best = nullptr;
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
  for (Slot& s : slots_) {
    if (s.state == SlotState::held || (s.state != SlotState::empty && kept(s))) continue;
    if (best == nullptr || rank(s.state) < rank(best->state) ||
        (rank(s.state) == rank(best->state) && s.last_use < best->last_use)) {
      best = &s;
    }
  }
  ZT_CHECK(best != nullptr, "swapped optimizer state of ", store_->path(), ": no free buffer (",
           slots_.size(), " buffers)");
  settle(*best);
  best->state = SlotState::empty;
  return *best;
}

void SwappedStateStore::start_read(Slot& slot, size_t block) {
  slot.block = block;
  slot.state = SlotState::reading;
  slot.io = store_->read(static_cast<int64_t>(block), slot.buffer.bytes());
  slot.last_use = ++clock_;
  stats_.bytes_read += store_->transfer_bytes(static_cast<int64_t>(block));
  ++stats_.blocks_read;
}

SwappedStateBlock SwappedStateStore::view(Slot& slot) const {
  const auto n = static_cast<size_t>(block_numel_[slot.block]);
  auto* floats = reinterpret_cast<float*>(slot.buffer.data());
  return {{floats, n}, {floats + n, n}, {floats + 2 * n, n}};
}

SwappedStateBlock SwappedStateStore::acquire(size_t block) {
  ZT_CHECK(block < block_numel_.size(), "swapped optimizer state: block ", block, " of ",
           block_numel_.size());
  for (const Slot& s : slots_) {
    ZT_CHECK(s.state != SlotState::held, "swapped optimizer state: block ", block, " acquired while block ",
             s.block, " is still held");
  }
  const int found = find(block);
  Slot& slot = found >= 0 ? slots_[static_cast<size_t>(found)] : free_slot({});
  if (found < 0) start_read(slot, block);
  settle(slot);
  slot.state = SlotState::held;
  slot.last_use = ++clock_;

  // Reads ahead: the next blocks of the pass, kept out of each other's way.
  std::vector<size_t> window = {block};
  for (int64_t d = 1; d <= lookahead_; ++d)
    window.push_back((block + static_cast<size_t>(d)) % block_numel_.size());
  for (size_t w = 1; w < window.size(); ++w) {
    if (find(window[w]) >= 0) continue;
    start_read(free_slot(window), window[w]);
  }
  return view(slot);
}

void SwappedStateStore::release(size_t block, bool modified) {
  const int found = find(block);
  ZT_CHECK(found >= 0 && slots_[static_cast<size_t>(found)].state == SlotState::held,
           "swapped optimizer state: release of block ", block, " which is not held");
  Slot& slot = slots_[static_cast<size_t>(found)];
  slot.last_use = ++clock_;
  if (!modified) {
    slot.state = SlotState::clean;
    return;
  }
  slot.state = SlotState::writing;
  slot.io = store_->write(static_cast<int64_t>(block), slot.buffer.bytes());
  stats_.bytes_written += store_->transfer_bytes(static_cast<int64_t>(block));
  ++stats_.blocks_written;
  if (!pipeline_write_) settle(slot);
}

void SwappedStateStore::flush() {
  for (Slot& s : slots_) {
    if (s.state == SlotState::writing) settle(s);
  }
}

}  // namespace zt::swap
