#include "runtime/host_memory.h"

#include <sys/resource.h>

#include <fstream>
#include <sstream>

#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt {

HostMemoryLimits read_host_memory_limits() {
  HostMemoryLimits limits;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    size_t kib = 0;
    if (fields >> key >> kib >> unit && key == "MemAvailable:") {
      limits.available = kib * 1024;
      break;
    }
  }
  rlimit memlock{};
  if (getrlimit(RLIMIT_MEMLOCK, &memlock) == 0 && memlock.rlim_cur != RLIM_INFINITY)
    limits.locked = static_cast<size_t>(memlock.rlim_cur);
  return limits;
}

void check_host_memory_plan(const HostMemoryPlan& plan, const HostMemoryLimits& limits) {
  ZT_CHECK(
      plan.total() <= limits.available, plan.what, " needs ", format_memory_size(plan.total()),
      " of host memory (", format_memory_size(plan.pinned_bytes), " pinned + ",
      format_memory_size(plan.pageable_bytes), " pageable), but only ", format_memory_size(limits.available),
      " is available (MemAvailable): free host memory, spread the state over more ranks (a smaller shard "
      "each), or offload less (offload_param off, or offload_optimizer off)");
  ZT_CHECK(plan.pinned_bytes <= limits.locked, plan.what, " needs ", format_memory_size(plan.pinned_bytes),
           " of page-locked host memory, but the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) is ",
           format_memory_size(limits.locked),
           ": raise it (ulimit -l unlimited; docker run --ulimit memlock=-1; LimitMEMLOCK=infinity under "
           "systemd) or set pin_memory false (pageable buffers, slower host<->device copies)");
}

}  // namespace zt
