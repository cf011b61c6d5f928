// The persistent thread pool: every block exactly once, from several calling threads at once, nested jobs,
// exceptions, and the workers pinned where the OS allows it.
#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/parallel_blocks.h"
#include "runtime/thread_pool.h"

namespace zt {
namespace {

TEST(ThreadPool, RunsEveryBlockOnceOnSeveralThreads) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.run(1000, 4, [&](int64_t b) {
    hits[static_cast<size_t>(b)].fetch_add(1);
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_GE(ids.size(), 1u);
  // Again: the same workers serve the next job.
  std::atomic<int64_t> sum{0};
  pool.run(100, 4, [&](int64_t b) { sum += b; });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, JobsFromSeveralThreadsAndNestedJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep) {
        pool.run(10, 3, [&](int64_t) {
          pool.run(5, 3, [&](int64_t) { total.fetch_add(1); });  // nested: inline on this thread
        });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 20 * 10 * 5);
}

TEST(ThreadPool, RethrowsABlocksException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(50, 3,
                        [](int64_t b) {
                          if (b == 17) throw std::runtime_error("block 17");
                        }),
               std::runtime_error);
  std::atomic<int> n{0};
  pool.run(10, 3, [&](int64_t) { ++n; });  // still usable
  EXPECT_EQ(n.load(), 10);
}

TEST(ThreadPool, PinsWorkersWhereAllowed) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  ThreadPool pool(2);
  EXPECT_EQ(pool.pinned_workers(), 2);  // plain Linux lets a process pin its threads inside its own set
  ThreadPool unpinned(2, /*pin=*/false);
  EXPECT_EQ(unpinned.pinned_workers(), 0);
}

TEST(ParallelBlocks, UsesTheGlobalPool) {
  std::vector<int> out(100000, 0);
  detail::run_element_blocks_in_parallel(static_cast<int64_t>(out.size()), 0,
                                         [&](int64_t, int64_t b, int64_t e) {
                                           for (int64_t i = b; i < e; ++i)
                                             out[static_cast<size_t>(i)] = static_cast<int>(i);
                                         });
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int>(i));
  EXPECT_EQ(ThreadPool::global().workers(),
            static_cast<int>(std::max(1u, std::thread::hardware_concurrency())) - 1);
}

}  // namespace
}  // namespace zt
