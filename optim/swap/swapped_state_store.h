// A rank's offloaded optimizer state (fp32 master, Adam m and v) kept on disk, block by block, with a few
// host buffers: the disk tier behind the host tier's block interface (acquire a block's three spans, update
// or read them, release it). The ZeRO engine's CPU update walks the blocks in order, so the store reads the
// next blocks ahead and writes released ones behind while the CPU updates the current one.
//
// Note [Swapped optimizer state]
// Each block is one record of a swap store (optim/swap/swap_store.h): master | m | v of the block's numel
// elements, 12 x numel bytes, so the file is the sum of the blocks (each aligned), and a transfer moves only
// its block's bytes. `buffer_count` aligned host buffers, each sized for the largest block, form a swap
// record cache (Note [The swap record cache], optim/swap/swap_record_cache.h: the buffer states, which
// buffer a new read takes, a buffer reused only after its transfer); this store is its block-order policy.
// acquire(k) takes k from the cache (reading it now if no buffer has it). Then, with pipeline_read, it
// starts reads of k+1 .. k+L (wrapping at the end, since the next step starts again at block 0) into
// buffers that do not hold the blocks of that window, waiting for a transfer to free one if need be —
// Note [The swap pipeline]'s lookahead: L = buffers - 2 with pipeline_write (one buffer stays for the
// write behind), buffers - 1 without. release(k, modified) writes k back if modified (waited for at once
// unless pipeline_write) or marks it clean; release(k, modified, WriteBack::later) leaves it dirty in its
// buffer until the buffer is needed or flush() — the loading path, which changes a block one tensor at a
// time and would otherwise write it once per tensor (a dozen times a layer). Blocks start as zeros (the
// reserved file), and a block never written is zero-filled in its buffer instead of read.
// With more blocks than buffers, a sequential pass reads every block from disk and writes every modified
// one back: the host holds buffer_count records, not the shard.
//
//   SwappedStateStore store({.directory = nvme_path, .rank = r, .block_numel = sizes, .buffer_count = 4,
//                            .pipeline_read = true, .pipeline_write = true}, io_options);
//   SwappedStateBlock b = store.acquire(k);   // b.master, b.exp_avg, b.exp_avg_sq
//   adamw(b);
//   store.release(k, /*modified=*/true);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optim/swap/swap_record_cache.h"
#include "optim/swap/swap_store.h"
#include "runtime/direct_io.h"

namespace zt::swap {

struct SwappedStateOptions {
  std::string directory;  // nvme_path
  int rank = 0;
  std::vector<int64_t> block_numel;  // elements of each block (fp32 each for master, m and v)
  int buffer_count = 4;              // DeepSpeed's offload_optimizer.buffer_count
  bool pipeline_read = false;        // DeepSpeed's offload_optimizer.pipeline_read
  bool pipeline_write = false;       // DeepSpeed's offload_optimizer.pipeline_write
  DirectIoMode direct = DirectIoMode::automatic;
};

struct SwappedStateBlock {
  std::span<float> master;
  std::span<float> exp_avg;
  std::span<float> exp_avg_sq;
};

// Traffic of the store since it was made.
struct SwappedStateStats {
  uint64_t bytes_read = 0;  // each block's transfer_bytes, not the buffer's size
  uint64_t bytes_written = 0;
  uint64_t blocks_read = 0;
  uint64_t blocks_written = 0;
  double io_wait_seconds = 0;  // acquire/release/flush waiting for transfers
};

class SwappedStateStore {
 public:
  // Creates the swap file (Note [The swap store]) and the buffers. Throws zt::Error for too few buffers
  // for the pipeline flags (naming buffer_count), and whatever SwapStore and AsyncFileIo throw.
  SwappedStateStore(const SwappedStateOptions& options, const IoOptions& io_options);
  // Waits for every transfer (quietly), then removes the file.
  ~SwappedStateStore();
  SwappedStateStore(const SwappedStateStore&) = delete;
  SwappedStateStore& operator=(const SwappedStateStore&) = delete;

  // Block `block`'s master, m and v, valid until release(block). One block at a time.
  SwappedStateBlock acquire(size_t block);
  // Ends the hold; `modified` (the caller changed the spans) writes the block back, now or later.
  void release(size_t block, bool modified, WriteBack when = WriteBack::now);
  size_t block_count() const { return block_numel_.size(); }
  // Writes every block left dirty and waits for every write in flight (rethrowing the first failure).
  void flush();

  const SwapStore& store() const { return *store_; }
  const SwappedStateStats& stats() const;
  // Host bytes of the buffers: what the store keeps in memory whatever the shard's size.
  size_t buffer_bytes() const;
  // Bytes of host memory (buffer_count x the largest record) and of disk (the sum of the records) a store
  // with these options takes, for preflights and plans.
  static size_t buffer_bytes_for(const SwappedStateOptions& options);
  static uint64_t file_bytes_for(const SwappedStateOptions& options);

 private:
  SwappedStateBlock view(size_t block, std::span<std::byte> buffer) const;

  std::vector<int64_t> block_numel_;
  int64_t lookahead_ = 0;
  std::unique_ptr<AsyncFileIo> io_;
  std::unique_ptr<SwapStore> store_;
  std::unique_ptr<SwapRecordCache> cache_;
  mutable SwappedStateStats stats_;  // the cache's counters under this store's names (stats())
};

}  // namespace zt::swap
