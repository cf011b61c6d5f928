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
#pragma once

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

bool stop_requested();
int stop_signal();     // SIGINT or SIGTERM of the first request; 0 when none
int stop_exit_code();  // 128 + stop_signal(); 0 when no stop was requested

}  // namespace zt
