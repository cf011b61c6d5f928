#include "runtime/signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <utility>

#include "runtime/check.h"

namespace zt {
namespace {

// Written by the handler, read by the loop: a lock-free atomic int is async-signal-safe, and unlike a
// volatile sig_atomic_t it also orders with the other threads that may poll it.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

int g_installed = 0;  // live scopes (under g_install_mutex)
std::mutex g_install_mutex;
// The tool name for the handler's message: copied at install, read only in the handler.
char g_tool[64] = "zerotrain";
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

// Note [Files removed on a signal exit]: fixed slots, so the handler needs no allocation or lock. A slot's
// path is written before `used` is set (release) and `used` is cleared before the slot is reused, so the
// handler (acquire) never reads a half-written path.
struct RemovedFileSlot {
  std::atomic<bool> used{false};
  char path[4096] = {};
};
RemovedFileSlot g_removed_files[kMaxFilesRemovedOnSignalExit];
std::atomic<bool> g_slot_claimed[kMaxFilesRemovedOnSignalExit];

void remove_registered_files() {
  for (RemovedFileSlot& slot : g_removed_files) {
    if (slot.used.load(std::memory_order_acquire)) ::unlink(slot.path);
  }
}

// write(2) of a NUL-terminated string: the only output a signal handler may do.
void write_stderr(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int signal) {
  const char* name = signal == SIGINT ? "SIGINT" : "SIGTERM";
  int expected = 0;
  if (g_stop_signal.compare_exchange_strong(expected, signal)) {
    write_stderr("\n");
    write_stderr(g_tool);
    write_stderr(": ");
    write_stderr(name);
    write_stderr(
        " received: stopping after this optimizer step with a checkpoint (send it again to stop "
        "at once)\n");
    return;
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGINT, &default_action, nullptr);
  sigaction(SIGTERM, &default_action, nullptr);
  write_stderr(g_tool);
  write_stderr(": second ");
  write_stderr(name);
  write_stderr(": stopping now, without a checkpoint\n");
  remove_registered_files();
  ::_exit(128 + signal);
}

}  // namespace

ScopedStopSignals::ScopedStopSignals(const char* tool) {
  // Scopes may overlap (trainers of an emulated process group, each on its own thread): the first installs,
  // the last restores.
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed++ > 0) return;
  std::strncpy(g_tool, tool, sizeof(g_tool) - 1);
  g_tool[sizeof(g_tool) - 1] = '\0';
  g_stop_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // Both signals blocked while either handler runs, so two arriving together are seen one after the other.
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  // Interrupted system calls (a checkpoint write in progress) restart instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  // A signal the parent set to be ignored stays ignored (a shell starts background jobs with SIGINT
  // ignored, so that Ctrl-C does not reach them; nohup-like wrappers do the same).
  for (auto [signal, previous] : {std::pair{SIGINT, &g_previous_int}, std::pair{SIGTERM, &g_previous_term}}) {
    sigaction(signal, nullptr, previous);
    if (previous->sa_handler != SIG_IGN) sigaction(signal, &action, nullptr);
  }
}

ScopedStopSignals::~ScopedStopSignals() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (--g_installed > 0) return;
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
}

RemoveOnSignalExit::RemoveOnSignalExit(const std::string& path) {
  ZT_CHECK(path.size() < sizeof(RemovedFileSlot::path), "path too long to register for removal: ", path);
  for (int i = 0; i < kMaxFilesRemovedOnSignalExit; ++i) {
    if (g_slot_claimed[i].exchange(true)) continue;
    RemovedFileSlot& slot = g_removed_files[i];
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.used.store(true, std::memory_order_release);
    slot_ = i;
    return;
  }
  ZT_FAIL("more than ", kMaxFilesRemovedOnSignalExit, " files registered for removal on a signal exit");
}

RemoveOnSignalExit::~RemoveOnSignalExit() {
  g_removed_files[slot_].used.store(false, std::memory_order_release);
  g_slot_claimed[slot_].store(false);
}

bool stop_requested() {
  return g_stop_signal.load() != 0;
}

int stop_signal() {
  return g_stop_signal.load();
}

int stop_exit_code() {
  const int signal = g_stop_signal.load();
  return signal == 0 ? 0 : 128 + signal;
}

}  // namespace zt
