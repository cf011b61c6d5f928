// The disk tier's step: for each record k of a swap store, read it, let the CPU update it, write it back —
// with the reads of the next records and the writes of the previous ones in flight while record k is
// updated (DeepSpeed's PipelinedOptimizerSwapper: "reads sub-group k+1 and writes k-1 while computing k").
//
// Note [The swap pipeline]
// Record j lives in buffer j % B (B = buffers.size()). The update of record k is the only user of its buffer;
// the other buffers hold reads ahead (records k+1 .. k+L) and writes behind (records k-1, ...). A read into
// a buffer first waits for the write that last used it, so a buffer is never overwritten while its bytes
// are still going to disk. The lookahead L follows DeepSpeed's flags:
//   pipeline_read false   L = 0: record k is read when its update is due (the read does not overlap work)
//   pipeline_read true    L = B - 2 with pipeline_write (the buffer of record k-1 is still being written),
//                         L = B - 1 without; at least 1
//   pipeline_write false  each write is waited for before the next record (the write does not overlap)
//   pipeline_write true   record k's write runs during the updates of k+1, ...
// So full overlap (read k+1 and write k-1 during the update of k) needs 3 buffers; more buffers read further
// ahead. Passes that only read (a checkpoint save: records out of the store) or only write (the first fill)
// are the same loop with the other direction off. Every transfer is waited for before run_swap_pipeline
// returns or throws (an update or a transfer failed), so the buffers are free afterwards.
//
//   std::vector<AlignedBuffer> buffers;   // 3 x store.largest_transfer_bytes()
//   run_swap_pipeline(store, buffers, 0, store.record_count(), {},
//                     [&](int64_t k, std::span<std::byte> record) { adamw_step(k, record); });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "optim/swap/swap_store.h"
#include "runtime/direct_io.h"

namespace zt::swap {

struct SwapPipelineOptions {
  bool pipeline_read = true;   // read ahead while updating (DeepSpeed's pipeline_read)
  bool pipeline_write = true;  // write behind while updating (DeepSpeed's pipeline_write)
  bool read = true;            // false: records start as whatever update writes (the first fill)
  bool write = true;           // false: records are only read (a checkpoint save)
};

// Where the time of the passes went (each pass adds to it), for the disk benchmark and the step's report.
struct SwapPipelineStats {
  double update_seconds = 0;   // inside update()
  double io_wait_seconds = 0;  // waiting for reads before an update, for writes before reusing a buffer
  double total_seconds = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

// The fewest buffers the options work with: 1, plus one for reading ahead, plus one for writing behind.
int swap_pipeline_min_buffers(const SwapPipelineOptions& options);

// Calls update(record, bytes) for record = first .. first + count - 1 in order, `bytes` being the record's
// record_bytes(record) in one of `buffers` (each aligned, at least the pass's largest transfer_bytes; a
// transfer moves only its record's transfer_bytes), read from the store before (options.read) and written
// back after (options.write) — Note [The swap pipeline]. Throws
// zt::Error for too few or too small buffers, and rethrows an update's or a transfer's error once every
// transfer has finished.
void run_swap_pipeline(SwapStore& store, std::span<AlignedBuffer> buffers, int64_t first, int64_t count,
                       const SwapPipelineOptions& options,
                       const std::function<void(int64_t record, std::span<std::byte> bytes)>& update,
                       SwapPipelineStats* stats = nullptr);

}  // namespace zt::swap
