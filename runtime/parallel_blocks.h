// Shared by the CPU loops of model/ and optim/ (init, AdamW, clipping): splits elementwise work into
// fixed-size blocks and runs them on the process's persistent, core-pinned thread pool
// (runtime/thread_pool.h).
//
// Blocks have a fixed size that does not depend on the thread count, and every block's result is written to
// its own place (elements, or a per-block partial sum combined in block order afterwards), so results are
// bitwise identical for any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>

#include "runtime/thread_pool.h"

namespace zt::detail {

// Elements per block: large enough that claiming a block is negligible, small enough (128 KiB of f32) that a
// block of several streams stays in L2 while it is converted or summed.
inline constexpr int64_t kBlockElements = int64_t{1} << 15;

// The number of threads to use when the caller passes 0 ("all hardware threads").
inline int resolve_thread_count(int requested) {
  if (requested > 0) return requested;
  unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

// Calls run_block(b) exactly once for every b in [0, num_blocks), on up to `threads` threads (0: all): the
// caller and workers of ThreadPool::global(). Blocks are claimed dynamically, so uneven blocks (ranges of
// different lengths) still balance. An exception from run_block is rethrown here after the other blocks.
template <typename RunBlock>
void run_blocks_in_parallel(int64_t num_blocks, int threads, const RunBlock& run_block) {
  const int workers = static_cast<int>(std::min<int64_t>(resolve_thread_count(threads), num_blocks));
  if (workers <= 1) {
    for (int64_t b = 0; b < num_blocks; ++b) run_block(b);
    return;
  }
  ThreadPool::global().run(num_blocks, workers, run_block);
}

// The number of kBlockElements blocks covering n elements.
inline int64_t element_block_count(int64_t n) {
  return (n + kBlockElements - 1) / kBlockElements;
}

// Calls run_range(b, begin, end) for every block b of [0, n) cut into kBlockElements pieces ([begin, end),
// the last one shorter), on up to `threads` threads: the elementwise loops' common form.
template <typename RunRange>
void run_element_blocks_in_parallel(int64_t n, int threads, const RunRange& run_range) {
  run_blocks_in_parallel(element_block_count(n), threads, [&](int64_t b) {
    const int64_t begin = b * kBlockElements;
    run_range(b, begin, std::min(n, begin + kBlockElements));
  });
}

}  // namespace zt::detail
