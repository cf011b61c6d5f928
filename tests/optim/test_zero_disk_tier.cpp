// The disk tier in the ZeRO engine's accounting (optim/zero/engine.h, ZeroOffload::disk_buffers): the host
// column counts the disk tier's buffers (one unit's slice each), not the shard, and the memory plan shows the
// run's disk-tier row. Training through it: test_zero_training.cpp, ZeroDiskTierTraining.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/swap/swapped_state_store.h"
#include "optim/zero/engine.h"
#include "optim/zero/memory_estimate.h"
#include "optim/zero/partition.h"

namespace zt::optim {
namespace {

TEST(ZeroDiskTierBytes, HostOptimizerIsTheBuffersNotTheShard) {
  const DebertaConfig model = deberta_small_cpu_config();
  const ParameterTable table(model);
  for (const int world : {1, 2, 4}) {
    const ZeroPartition part(table, world);
    std::vector<int64_t> slices;
    for (const ZeroUnit& unit : part.units()) slices.push_back(unit.slice_numel);
    for (int stage = 1; stage <= 3; ++stage) {
      const ZeroStateBytes resident = zero_state_bytes(part, stage, DType::f32, {.optimizer = true});
      for (const int buffers : {1, 4}) {
        ZeroOffload disk{.optimizer = true};
        disk.disk_buffers = buffers;
        const ZeroStateBytes on_disk = zero_state_bytes(part, stage, DType::f32, disk);
        EXPECT_EQ(on_disk.host_optimizer,
                  swap::SwappedStateStore::buffer_bytes_for(
                      {.directory = "", .rank = 0, .block_numel = slices, .buffer_count = buffers}));
        // Everything else is the resident offload's.
        EXPECT_EQ(on_disk.host_gradients, resident.host_gradients);
        EXPECT_EQ(on_disk.host_parameters, resident.host_parameters);
        EXPECT_EQ(on_disk.total(), resident.total());
      }
    }
  }
}

TEST(ZeroDiskTierBytes, MemoryPlanShowsTheRunsDiskTierRow) {
  const DebertaConfig model = deberta_small_cpu_config();
  ZeroOffload disk{.optimizer = true};
  disk.disk_buffers = 2;
  const std::string table = describe_memory_estimates(model, 2, 2, DType::f32, 4, 16, disk);
  EXPECT_NE(table.find("2 +offload nvme (run)"), std::string::npos) << table;
  EXPECT_EQ(table.find("2 +offload opt (run)"), std::string::npos) << table;
  // Without the disk tier there is no such row.
  EXPECT_EQ(describe_memory_estimates(model, 2, 2, DType::f32, 4, 16, {.optimizer = true}).find("nvme"),
            std::string::npos);
}

}  // namespace
}  // namespace zt::optim
