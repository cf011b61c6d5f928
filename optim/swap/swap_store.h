// The disk tier's working store: one file per rank under nvme_path holding N records of their own sizes
// (e.g. the fp32 master, Adam m and v of one sub-group of a rank's optimizer shard), read and written
// asynchronously with direct I/O (runtime/direct_io.h).
//
// Note [The swap store]
// Layout: record k has its own size bytes_k (SwapStoreOptions::record_bytes) and occupies
// [offset_k, offset_k + bytes_k) of the file, offset_k = the sum of aligned(bytes_j) for j < k, aligned()
// rounding up to kDirectIoAlignment; the file is the sum of every aligned(bytes_k). So every record starts
// and ends where O_DIRECT can transfer it, and a record is moved whole: aligned(bytes_k) bytes, no more,
// through a buffer of at least that many (the tail past bytes_k is padding). Records are of their own
// sizes because the ZeRO shard's units are: DeBERTa-v2-xlarge's embeddings slice is ~197M elements, each
// layer's ~29M, and sizing every record as the largest made the file (and each pass's traffic) 26 x the
// largest instead of the state (57 GiB for 9.9 GiB). A record of 0 bytes (a rank's empty slice) takes no
// space and moves nothing. The record's meaning is the caller's: the store moves bytes.
// Lifetime (issue 15: "a crash leaves nothing the next run trips on"):
//   - the file "zerotrain-swap.<host>.<pid>.rank<r>" is created and its whole size reserved with
//     posix_fallocate when the store is made, so a disk that is too small fails then, naming the path and
//     the bytes, not in the middle of a step (writes into reserved space do not need new blocks);
//   - before that, files of the same name pattern whose process is dead (same host, kill(pid, 0) fails with
//     ESRCH) are removed: what a crash, a SIGKILL or an OOM kill left behind. The host in the name keeps a
//     shared nvme_path (a network file system) from losing a live file of another machine;
//   - the destructor waits for the store's outstanding transfers, closes and removes the file; the second
//     SIGINT/SIGTERM's immediate exit removes it too (runtime/signals.h, RemoveOnSignalExit).
// Checkpoints never point into the store: it is a working copy (the trainer writes the full state out).
//
//   AsyncFileIo io(aio_options);
//   // master | m | v of sub-groups of 197M and 29M elements: 2.2 + 0.32 GiB of file, not 2 x 2.2 GiB
//   SwapStore store({.directory = nvme_path, .rank = rank,
//                    .record_bytes = {size_t{12} * 197'000'000, size_t{12} * 29'000'000}}, io);
//   AlignedBuffer buffer(store.largest_transfer_bytes());   // holds any record
//   store.write(k, buffer.bytes()).wait();                  // moves store.transfer_bytes(k)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/direct_io.h"
#include "runtime/signals.h"

namespace zt::swap {

struct SwapStoreOptions {
  std::string directory;  // nvme_path; must exist
  int rank = 0;
  std::vector<size_t> record_bytes;  // each record's size; at least one record (a record may be empty)
  DirectIoMode direct = DirectIoMode::automatic;
};

class SwapStore {
 public:
  // Removes stale swap files in the directory, creates this rank's file and reserves its size. Throws
  // zt::Error naming the path: a missing directory, no space for the file, a file system that refuses
  // O_DIRECT when options.direct is required. `io` must outlive the store.
  SwapStore(const SwapStoreOptions& options, AsyncFileIo& io);
  ~SwapStore();
  SwapStore(const SwapStore&) = delete;
  SwapStore& operator=(const SwapStore&) = delete;

  const std::string& path() const { return file_.path(); }
  bool direct() const { return file_.direct(); }
  // Why the file is not direct although direct I/O was asked for, or empty (IoFile::open's notice).
  const std::string& notice() const { return notice_; }
  int64_t record_count() const { return static_cast<int64_t>(record_bytes_.size()); }
  // Record `record`'s own bytes (SwapStoreOptions::record_bytes).
  size_t record_bytes(int64_t record) const;
  // What read/write of `record` move: its bytes rounded up to kDirectIoAlignment.
  size_t transfer_bytes(int64_t record) const;
  // Where `record` starts in the file: the sum of transfer_bytes of the records before it.
  uint64_t record_offset(int64_t record) const;
  // The largest transfer_bytes: a buffer of this many bytes holds any record.
  size_t largest_transfer_bytes() const { return largest_transfer_; }
  uint64_t file_bytes() const { return offsets_.back(); }
  AsyncFileIo& io() const { return io_; }

  // Moves record `record` between the file and the first transfer_bytes(record) bytes of `buffer` (aligned,
  // at least that many bytes). The buffer must stay untouched until the ticket is waited for.
  IoTicket read(int64_t record, std::span<std::byte> buffer);
  IoTicket write(int64_t record, std::span<const std::byte> buffer);
  // Whether `record` has been written since the file was made. One that has not holds zeros (the file is
  // new and its space reserved, not written), so a reader may zero its buffer instead of reading it: the
  // first pass over a fresh store (loading the initial parameters) then moves each record once, not twice.
  bool written(int64_t record) const;

 private:
  void check_transfer(int64_t record, size_t buffer_bytes, const std::byte* data) const;
  void track(const IoTicket& ticket);

  AsyncFileIo& io_;
  std::vector<size_t> record_bytes_;
  std::vector<uint64_t> offsets_;  // offsets_[k]: record k's offset; offsets_.back(): the file's size
  size_t largest_transfer_ = 0;
  std::string notice_;
  IoFile file_;
  std::unique_ptr<RemoveOnSignalExit> signal_removal_;
  std::vector<IoTicket> outstanding_;  // waited for by the destructor, so no request outlives the file
  std::vector<bool> written_;          // written_[k]: record k has been written (written())
};

// The size of a swap file of records of these sizes (Note [The swap store]): the sum of each rounded up to
// kDirectIoAlignment. Throws zt::Error when the sum overflows.
uint64_t swap_file_bytes(const std::vector<size_t>& record_bytes);

// "<directory>/zerotrain-swap.<host>.<pid>.rank<rank>".
std::string swap_file_path(const std::string& directory, int rank, long pid);

// Removes the swap files in `directory` of processes of this host that no longer exist; returns their
// paths. Files of live processes, of other hosts, and every other file are kept; a missing directory has
// none.
std::vector<std::string> remove_stale_swap_files(const std::string& directory);

}  // namespace zt::swap
