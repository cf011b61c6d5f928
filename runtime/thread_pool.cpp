#include "runtime/thread_pool.h"

#include <sched.h>

#include <algorithm>

#include "runtime/log.h"

namespace zt {
namespace {

// True on a thread that is running a job's blocks (a worker, or a caller inside run()).
thread_local bool t_in_job = false;

// The CPUs this process may run on, in order (all hardware threads when the set cannot be read).
std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) {
    const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int c = 0; c < n; ++c) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

ThreadPool::ThreadPool(int workers, bool pin) {
  const std::vector<int> cpus = allowed_cpus();
  threads_.reserve(static_cast<size_t>(std::max(0, workers)));
  for (int w = 0; w < workers; ++w) {
    const int cpu = cpus[static_cast<size_t>(w) % cpus.size()];
    threads_.emplace_back([this, w, cpu, pin] { worker_loop(w, cpu, pin); });
  }
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return started_ == workers; });
  if (pin && pinned_.load() < workers) {
    ZT_LOG(info) << "thread pool: " << workers - pinned_.load() << " of " << workers
                 << " workers could not be pinned to a core (sched_setaffinity refused); they run unpinned";
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
  return pool;
}

void ThreadPool::worker_loop(int index, int cpu, bool pin) {
  if (pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) == 0) pinned_.fetch_add(1);
  }
  t_in_job = true;  // a block that calls run() on a worker runs inline
  std::unique_lock lock(mutex_);
  ++started_;
  done_.notify_all();
  uint64_t seen = generation_;
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_workers_) continue;  // not needed for this job
    lock.unlock();
    drain();
    lock.lock();
    ++finished_;
    if (finished_ == job_workers_) done_.notify_all();
  }
}

void ThreadPool::drain() noexcept {
  for (int64_t b = next_.fetch_add(1, std::memory_order_relaxed); b < num_blocks_;
       b = next_.fetch_add(1, std::memory_order_relaxed)) {
    try {
      fn_(context_, b);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(num_blocks_, std::memory_order_relaxed);  // abandon the blocks not yet claimed
    }
  }
}

void ThreadPool::run_job(int64_t num_blocks, int threads, BlockFn fn, const void* context) {
  if (num_blocks <= 0) return;
  const int helpers =
      static_cast<int>(std::min<int64_t>({static_cast<int64_t>(threads) - 1, num_blocks - 1, workers()}));
  if (helpers <= 0 || t_in_job) {
    for (int64_t b = 0; b < num_blocks; ++b) fn(context, b);
    return;
  }
  std::lock_guard job(job_mutex_);
  {
    std::lock_guard lock(mutex_);
    fn_ = fn;
    context_ = context;
    num_blocks_ = num_blocks;
    job_workers_ = helpers;
    finished_ = 0;
    error_ = nullptr;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  wake_.notify_all();
  t_in_job = true;
  drain();
  t_in_job = false;
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return finished_ == job_workers_; });
    error = error_;
    fn_ = nullptr;
    context_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace zt
