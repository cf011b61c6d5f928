// Host-memory preflight for plans that put large state in host RAM (ZeRO CPU offload): checks the plan
// against the memory the OS says is available and, for page-locked (pinned) memory, against the
// locked-memory limit, before anything is allocated, and says what to change. Pinned memory cannot be
// swapped out, so a plan larger than RAM would take the machine down rather than slow it (DeepSpeed #3000).
//
// The arena kind is MemoryKind::pinned_host (runtime/arena.h): cudaHostAlloc on a CUDA build with a GPU,
// with a printed warning and pageable memory where the pin fails; plain host memory on CPU builds.
//
// Note: RLIMIT_MEMLOCK is what mlock() and io_uring/libaio registrations are charged against; the CUDA
// driver pins through its own path and may not be held to it. The check follows the limit anyway: a plan
// that exceeds it is one a later disk tier (registered buffers) would fail on, and `ulimit -l` is the knob
// admins use to say how much a job may lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace zt {

inline constexpr size_t kUnlimitedBytes = std::numeric_limits<size_t>::max();

struct HostMemoryLimits {
  size_t available = kUnlimitedBytes;  // MemAvailable (/proc/meminfo); unlimited where it cannot be read
  size_t locked = kUnlimitedBytes;     // RLIMIT_MEMLOCK soft limit; unlimited = RLIM_INFINITY
};
// The limits of this process now.
HostMemoryLimits read_host_memory_limits();

struct HostMemoryPlan {
  std::string what;           // for the message: "ZeRO-2 optimizer offload (4 ranks in this process)"
  size_t pinned_bytes = 0;    // page-locked
  size_t pageable_bytes = 0;  // ordinary host memory
  size_t total() const { return pinned_bytes + pageable_bytes; }
};

// Throws zt::Error (one message, with the numbers and what to change) when the plan's total exceeds the
// available RAM, or its pinned part exceeds the locked-memory limit.
void check_host_memory_plan(const HostMemoryPlan& plan, const HostMemoryLimits& limits);

}  // namespace zt
