// Stopping a run on SIGINT / SIGTERM without losing it.
//
// Note [Stopping on a signal]
// Ctrl-C sends SIGINT; preemptible clusters send SIGTERM and, after a grace period, SIGKILL. The first
// SIGINT or SIGTERM only records a stop request: the training loop asks stop_requested() after each
// optimizer step, writes a checkpoint and returns stop_exit_code() (128 + the signal: 130 for SIGINT, 143
// for SIGTERM, what a shell reports for a process that signal killed). A second SIGINT or SIGTERM means
// "now": its handler restores the default dispositions and _exits at once with the same code; a
// checkpoint being written then is abandoned, and its temp file is removed on the next start
// (runtime/atomic_file.h, remove_stale_temp_files). The handlers only store the signal number and write
// one line with write(2), both async-signal-safe. A signal that was ignored when the handlers were installed
// (a shell's background job ignores SIGINT) stays ignored.
//
//   ScopedStopSignals stop_signals("train_mrpc");   // installs; the destructor restores the old handlers
//   while (training) {
//     step();
//     if (stop_requested()) { save_checkpoint(); return stop_exit_code(); }
//   }
//
// Note [Files removed on a signal exit]
// The second signal's _exit skips destructors, so working files that only destructors remove would stay
// behind: the disk tier's swap files (optim/swap/swap_store.h) can be hundreds of GiB. A file registered
// with RemoveOnSignalExit is unlinked by that handler before it exits (unlink(2) is async-signal-safe).
// A process killed by SIGKILL or a crash still leaves its files; their owners remove those of dead
// processes on the next start (pid in the name).
#pragma once

#include <string>

namespace zt {

class ScopedStopSignals {
 public:
  // `tool` names the program in the line printed on a signal. Installing clears any earlier stop request.
  // Scopes may overlap (on several threads): the first installs the handlers, the last restores the old.
  explicit ScopedStopSignals(const char* tool);
  ~ScopedStopSignals();
  ScopedStopSignals(const ScopedStopSignals&) = delete;
  ScopedStopSignals& operator=(const ScopedStopSignals&) = delete;
};

// Registers `path` for removal by the second signal's exit (Note [Files removed on a signal exit]) for the
// lifetime of the object; it does not remove the file on destruction (the owner does). At most
// kMaxFilesRemovedOnSignalExit registrations at once; paths up to 4095 bytes; zt::Error beyond either.
class RemoveOnSignalExit {
 public:
  explicit RemoveOnSignalExit(const std::string& path);
  ~RemoveOnSignalExit();
  RemoveOnSignalExit(const RemoveOnSignalExit&) = delete;
  RemoveOnSignalExit& operator=(const RemoveOnSignalExit&) = delete;

 private:
  int slot_ = -1;
};
inline constexpr int kMaxFilesRemovedOnSignalExit = 128;  // a swap file per in-process rank (at most 64)

bool stop_requested();
int stop_signal();     // SIGINT or SIGTERM of the first request; 0 when none
int stop_exit_code();  // 128 + stop_signal(); 0 when no stop was requested

}  // namespace zt
