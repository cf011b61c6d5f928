// Stage 3 with offload_param device nvme (ZeRO-Infinity's parameter offload): the rank's compute-dtype
// parameter shard lives in a swap file, one record per unit slice, and the host keeps only `buffer_count`
// buffers of one record each (pinned on a GPU with pin_memory) instead of a host arena of the shard.
//
// Note [Parameters on disk]
// Record u is unit u's slice of the rank's shard in the compute dtype (slice_numel x 2 bytes in bf16/f16,
// 4 in f32), each of its own size padded to the direct-I/O alignment (optim/swap/swap_store.h), so the file
// is the shard; each buffer holds the largest record. The file is
// "<nvme_path>/zerotrain-parameters/zerotrain-swap.<host>.<pid>.rank<r>": a subdirectory, so that it never
// collides with the optimizer state's swap file of the same rank when both offloads share nvme_path (the
// store names its file by rank alone). The subdirectory stays (empty) after the run; stale files of dead
// processes in it are removed as in nvme_path.
// The buffers are a swap record cache (Note [The swap record cache], optim/swap/swap_record_cache.h: the
// buffer states, which buffer a new read takes, a buffer reused only after its transfer); this shard is
// its hook-order policy. acquire(u) takes u from the cache (reading it now if no buffer has it, or, with
// read false, reading nothing); prefetch(next) starts reads of the records the caller will acquire next into
// buffers that hold none of them nor the held one, as far as the buffers allow (buffer_count - 1 records
// ahead), never waiting for a transfer in flight to free a buffer (the rank thread has a gather to do).
// release(u, modified) writes u back asynchronously (waited for when its buffer is needed again, or at
// destruction) or marks it clean.
// The ZeRO engine acquires a record per stage-3 gather (forward and backward) and per CPU update of a unit,
// and prefetches in the order the model's hooks and the update use the units (optim/zero/unit_order.h,
// UnitOrder::upcoming).
//
//   SwappedParameterShard shard({.directory = nvme_path, .rank = r, .record_numel = slices,
//                                .dtype = DType::bf16, .buffer_count = 5}, io_options);
//   Tensor values = shard.acquire(u);      // the slice, host memory, valid until release(u)
//   shard.prefetch(next_units);
//   ... copy values to the device ...
//   shard.release(u, /*modified=*/false);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optim/swap/swap_record_cache.h"
#include "optim/swap/swap_store.h"
#include "runtime/arena.h"
#include "runtime/direct_io.h"
#include "runtime/tensor.h"

namespace zt::optim {

struct SwappedParameterShardOptions {
  std::string directory;  // offload_param.nvme_path (the file goes into its subdirectory)
  int rank = 0;
  std::vector<int64_t> record_numel;          // elements of each record: the rank's slice of each unit
  DType dtype = DType::f32;                   // the compute dtype
  int buffer_count = 5;                       // DeepSpeed's offload_param.buffer_count
  MemoryKind buffer_kind = MemoryKind::host;  // pinned_host: page-locked buffers (GPU, pin_memory)
  DirectIoMode direct = DirectIoMode::automatic;
};

// Traffic since the shard was made.
struct SwappedParameterStats {
  uint64_t records_read = 0;        // every read started (acquire's own and prefetches)
  uint64_t records_prefetched = 0;  // reads started by prefetch
  uint64_t prefetch_hits = 0;       // acquires that found their record read (or being read) ahead
  uint64_t records_written = 0;
  double io_wait_seconds = 0;  // acquire, prefetch and the destructor waiting for transfers
};

class SwappedParameterShard {
 public:
  // Creates the subdirectory and the swap file (zeros), and the buffers. Throws zt::Error for no records,
  // fewer than one buffer, and whatever SwapStore and AsyncFileIo throw (naming the path).
  SwappedParameterShard(const SwappedParameterShardOptions& options, const IoOptions& io_options);
  // Waits for every transfer (quietly), then removes the file.
  ~SwappedParameterShard();
  SwappedParameterShard(const SwappedParameterShard&) = delete;
  SwappedParameterShard& operator=(const SwappedParameterShard&) = delete;

  // Record `record`'s values (a 1-D host tensor of record_numel[record] elements of the dtype), valid until
  // release(record). `read` false: the caller overwrites all of it, so nothing is read from the file.
  Tensor acquire(size_t record, bool read = true);
  // Ends the hold; `modified` writes the buffer back to the record.
  void release(size_t record, bool modified);
  // Starts reads of `upcoming` (in the order given: the records the caller acquires next) that no buffer
  // has yet, while buffers that hold none of them (nor the held record) are left.
  void prefetch(std::span<const size_t> upcoming);
  // Writes back every modified buffer not yet written and waits for every transfer in flight: afterwards
  // no buffer is busy, so a prefetch finds every unheld buffer free.
  void wait_for_transfers();

  size_t record_count() const { return record_numel_.size(); }
  int buffer_count() const { return cache_->buffer_count(); }
  const std::string& path() const { return store_->path(); }
  bool pinned() const { return buffers_.pinned(); }
  const SwappedParameterStats& stats() const;

  // Host bytes of the buffers (buffer_count x the largest record, plus one alignment unit) and disk bytes
  // of the file (the sum of the records) a shard with these records takes (preflights, zero_state_bytes).
  static size_t buffer_bytes_for(const std::vector<int64_t>& record_numel, DType dtype, int buffer_count);
  static uint64_t file_bytes_for(const std::vector<int64_t>& record_numel, DType dtype);
  // One buffer's bytes: the largest record, aligned.
  static size_t record_buffer_bytes(const std::vector<int64_t>& record_numel, DType dtype);
  // Where the file goes: "<nvme_path>/zerotrain-parameters".
  static std::string file_directory(const std::string& nvme_path);

 private:
  std::vector<int64_t> record_numel_;
  DType dtype_;
  std::unique_ptr<AsyncFileIo> io_;
  std::unique_ptr<swap::SwapStore> store_;
  Arena buffers_;      // buffer_count buffers of stride_ bytes each
  size_t stride_ = 0;  // the largest record, aligned: any record fits any buffer
  std::unique_ptr<swap::SwapRecordCache> cache_;
  mutable SwappedParameterStats stats_;  // the cache's counters under this shard's names (stats())
};

}  // namespace zt::optim
