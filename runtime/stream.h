// RAII CUDA streams and events, and the calling thread's current stream.
//
// Work is ordered across streams by events (record on one stream, wait on another), never by host
// synchronization; these wrappers make that the easy path.
//
//   Stream compute, comm;                // non-blocking streams on the current device
//   Event grads_ready;                   // timing disabled: cheapest event, for ordering only
//   grads_ready.record(compute);
//   comm.wait(grads_ready);              // comm work queued after this waits for the compute work above
//   Event t0(EventTiming::enabled), t1(EventTiming::enabled);
//   t0.record(s); ...; t1.record(s); t1.synchronize(); float ms = Event::elapsed_ms(t0, t1);
//
// The current-stream rule: every tensor-level operation (the kernels/<op>.h entry points, copy_tensor, an
// arena's zero fill, the GEMM wrapper's callers) enqueues on the calling thread's current stream, and a host
// read-back synchronizes that stream only, never the device. The current stream is the legacy default
// stream (nullptr) until a StreamScope on the thread names another, so single-threaded code is unchanged.
// This is what lets N in-process ranks (N host threads) share one GPU: each thread sets its own stream
//
//   Stream compute;
//   StreamScope on_compute(compute);      // kernels::linear_forward(...) below is queued on `compute`
//
// and its ops neither wait for nor race with the other ranks'. Threads running concurrently on different
// streams also need their own DeviceAllocator (AllocatorScope, runtime/device_allocator.h): scratch released
// at the end of an op is reusable at once, which only same-stream work orders.
//
// Per-stream caches (the GEMM workspace and cuBLAS handle, kernels/cuda/gemm.cu) register a retire hook;
// ~Stream runs the hooks before destroying its stream, so a cache never hands a later stream that reuses
// the handle value state that belonged to a dead one. Code that destroys a cudaStream_t it created itself,
// after running zerotrain ops on it, calls retire_stream(stream) first.
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

// The calling thread's current stream: what tensor-level ops enqueue on (nullptr: the legacy default
// stream). Thread-local; a new thread starts at nullptr.
cudaStream_t current_stream();

// Makes `stream` the calling thread's current stream until the scope ends, then restores the previous one
// (scopes nest). Must be destroyed on the thread that created it, in reverse order of creation.
class StreamScope {
 public:
  explicit StreamScope(cudaStream_t stream);
  ~StreamScope();
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

// Called with a stream that is about to be destroyed: drop (after synchronizing it where needed) whatever a
// cache keeps for it. Hooks run in registration order; they must not throw.
using StreamRetireHook = void (*)(cudaStream_t stream);
void add_stream_retire_hook(StreamRetireHook hook);  // thread-safe; a hook added twice runs once
// Runs every hook for `stream`; ~Stream calls it. Thread-safe.
void retire_stream(cudaStream_t stream);

}  // namespace zt
