// The host-memory preflight: reads the OS limits, and refuses plans over them with the numbers and the fix.
#include <gtest/gtest.h>

#include <string>

#include "runtime/check.h"
#include "runtime/host_memory.h"

namespace zt {
namespace {

std::string error_of(const HostMemoryPlan& plan, const HostMemoryLimits& limits) {
  try {
    check_host_memory_plan(plan, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HostMemory, ReadsTheLimitsOfThisMachine) {
  const HostMemoryLimits limits = read_host_memory_limits();
  EXPECT_GT(limits.available, size_t{1} << 20);  // Linux CI: /proc/meminfo has MemAvailable
  EXPECT_LT(limits.available, kUnlimitedBytes);
  EXPECT_GT(limits.locked, 0u);
}

TEST(HostMemory, PlansOverTheLimitsAreClearErrors) {
  const HostMemoryPlan plan{.what = "test offload", .pinned_bytes = 3u << 30, .pageable_bytes = 1u << 30};
  EXPECT_EQ(error_of(plan, {.available = 8ull << 30, .locked = 4ull << 30}), "");
  const std::string ram = error_of(plan, {.available = 2ull << 30, .locked = kUnlimitedBytes});
  EXPECT_NE(ram.find("test offload needs 4 GiB of host memory"), std::string::npos) << ram;
  EXPECT_NE(ram.find("only 2 GiB is available"), std::string::npos) << ram;
  const std::string locked = error_of(plan, {.available = 8ull << 30, .locked = 64u << 10});
  EXPECT_NE(locked.find("3 GiB of page-locked"), std::string::npos) << locked;
  EXPECT_NE(locked.find("ulimit -l"), std::string::npos) << locked;
  EXPECT_NE(locked.find("64 KiB"), std::string::npos) << locked;
  EXPECT_NE(locked.find("pin_memory false"), std::string::npos) << locked;
  // Pageable plans are not held to the locked-memory limit.
  EXPECT_EQ(error_of({.what = "x", .pinned_bytes = 0, .pageable_bytes = 1u << 30},
                     {.available = 8ull << 30, .locked = 0}),
            "");
}

}  // namespace
}  // namespace zt
