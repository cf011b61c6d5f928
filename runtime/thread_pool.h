// A persistent pool of worker threads pinned to cores, for the CPU's elementwise loops (AdamW, clipping,
// init; runtime/parallel_blocks.h). Starting threads per call costs tens of microseconds per thread and
// lets the OS move them between cores mid-loop; a 1 GiB AdamW shard on the GPU machine's 16 cores runs in
// ~0.1 s, where both matter, and the offload pipeline calls it once per bucket.
//
// Worker w is pinned (sched_setaffinity) to the w-th CPU of the process's allowed set, wrapping around;
// the calling thread joins in and is not pinned (it is a rank's thread). A CPU that cannot be pinned
// (a container's cgroup, a seccomp filter) is logged once and the worker runs unpinned: pinning is speed,
// never correctness.
//
// Jobs: run() calls run_block(b) once for every b in [0, num_blocks), on the caller and up to threads - 1
// workers, blocks claimed dynamically. Jobs from several threads (in-process ranks) run one at a time; a
// job started from inside a job (a block that calls run()) runs on its calling thread alone, so nesting
// cannot deadlock. A block that throws: the first exception is rethrown by run() once every block is done
// or abandoned.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace zt {

class ThreadPool {
 public:
  // `workers` threads besides the caller (>= 0); pin: pin each to a core.
  explicit ThreadPool(int workers, bool pin = true);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool: hardware threads - 1 workers, pinned. Started on first use.
  static ThreadPool& global();

  int workers() const { return static_cast<int>(threads_.size()); }
  int pinned_workers() const { return pinned_.load(); }  // after the workers started (constructor waits)

  template <typename RunBlock>
  void run(int64_t num_blocks, int threads, const RunBlock& run_block) {
    run_job(
        num_blocks, threads, [](const void* f, int64_t b) { (*static_cast<const RunBlock*>(f))(b); },
        &run_block);
  }

 private:
  using BlockFn = void (*)(const void* context, int64_t block);
  void run_job(int64_t num_blocks, int threads, BlockFn fn, const void* context);
  void worker_loop(int index, int cpu, bool pin);
  void drain() noexcept;

  std::vector<std::thread> threads_;
  std::atomic<int> pinned_{0};
  std::mutex job_mutex_;  // one job at a time
  std::mutex mutex_;      // guards the fields below
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int started_ = 0;
  // The current job.
  BlockFn fn_ = nullptr;
  const void* context_ = nullptr;
  int64_t num_blocks_ = 0;
  int job_workers_ = 0;  // workers taking part: indices [0, job_workers_)
  int finished_ = 0;     // of those, how many are done
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
};

}  // namespace zt
