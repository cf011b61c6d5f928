#include "tests/support/rank_threads.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

namespace zt::test {

std::vector<std::string> run_ranks(Comms& comms, const std::function<void(Communicator&)>& fn,
                                   std::chrono::seconds deadline) {
  const size_t world = comms.size();
  std::vector<std::string> errors(world);
  std::mutex mutex;
  std::condition_variable cv;
  size_t finished = 0;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(exception without message)";
      }
      std::lock_guard lock(mutex);
      ++finished;
      cv.notify_all();
    });
  }
  {
    std::unique_lock lock(mutex);
    if (!cv.wait_for(lock, deadline, [&] { return finished == world; })) {
      ADD_FAILURE() << "ranks did not finish within " << deadline.count() << " s (hang); aborting the group";
      comms[0]->abort("test harness deadline");
      // Ranks that even an abort cannot wake would block join() forever: end the process, loudly.
      if (!cv.wait_for(lock, std::chrono::seconds(5), [&] { return finished == world; })) {
        std::fprintf(stderr, "run_ranks: ranks still blocked 5 s after abort; exiting\n");
        std::_Exit(1);
      }
    }
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expect_all_succeeded(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace zt::test
