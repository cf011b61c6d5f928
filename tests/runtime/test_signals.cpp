#include "runtime/signals.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace zt {
namespace {

// Each case runs in a child process: the parent sends it signals and reads how it ended. The child tells
// the parent through a pipe when it is ready for the next signal, so no signal is sent too early.
class StopSignalChild {
 public:
  // `body` runs in the child with the write end of the pipe; its return value is the child's exit code.
  template <typename Body>
  explicit StopSignalChild(Body body) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    std::fflush(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      close(fds[0]);
      _exit(body(fds[1]));
    }
    close(fds[1]);
    read_end_ = fds[0];
  }
  ~StopSignalChild() { close(read_end_); }

  // Blocks until the child writes one byte (false when it ended first).
  bool wait_ready() {
    char byte = 0;
    return read(read_end_, &byte, 1) == 1;
  }
  void send(int signal) { kill(pid_, signal); }
  // The child's wait status.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    return status;
  }

 private:
  pid_t pid_ = -1;
  int read_end_ = -1;
};

void tell_parent(int fd) {
  const char byte = 1;
  ssize_t ignored = write(fd, &byte, 1);
  (void)ignored;
}

// The loop of Note [Stopping on a signal]: works in steps until a stop is requested, then exits with the
// stop's code. Exit 1 if no request arrives within 20 s.
int train_until_stopped(int ready_fd) {
  ScopedStopSignals stop_signals("test");
  tell_parent(ready_fd);
  for (int step = 0; step < 2000; ++step) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (stop_requested()) return stop_exit_code();
  }
  return 1;
}

TEST(StopSignals, FirstSigtermFinishesTheStepAndExits143) {
  StopSignalChild child(train_until_stopped);
  ASSERT_TRUE(child.wait_ready());
  child.send(SIGTERM);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 143);
}

TEST(StopSignals, FirstSigintFinishesTheStepAndExits130) {
  StopSignalChild child(train_until_stopped);
  ASSERT_TRUE(child.wait_ready());
  child.send(SIGINT);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
}

// The second signal ends a child stuck in a long "checkpoint write" at once, with the second signal's code.
TEST(StopSignals, SecondSignalStopsAtOnce) {
  StopSignalChild child([](int ready_fd) {
    ScopedStopSignals stop_signals("test");
    tell_parent(ready_fd);
    while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (stop_signal() != SIGINT) return 3;
    tell_parent(ready_fd);  // saw the first request; now "writing a checkpoint" for 20 s
    std::this_thread::sleep_for(std::chrono::seconds(20));
    return 1;
  });
  ASSERT_TRUE(child.wait_ready());
  child.send(SIGINT);
  ASSERT_TRUE(child.wait_ready());
  const auto start = std::chrono::steady_clock::now();
  child.send(SIGTERM);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 143);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Destroying the installer restores the previous dispositions (here the default: SIGTERM kills), and a new
// installer starts without the old request.
TEST(StopSignals, TheInstallerRestoresThePreviousHandlers) {
  StopSignalChild child([](int ready_fd) {
    {
      ScopedStopSignals stop_signals("test");
      raise(SIGTERM);
      if (!stop_requested() || stop_signal() != SIGTERM || stop_exit_code() != 143) return 3;
    }
    {
      ScopedStopSignals again("test");
      if (stop_requested() || stop_exit_code() != 0) return 4;
    }
    raise(SIGTERM);
    return 1;
  });
  const int status = child.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

// A background job of a shell starts with SIGINT ignored, so that Ctrl-C at the terminal does not stop it;
// installing the stop handlers keeps it that way.
TEST(StopSignals, AnIgnoredSignalStaysIgnored) {
  StopSignalChild child([](int ready_fd) {
    std::signal(SIGINT, SIG_IGN);
    ScopedStopSignals stop_signals("test");
    raise(SIGINT);
    if (stop_requested()) return 3;
    raise(SIGTERM);
    return stop_exit_code();
  });
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 143);
}

// The second signal's exit skips destructors; a registered working file is removed by the handler, an
// unregistered one (and one whose registration ended) stays.
TEST(StopSignals, SecondSignalRemovesRegisteredFiles) {
  const std::string dir = ::testing::TempDir();
  const std::string kept = dir + "/zt_signal_kept_" + std::to_string(getpid());
  const std::string removed = dir + "/zt_signal_removed_" + std::to_string(getpid());
  const std::string released = dir + "/zt_signal_released_" + std::to_string(getpid());
  for (const std::string& p : {kept, removed, released}) std::fclose(std::fopen(p.c_str(), "w"));
  StopSignalChild child([&](int ready_fd) {
    ScopedStopSignals stop_signals("test");
    { RemoveOnSignalExit no_longer(released); }
    RemoveOnSignalExit registration(removed);
    tell_parent(ready_fd);
    while (!stop_requested()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    tell_parent(ready_fd);
    std::this_thread::sleep_for(std::chrono::seconds(20));
    return 1;
  });
  ASSERT_TRUE(child.wait_ready());
  child.send(SIGINT);
  ASSERT_TRUE(child.wait_ready());
  child.send(SIGINT);
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  EXPECT_NE(access(removed.c_str(), F_OK), 0) << removed << " should have been removed";
  EXPECT_EQ(access(kept.c_str(), F_OK), 0);
  EXPECT_EQ(access(released.c_str(), F_OK), 0);
  for (const std::string& p : {kept, released}) std::remove(p.c_str());
}

TEST(StopSignals, NothingIsRequestedWithoutASignal) {
  ScopedStopSignals stop_signals("test");
  EXPECT_FALSE(stop_requested());
  EXPECT_EQ(stop_signal(), 0);
  EXPECT_EQ(stop_exit_code(), 0);
}

}  // namespace
}  // namespace zt
