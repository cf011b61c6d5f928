// StepProfile: where the time of a training step goes, by named segment, without a profiler.
//
// Code marks segment boundaries; the time between a mark and the previous one is charged to the later
// mark's segment name, summed over every occurrence (all 24 layers' "attention" add up):
//
//   StepProfile& prof = StepProfile::global();
//   prof.mark_start();                 // the step begins
//   ... embeddings ...   prof.mark("fwd.embeddings");
//   ... attention ...    prof.mark("fwd.attention");
//   prof.collect();                    // waits for the device, adds the segment times to the totals
//   std::cout << prof.report();
//
// On a CUDA build with a GPU the marks are CUDA events on the marking thread's current stream (where every
// kernel entry point runs), so a segment measures device time between the boundaries, not launch time;
// otherwise they are host steady_clock readings. Disabled (every call a no-op) unless enabled with
// enable(true) or the environment variable ZT_PROFILE=1, so the marks stay in the model at no cost. Not
// thread-safe: one training thread marks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace zt {

class StepProfile {
 public:
  static StepProfile& global();
  // For threads other than the one that marks (in-process ranks 1..N-1 run the same model code): global()
  // on the calling thread returns a disabled profile from then on, so their marks cost nothing and race
  // with no one.
  static void disable_on_this_thread();

  bool enabled() const { return enabled_; }
  void enable(bool on);

  void mark_start();
  void mark(std::string_view segment);
  // Resolves the pending marks (synchronizing the device) and adds them to the totals.
  void collect();
  // Per segment: total ms, ms per collected step, share of the total; sorted by total.
  std::string report() const;
  // Per segment: ms per collected step (what report() prints in its ms/step column).
  std::map<std::string, double> ms_per_step() const;
  void reset();

 private:
  StepProfile();
  struct Pending {
    std::string segment;  // empty for mark_start
    void* event = nullptr;
    int64_t host_ns = 0;
  };
  bool enabled_ = false;
  bool use_events_ = false;
  std::vector<Pending> pending_;
  std::vector<void*> free_events_;
  std::map<std::string, double> total_ms_;
  int64_t collected_steps_ = 0;
};

}  // namespace zt
