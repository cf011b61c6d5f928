#include "optim/swap/swap_record_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include "runtime/check.h"

namespace zt::swap {

SwapRecordCache::SwapRecordCache(SwapStore& store, int buffer_count, SwapRecordCacheOptions options)
    : store_(store), options_(std::move(options)) {
  ZT_CHECK(buffer_count >= 1, options_.what, ": ", buffer_count, " buffers (at least 1)");
  owned_.reserve(static_cast<size_t>(buffer_count));
  slots_.resize(static_cast<size_t>(buffer_count));
  for (Slot& slot : slots_) slot.buffer = owned_.emplace_back(store_.largest_transfer_bytes()).bytes();
}

SwapRecordCache::SwapRecordCache(SwapStore& store, std::vector<std::span<std::byte>> buffers,
                                 SwapRecordCacheOptions options)
    : store_(store), options_(std::move(options)) {
  ZT_CHECK(!buffers.empty(), options_.what, ": no buffers");
  slots_.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto address = reinterpret_cast<uintptr_t>(buffers[i].data());
    ZT_CHECK(address % kDirectIoAlignment == 0 && buffers[i].size() >= store_.largest_transfer_bytes(),
             options_.what, ": buffer ", i, " of ", buffers[i].size(), " bytes at ", address,
             " cannot hold the largest record of ", store_.path(), " (", store_.largest_transfer_bytes(),
             " bytes, aligned to ", kDirectIoAlignment, ")");
    slots_[i].buffer = buffers[i];
  }
}

SwapRecordCache::~SwapRecordCache() {
  for (const Slot& slot : slots_) slot.io.wait_quietly();
}

void SwapRecordCache::check_record(size_t record, const char* action) const {
  const auto count = static_cast<size_t>(store_.record_count());
  ZT_CHECK(record < count, options_.what, ": ", action, options_.unit, " ", record, " of ", count);
}

int SwapRecordCache::find(size_t record) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state != SlotState::empty && slots_[i].record == record) return static_cast<int>(i);
  }
  return -1;
}

void SwapRecordCache::settle(Slot& slot) {
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

SwapRecordCache::Slot* SwapRecordCache::free_slot(std::span<const size_t> keep, bool wait) {
  auto kept = [&](const Slot& s) { return std::find(keep.begin(), keep.end(), s.record) != keep.end(); };
  auto rank = [](SlotState state) {
    switch (state) {
      case SlotState::empty:
        return 0;
      case SlotState::clean:
        return 1;
      case SlotState::writing:
        return 2;
      case SlotState::dirty:
        return 3;  // its write is still to make
      case SlotState::reading:
        return 4;  // a read ahead that is no longer wanted
      case SlotState::held:
        break;
    }
    return 5;
  };
  Slot* best = nullptr;
  for (Slot& s : slots_) {
    if (s.state == SlotState::held || (s.state != SlotState::empty && kept(s))) continue;
    const bool in_flight = s.state == SlotState::reading || s.state == SlotState::writing;
    if (!wait && ((in_flight && !s.io.done()) || s.state == SlotState::dirty)) continue;
    if (best == nullptr || rank(s.state) < rank(best->state) ||
        (rank(s.state) == rank(best->state) && s.last_use < best->last_use)) {
      best = &s;
    }
  }
  if (best == nullptr) return nullptr;
  if (best->state == SlotState::dirty) start_write(*best);
  settle(*best);  // a dirty record's write is done before its buffer takes another record
  best->state = SlotState::empty;
  return best;
}

void SwapRecordCache::start_read(Slot& slot, size_t record, bool prefetched) {
  const auto r = static_cast<int64_t>(record);
  slot.record = record;
  slot.prefetched = prefetched;
  slot.last_use = ++clock_;
  if (!store_.written(r)) {  // zeros on disk: nothing to move
    std::memset(slot.buffer.data(), 0, store_.transfer_bytes(r));
    slot.state = SlotState::clean;
    ++stats_.records_zero_filled;
    return;
  }
  slot.state = SlotState::reading;
  slot.io = store_.read(r, slot.buffer);
  ++stats_.records_read;
  stats_.bytes_read += store_.transfer_bytes(r);
  if (prefetched) ++stats_.records_prefetched;
}

void SwapRecordCache::start_write(Slot& slot) {
  const auto r = static_cast<int64_t>(slot.record);
  slot.state = SlotState::writing;
  slot.io = store_.write(r, slot.buffer);
  ++stats_.records_written;
  stats_.bytes_written += store_.transfer_bytes(r);
}

void SwapRecordCache::no_free_buffer() const {
  throw Error(options_.what + ": no free buffer in " + store_.path() + " (" + std::to_string(slots_.size()) +
              " buffers)");
}

std::span<std::byte> SwapRecordCache::acquire(size_t record, bool read) {
  check_record(record, "");
  for (const Slot& s : slots_) {
    ZT_CHECK(s.state != SlotState::held, options_.what, ": ", options_.unit, " ", record, " acquired while ",
             options_.unit, " ", s.record, " is still held");
  }
  const int found = find(record);
  Slot* slot = found >= 0 ? &slots_[static_cast<size_t>(found)] : free_slot({}, /*wait=*/true);
  if (slot == nullptr) no_free_buffer();
  slot->unwritten = found >= 0 && slot->state == SlotState::dirty;
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
  return slot->buffer;
}

void SwapRecordCache::release(size_t record, bool dirty, WriteBack when) {
  const int found = find(record);
  ZT_CHECK(found >= 0 && slots_[static_cast<size_t>(found)].state == SlotState::held, options_.what,
           ": release of ", options_.unit, " ", record, " which is not held");
  Slot& slot = slots_[static_cast<size_t>(found)];
  slot.last_use = ++clock_;
  const bool was_dirty = std::exchange(slot.unwritten, false);
  if (!dirty) {  // unchanged by this hold: as it was before it
    slot.state = was_dirty ? SlotState::dirty : SlotState::clean;
    return;
  }
  if (when == WriteBack::later) {
    slot.state = SlotState::dirty;
    return;
  }
  start_write(slot);
  if (!options_.write_behind) settle(slot);
}

bool SwapRecordCache::prefetch(size_t record, std::span<const size_t> keep, bool wait) {
  check_record(record, "prefetch of ");
  if (find(record) >= 0) return false;
  Slot* slot = free_slot(keep, wait);
  if (slot == nullptr) {
    if (wait) no_free_buffer();
    return false;
  }
  start_read(*slot, record, /*prefetched=*/true);
  return true;
}

void SwapRecordCache::flush() {
  for (Slot& s : slots_) {
    if (s.state == SlotState::dirty) start_write(s);  // all started before any is waited for
  }
  for (Slot& s : slots_) {
    if (s.state == SlotState::writing) settle(s);
  }
}

void SwapRecordCache::wait_all() {
  flush();
  for (Slot& s : slots_) settle(s);
}

}  // namespace zt::swap
