// One in-process rank's share of a GPU that several ranks (host threads) use at once.
//
// ZeRO at world size 2-4 on a one-GPU machine runs every rank as a thread of one process over the same
// device (communicators: make_in_process_device_group). Each rank then needs
//   - its own capped caching allocator: --gpu_memory_limit applies per rank, as if each had its own card, and
//     its peak and per-category bytes are its own (the memory table compares them with the estimator);
//   - its own compute stream: its kernels neither wait for nor race with the other ranks' (runtime/stream.h,
//     the current-stream rule), and scratch it releases is reused only by its own stream's later work.
// A rank's thread enters its RankDevice before touching device memory; everything it allocates or launches
// inside goes to the rank's allocator and stream:
//
//   RankDevice device(0, 24ull << 30);       // on any thread
//   { RankDevice::Enter on(device); ...; }   // on the rank's thread, around each piece of its work
//
// Destroy what was allocated from it before the RankDevice itself. CUDA builds only at run time: the
// constructor throws in a build without CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/device_allocator.h"

namespace zt {

class RankDevice {
 public:
  // cap_bytes: the rank's limit on reserved device memory (DeviceAllocator::kNoLimit: none).
  // StreamPriority::greatest gives the rank's stream the device's greatest priority, so that the work it
  // queues is scheduled ahead of side streams' (an overlapped AdamW, the early gradient norm) whenever both
  // have blocks waiting; ranks sharing a GPU keep the default, equal for all.
  enum class StreamPriority : uint8_t { normal, greatest };
  RankDevice(int device, size_t cap_bytes, StreamPriority priority = StreamPriority::normal);
  ~RankDevice();  // synchronizes the rank's stream, then releases it and the allocator's cache
  RankDevice(const RankDevice&) = delete;
  RankDevice& operator=(const RankDevice&) = delete;

  int device() const { return device_; }
  DeviceAllocator& allocator() { return *allocator_; }
  const DeviceAllocator& allocator() const { return *allocator_; }
  void synchronize() const;  // waits for the work queued on the rank's stream

  // Makes the rank's allocator and stream the calling thread's (and its device current) until the scope
  // ends; scopes nest and must end on the thread that began them.
  class Enter {
   public:
    explicit Enter(RankDevice& device);
    ~Enter();
    Enter(const Enter&) = delete;
    Enter& operator=(const Enter&) = delete;

   private:
    struct Scopes;
    std::unique_ptr<Scopes> scopes_;
  };

 private:
  struct StreamHolder;
  int device_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<StreamHolder> stream_;  // destroyed before allocator_: its GEMM workspace came from there
};

// How many RankDevices exist on `device` now (0 when none: a single-rank run may use none). Kernels whose
// CTAs wait on one another across a whole launch size their schedules by it: the ranks sharing a GPU run
// their kernels at the same time, each with a part of the device's resident CTAs.
int rank_devices_on(int device);

}  // namespace zt
