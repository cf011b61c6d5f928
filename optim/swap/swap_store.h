// The disk tier's working store: one file per rank under nvme_path holding N fixed-size records (e.g. the
// fp32 master, Adam m and v of one block of a rank's optimizer shard), read and written asynchronously with
// direct I/O (runtime/direct_io.h).
//
// Note [The swap store]
// Layout: record k occupies [k * stride, k * stride + record_bytes) of the file, stride = record_bytes
// rounded up to kDirectIoAlignment, so every record starts and ends where O_DIRECT can transfer it; a
// record is moved whole, through a buffer of at least `stride` bytes (the tail past record_bytes is
// padding). The record's meaning is the caller's: the store moves bytes.
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
//   SwapStore store({.directory = nvme_path, .rank = rank, .record_bytes = 3 * block_floats * 4,
//                    .record_count = blocks}, io);
//   AlignedBuffer buffer(store.record_stride());
//   store.write(k, buffer.bytes()).wait();
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
  size_t record_bytes = 0;  // > 0
  int64_t record_count = 0;
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
  int64_t record_count() const { return record_count_; }
  size_t record_bytes() const { return record_bytes_; }
  size_t record_stride() const { return stride_; }
  uint64_t file_bytes() const {
    return static_cast<uint64_t>(stride_) * static_cast<uint64_t>(record_count_);
  }
  AsyncFileIo& io() const { return io_; }

  // Moves record `record` between the file and the first record_stride() bytes of `buffer` (aligned, at
  // least record_stride() bytes). The buffer must stay untouched until the ticket is waited for.
  IoTicket read(int64_t record, std::span<std::byte> buffer);
  IoTicket write(int64_t record, std::span<const std::byte> buffer);

 private:
  uint64_t offset_of(int64_t record, size_t buffer_bytes, const std::byte* data) const;
  void track(const IoTicket& ticket);

  AsyncFileIo& io_;
  size_t record_bytes_ = 0;
  size_t stride_ = 0;
  int64_t record_count_ = 0;
  std::string notice_;
  IoFile file_;
  std::unique_ptr<RemoveOnSignalExit> signal_removal_;
  std::vector<IoTicket> outstanding_;  // waited for by the destructor, so no request outlives the file
};

// "<directory>/zerotrain-swap.<host>.<pid>.rank<rank>".
std::string swap_file_path(const std::string& directory, int rank, long pid);

// Removes the swap files in `directory` of processes of this host that no longer exist; returns their
// paths. Files of live processes, of other hosts, and every other file are kept; a missing directory has
// none.
std::vector<std::string> remove_stale_swap_files(const std::string& directory);

}  // namespace zt::swap
