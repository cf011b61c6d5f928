#include "runtime/host_memory_budget.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "runtime/check.h"

namespace zt {
namespace {

TEST(HostMemoryBudget, ChargesUpToTheCapAndGivesBytesBackOnRelease) {
  HostMemoryBudget budget(size_t{10} << 20);
  HostMemoryBudget::Charge pinned = budget.charge(size_t{4} << 20, HostMemoryKind::pinned, "staging buffers");
  HostMemoryBudget::Charge pageable = budget.charge(size_t{6} << 20, HostMemoryKind::pageable, "Adam m/v");
  EXPECT_EQ(budget.used(), size_t{10} << 20);
  EXPECT_EQ(budget.used(HostMemoryKind::pinned), size_t{4} << 20);
  EXPECT_EQ(budget.available(), 0u);
  EXPECT_FALSE(budget.fits(1));
  pinned.release();
  EXPECT_EQ(budget.used(), size_t{6} << 20);
  EXPECT_TRUE(budget.fits(size_t{4} << 20));
  {
    HostMemoryBudget::Charge moved = std::move(pageable);
    EXPECT_EQ(budget.used(), size_t{6} << 20);
  }
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_EQ(budget.peak(), size_t{10} << 20);
}

TEST(HostMemoryBudget, ExceedingTheCapIsAnErrorNamingTheAllocation) {
  HostMemoryBudget budget(size_t{1} << 30);
  HostMemoryBudget::Charge held = budget.charge(size_t{768} << 20, HostMemoryKind::pinned, "swap buffers");
  try {
    budget.charge(size_t{512} << 20, HostMemoryKind::pageable, "rank 1 fp32 master");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(
        e.message(),
        "host memory limit exceeded: rank 1 fp32 master needs 512 MiB (pageable), and 768 MiB is in use "
        "(768 MiB pinned, 0 B pageable) of the --host_memory_limit 1 GiB");
  }
  EXPECT_EQ(budget.used(), size_t{768} << 20);  // the failed charge took nothing
  EXPECT_THROW(budget.charge(size_t{2} << 30, HostMemoryKind::pinned, "too big alone"), Error);
}

TEST(HostMemoryBudget, WithoutACapEverythingFitsAndIsCounted) {
  HostMemoryBudget budget;
  HostMemoryBudget::Charge big = budget.charge(size_t{1} << 40, HostMemoryKind::pageable, "state");
  EXPECT_TRUE(budget.fits(size_t{1} << 40));
  EXPECT_EQ(budget.used(), size_t{1} << 40);
  EXPECT_EQ(budget.available(), SIZE_MAX);
}

TEST(HostMemoryBudget, RanksChargeConcurrently) {
  HostMemoryBudget budget(size_t{1000} * 4096);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        HostMemoryBudget::Charge c = budget.charge(4096, HostMemoryKind::pinned, "buffer");
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_LE(budget.peak(), size_t{4} * 4096);
}

}  // namespace
}  // namespace zt
