// The disk tier's checks before the first step (issue 15): everything that would otherwise fail minutes or
// hours into a run — or quietly run at a fraction of the disk's speed — is an error or a notice at start.
//
// Note [Disk tier preflight]
//   stale files    swap files of dead processes are removed first (optim/swap/swap_store.h), so their
//                  space counts as free;
//   free space     statvfs(nvme_path): bytes available to this user must cover every swap file of the run
//                  (an error naming the path, the bytes needed and the bytes free);
//   O_DIRECT       a probe file in nvme_path is opened with O_DIRECT and one aligned block written and read;
//                  a refusal (EINVAL: tmpfs before Linux 6.6, some FUSE and network file systems) is a
//                  notice that the store runs buffered — or an error when direct I/O is required;
//   open files     RLIMIT_NOFILE against the descriptors open now plus the swap files and the io_uring
//                  rings (an error saying `ulimit -n`);
//   locked memory  RLIMIT_MEMLOCK against the bytes the caller wants to pin (the staging buffers): above
//                  the limit cudaHostRegister/mlock fail, so this is a notice that the buffers stay pageable
//                  (slower transfers) unless the limit is raised (`ulimit -l`).
// The probe file is unlinked right after it is opened (the probe uses its descriptor), so not even a crash
// during the probe leaves it behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/direct_io.h"

namespace zt::swap {

struct SwapPreflightRequest {
  std::string directory;      // nvme_path
  uint64_t bytes_needed = 0;  // all swap files of this process
  int files_needed = 1;       // swap files + io_uring rings this process will open
  uint64_t pinned_bytes = 0;  // host bytes the caller wants to page-lock (0: none)
  DirectIoMode direct = DirectIoMode::automatic;
  int rank = 0;  // names the probe file, so that in-process ranks can run the preflight at once
};

struct SwapPreflightReport {
  bool direct_io = false;            // the probe's file was opened and transferred with O_DIRECT
  bool can_pin = true;               // pinned_bytes fits RLIMIT_MEMLOCK
  uint64_t free_bytes = 0;           // statvfs f_bavail * f_frsize
  std::vector<std::string> notices;  // one line each; the caller prints them
};

// Throws zt::Error naming nvme_path for a missing or unwritable directory, too little free space, too few
// file descriptors, and a refused O_DIRECT when direct I/O is required.
SwapPreflightReport preflight_swap_directory(const SwapPreflightRequest& request);

// The parts of the preflight that read limits, for tests: limits are passed in.
struct ResourceLimits {
  uint64_t open_files_soft = 0;    // RLIMIT_NOFILE soft limit (RLIM_INFINITY as UINT64_MAX)
  uint64_t locked_bytes_soft = 0;  // RLIMIT_MEMLOCK soft limit
  bool can_lock_any = false;       // CAP_IPC_LOCK in the effective set: the memlock limit does not apply
  uint64_t open_files_now = 0;     // descriptors open in this process
};
ResourceLimits current_resource_limits();
// Appends notices to `report` and throws for too few descriptors.
void check_resource_limits(const SwapPreflightRequest& request, const ResourceLimits& limits,
                           SwapPreflightReport& report);

}  // namespace zt::swap
