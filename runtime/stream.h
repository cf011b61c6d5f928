// RAII CUDA streams and events. Work is ordered across streams by events (record on one stream, wait on
// another), never by host synchronization; these wrappers make that the easy path.
//
//   Stream compute, comm;                // non-blocking streams on the current device
//   Event grads_ready;                   // timing disabled: cheapest event, for ordering only
//   grads_ready.record(compute);
//   comm.wait(grads_ready);              // comm work queued after this waits for the compute work above
//   Event t0(EventTiming::enabled), t1(EventTiming::enabled);
//   t0.record(s); ...; t1.record(s); t1.synchronize(); float ms = Event::elapsed_ms(t0, t1);
//
// CUDA builds only (ZT_WITH_CUDA).
#pragma once

#ifndef ZT_WITH_CUDA
#error "runtime/stream.h is for CUDA builds only (ZT_WITH_CUDA)"
#endif

#include <cuda_runtime.h>

namespace zt {

class Event;

class Stream {
 public:
  // A non-blocking stream (does not implicitly synchronize with the legacy default stream) on the device
  // current at construction. Lower priority numbers run first (cudaDeviceGetStreamPriorityRange).
  Stream() : Stream(0) {}
  explicit Stream(int priority);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }
  int device() const { return device_; }

  void wait(const Event& event) const;  // later work on this stream waits for the event
  void synchronize() const;             // blocks the host until all queued work is done
  bool idle() const;                    // true when all queued work is done (cudaStreamQuery)

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

enum class EventTiming { disabled, enabled };

class Event {
 public:
  explicit Event(EventTiming timing = EventTiming::disabled);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  bool timing_enabled() const { return timing_ == EventTiming::enabled; }

  void record(cudaStream_t stream);  // captures the work queued on `stream` so far
  void synchronize() const;          // blocks the host until the captured work is done
  bool completed() const;            // non-blocking query
  // Milliseconds between two recorded, completed events; both need EventTiming::enabled.
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
  EventTiming timing_ = EventTiming::disabled;
  bool recorded_ = false;
};

}  // namespace zt
