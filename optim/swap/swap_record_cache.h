// A few host buffers in front of a swap store (optim/swap/swap_store.h): the mechanism the disk tier's two
// users share (the optimizer state, optim/swap/swapped_state_store.h, and the stage-3 parameter shard,
// optim/zero/swapped_parameter_shard.h). The users keep their policies: which records to read ahead, and
// whether a read ahead may wait for a buffer.
//
// Note [The swap record cache]
// `buffer_count` buffers, each of at least the store's largest transfer (any record may land in any
// buffer), each holding one record in one state:
//   empty     nothing
//   reading   a read of the record is in flight (acquire's own read, or a read ahead)
//   clean     the buffer equals the record on disk
//   dirty     the buffer is newer than the record on disk; its write is not started yet (WriteBack::later)
//   writing   a write of the record is in flight; the buffer equals what is being written
//   held      acquired by the caller (at most one at a time)
// A record is in at most one buffer, so a read never races a write of the same record: acquire and
// prefetch find the buffer that has it first. A buffer is reused only after its transfer is waited for.
// acquire(r) takes r's buffer if one has it (waiting for its transfer) or reads r into a free buffer and
// waits; a record the store has never written is zeros (SwapStore::written), so its "read" zero-fills the
// buffer and moves nothing. A free buffer is, in this order: an empty one, the least recently used clean
// one, the least recently used writing one (after its write), the least recently used dirty one (after
// writing it; only for a caller that may wait), an unwanted read ahead (after its read) — never a held one
// nor one holding a record the caller still wants (prefetch's `keep`). So a dirty record leaves its buffer
// only after its write-back is done. prefetch(r, keep, wait) starts a read of r into a free buffer;
// without `wait` it passes over buffers whose transfer is still in flight or not started (and reads nothing
// if none is left). release(r, dirty, when) writes r back — WriteBack::now starts the write (with
// write_behind, waited for when its buffer is needed again, by flush, or at destruction; without, at once),
// WriteBack::later leaves the buffer dirty, so that a caller that changes one record piece by piece (loading
// the state one tensor at a time: a sub-group holds a dozen tensors) writes it once, when its buffer is
// needed or at flush — or marks it clean (a record released unmodified stays dirty if it was). A failed
// read leaves its buffer empty; a failed write leaves the record's only up-to-date copy in its buffer
// (clean); both throw. The destructor does not write dirty buffers: flush first to keep them.
//
//   SwapRecordCache cache(store, /*buffer_count=*/4, {.what = "swapped optimizer state", .unit = "block"});
//   std::span<std::byte> bytes = cache.acquire(k);   // store.transfer_bytes(k) of it are record k's
//   cache.prefetch(k + 1, std::vector<size_t>{k, k + 1}, /*wait=*/true);
//   cache.release(k, /*dirty=*/true);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optim/swap/swap_store.h"
#include "runtime/direct_io.h"

namespace zt::swap {

struct SwapRecordCacheOptions {
  std::string what = "swap cache";  // the subject of error messages: "swapped optimizer state"
  std::string unit = "record";      // what a record is called in them: "block"
  bool write_behind = true;         // release's write is waited for later (true) or at once (false)
};

// When release writes a modified record back (Note [The swap record cache]).
enum class WriteBack {
  now,    // start the write at release: the caller is done with the record (the optimizer's pass)
  later,  // when the buffer is needed or at flush: the caller may change the record again soon (loading)
};

// Traffic since the cache was made.
struct SwapRecordCacheStats {
  uint64_t records_read = 0;        // every read started (acquire's own and prefetches)
  uint64_t records_prefetched = 0;  // reads started by prefetch
  uint64_t prefetch_hits = 0;       // acquires (with read) that found their record read (or being read) ahead
  uint64_t records_written = 0;
  uint64_t records_zero_filled = 0;  // "reads" of records never written: zeros, nothing moved
  uint64_t bytes_read = 0;           // each record's transfer_bytes, not the buffer's size
  uint64_t bytes_written = 0;
  double io_wait_seconds = 0;  // waiting for transfers
};

class SwapRecordCache {
 public:
  // `buffer_count` aligned host buffers of store.largest_transfer_bytes() each, owned by the cache.
  SwapRecordCache(SwapStore& store, int buffer_count, SwapRecordCacheOptions options);
  // The caller's buffers (e.g. pinned ones of an arena): each aligned to kDirectIoAlignment, of at least
  // store.largest_transfer_bytes(), and outliving the cache. Throws zt::Error for a buffer that is not.
  SwapRecordCache(SwapStore& store, std::vector<std::span<std::byte>> buffers,
                  SwapRecordCacheOptions options);
  // Waits for every transfer (quietly).
  ~SwapRecordCache();
  SwapRecordCache(const SwapRecordCache&) = delete;
  SwapRecordCache& operator=(const SwapRecordCache&) = delete;

  // Record `record`'s buffer (its first store.transfer_bytes(record) bytes are the record), valid until
  // release(record). `read` false: the caller overwrites the record, so a buffer that does not have it
  // reads nothing. Throws for a record out of range, a record acquired while another is held, a failed
  // transfer.
  std::span<std::byte> acquire(size_t record, bool read = true);
  // Ends the hold; `dirty` (the caller changed the buffer) writes it back to the record, now or later
  // (Note [The swap record cache]).
  void release(size_t record, bool dirty, WriteBack when = WriteBack::now);
  // Starts a read of `record` into a free buffer holding none of `keep` (the records the caller still
  // wants; the held one is never taken). Returns false when a buffer has the record already or, without
  // `wait`, when every free buffer's transfer is in flight. With `wait`, waits for a transfer to free a
  // buffer, and having none to give is an error.
  bool prefetch(size_t record, std::span<const size_t> keep, bool wait);
  // Whether a buffer has `record` (in any state but empty).
  bool has(size_t record) const { return find(record) >= 0; }
  // Writes every dirty buffer and waits for every write in flight (rethrowing the first failure).
  void flush();
  // flush(), and waits for the reads in flight too (rethrowing the first failure).
  void wait_all();

  int buffer_count() const { return static_cast<int>(slots_.size()); }
  const SwapStore& store() const { return store_; }
  const SwapRecordCacheStats& stats() const { return stats_; }

 private:
  enum class SlotState { empty, reading, clean, dirty, writing, held };
  struct Slot {
    std::span<std::byte> buffer;
    SlotState state = SlotState::empty;
    size_t record = 0;
    IoTicket io;
    uint64_t last_use = 0;
    bool prefetched = false;  // the read in this buffer was started by prefetch
    bool unwritten = false;   // held: the buffer was dirty when acquired (its release keeps it dirty)
  };

  void check_record(size_t record, const char* action) const;
  int find(size_t record) const;
  void settle(Slot& slot);
  // A free buffer (emptied) holding none of `keep`, or nullptr; without `wait`, only buffers whose
  // transfer is done.
  Slot* free_slot(std::span<const size_t> keep, bool wait);
  void start_read(Slot& slot, size_t record, bool prefetched);
  void start_write(Slot& slot);
  [[noreturn]] void no_free_buffer() const;

  SwapStore& store_;
  SwapRecordCacheOptions options_;
  std::vector<AlignedBuffer> owned_;  // the buffers when the cache makes them
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
  SwapRecordCacheStats stats_;
};

}  // namespace zt::swap
