// Parameters on disk (optim/zero/swapped_parameter_shard.h, Note [Parameters on disk]): the record cache on
// its own (records of several sizes in a 16-bit dtype, more records than buffers, the read ahead), the
// engine's stage-3 gathers through it (the same gathered values as the host shard, read ahead in the hook
// order), and the accounting (the host column counts the buffers, not the shard). Training through it:
// test_zero_training.cpp, ZeroParamDiskTraining.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/deberta_tensors.h"
#include "model/parameters.h"
#include "optim/zero/engine.h"
#include "optim/zero/memory_estimate.h"
#include "optim/zero/partition.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "tests/optim/zero_offload_harness.h"

// Options are filled with designated initializers; the members left out keep their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace zt::optim {
namespace {

std::string temp_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zt_test_param_disk_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

uint16_t value_of(size_t record, int64_t i) {
  return static_cast<uint16_t>(1000 * record + static_cast<size_t>(i) * 7 + 1);
}

// Five records of different sizes (one empty) through two buffers: every record written, then read back in
// another order; the file lives in the parameters' subdirectory and is gone with the shard.
TEST(SwappedParameterShard, RecordsRoundTripThroughFewerBuffers) {
  const std::string dir = temp_dir("round_trip");
  const std::vector<int64_t> numel = {3000, 17, 0, 2500, 4096};
  std::string path;
  {
    SwappedParameterShard shard(
        {.directory = dir, .rank = 1, .record_numel = numel, .dtype = DType::bf16, .buffer_count = 2}, {});
    path = shard.path();
    EXPECT_EQ(std::filesystem::path(path).parent_path().string(), SwappedParameterShard::file_directory(dir));
    EXPECT_TRUE(std::filesystem::exists(path));
    EXPECT_EQ(std::filesystem::file_size(path), SwappedParameterShard::file_bytes_for(numel, DType::bf16));
    // Two buffers of the largest record (4096 bf16), and one alignment unit to align the first.
    EXPECT_EQ(SwappedParameterShard::record_buffer_bytes(numel, DType::bf16), round_up_to_alignment(8192));
    EXPECT_EQ(SwappedParameterShard::buffer_bytes_for(numel, DType::bf16, 2),
              2 * round_up_to_alignment(8192) + kDirectIoAlignment);
    for (size_t r = 0; r < numel.size(); ++r) {
      const Tensor t = shard.acquire(r, /*read=*/false);
      ASSERT_EQ(t.numel(), numel[r]);
      EXPECT_EQ(t.dtype(), DType::bf16);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<bf16>()[i].bits = value_of(r, i);
      shard.release(r, /*modified=*/true);
    }
    for (const size_t r : {3u, 0u, 4u, 1u, 2u, 0u}) {
      const Tensor t = shard.acquire(r);
      for (int64_t i = 0; i < t.numel(); ++i)
        ASSERT_EQ(t.data_as<bf16>()[i].bits, value_of(r, i)) << "record " << r << " element " << i;
      shard.release(r, false);
    }
    EXPECT_GE(shard.stats().records_read, 4u);  // at most two of them still in a buffer
    EXPECT_EQ(shard.stats().records_written, numel.size());
    EXPECT_THROW(shard.acquire(numel.size()), Error);
    shard.acquire(0);
    EXPECT_THROW(shard.acquire(1), Error) << "one record at a time";
    EXPECT_THROW(shard.release(1, false), Error);
    shard.release(0, false);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  std::filesystem::remove_all(dir);
}

// prefetch starts reads of the records to come, as far as the buffers allow (one is the caller's); the next
// acquire finds its record read ahead. One buffer reads nothing ahead. The buffers' transfers are waited for
// before the reads, so that the hits do not depend on the disk's speed.
TEST(SwappedParameterShard, PrefetchReadsAheadIntoTheFreeBuffers) {
  const std::string dir = temp_dir("prefetch");
  const std::vector<int64_t> numel(6, 1000);
  for (const int buffers : {3, 1}) {
    SwappedParameterShard shard(
        {.directory = dir, .record_numel = numel, .dtype = DType::f32, .buffer_count = buffers}, {});
    for (size_t r = 0; r < numel.size(); ++r) {
      const Tensor t = shard.acquire(r, false);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = static_cast<float>(r * 10000 + i);
      shard.release(r, true);
    }
    // The last writes may still be in flight, and prefetch passes over a busy buffer: without this wait the
    // first prefetches read nothing ahead on a loaded machine (CI: 2 hits of 4).
    shard.wait_for_transfers();
    const uint64_t reads_before = shard.stats().records_read;
    for (size_t r = 0; r < numel.size(); ++r) {
      const Tensor t = shard.acquire(r);
      const std::vector<size_t> upcoming = {r + 1 < numel.size() ? r + 1 : 0,
                                            r + 2 < numel.size() ? r + 2 : 1,
                                            r + 3 < numel.size() ? r + 3 : 2};
      shard.prefetch(upcoming);
      for (int64_t i = 0; i < t.numel(); ++i)
        ASSERT_EQ(t.data_as<float>()[i], static_cast<float>(r * 10000 + i)) << buffers << " buffers";
      shard.release(r, false);
    }
    if (buffers == 1) {
      EXPECT_EQ(shard.stats().records_prefetched, 0u);
      EXPECT_EQ(shard.stats().prefetch_hits, 0u);
      EXPECT_EQ(shard.stats().records_read - reads_before, numel.size());
    } else {
      EXPECT_GT(shard.stats().records_prefetched, 0u);
      // Records 0 and 1 were still in the buffers after the writes; every later one was read ahead.
      EXPECT_GE(shard.stats().prefetch_hits, numel.size() - 2);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(SwappedParameterShard, BadOptionsAreErrors) {
  EXPECT_THROW(SwappedParameterShard({.directory = "/no/such/dir", .record_numel = {10}}, {}), Error);
  const std::string dir = temp_dir("bad");
  EXPECT_THROW(SwappedParameterShard({.directory = dir, .record_numel = {10}, .buffer_count = 0}, {}), Error);
  EXPECT_THROW(SwappedParameterShard({.directory = dir, .record_numel = {}}, {}), Error);
  std::filesystem::remove_all(dir);
}

// The hook order of one training step (model/deberta_tensors.h): forward E, S, layers; backward S, layers
// in reverse, E. Returns every gathered unit's bytes (its gather buffer, found from its first tensor's
// handle), in order.
std::vector<std::vector<char>> gather_a_step(ZeroEngine& engine, const ParameterTable& table,
                                             const DebertaConfig& config) {
  using Pass = DebertaUnitHooks::Pass;
  const ZeroPartition& part = engine.partition();
  const size_t E = part.embeddings_unit(), S = part.shared_unit();
  std::vector<std::pair<size_t, Pass>> order = {{E, Pass::forward}, {S, Pass::forward}};
  for (int l = 0; l < config.num_hidden_layers; ++l) order.push_back({part.layer_unit(l), Pass::forward});
  order.push_back({S, Pass::backward});
  for (int l = config.num_hidden_layers - 1; l >= 0; --l)
    order.push_back({part.layer_unit(l), Pass::backward});
  order.push_back({E, Pass::backward});
  const DebertaTensors& p = engine.parameter_handles();
  std::vector<std::vector<char>> out;
  for (const auto& [unit, pass] : order) {
    engine.acquire(unit, pass);
    const ZeroUnit& u = part.units()[unit];
    const int layer = u.layer;
    const std::string name = unit == E ? "deberta.embeddings.word_embeddings.weight"
                             : unit == S
                                 ? "deberta.encoder.rel_embeddings.weight"
                                 : str("deberta.encoder.layer.", layer, ".attention.self.query_proj.weight");
    const Tensor handle = unit == E   ? p.embeddings.word_embeddings
                          : unit == S ? p.shared.rel_embeddings
                                      : p.layers[static_cast<size_t>(layer)].query_weight;
    const auto k = static_cast<size_t>(&table.at(name) - table.entries().data());
    const char* base =
        static_cast<const char*>(handle.data()) - (part.tensor_flat_offset(k) - u.flat_begin) * 4;
    out.emplace_back(base, base + u.numel * 4);
    engine.release(unit, pass);
  }
  return out;
}

// The engine's stage-3 gathers with the shard on disk (world 1, f32): the same gathered values as with the
// shard in host memory, after loading and after steps (the CPU update writes the records); with two buffers
// the gathers find most records read ahead (the hook order), with one none, and with more buffers than
// records nothing is read back. The master after the steps is the host run's.
TEST(ZeroParamDisk, GathersEqualTheHostShardAndReadAhead) {
  const std::string dir = temp_dir("engine");
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  const Arena init = testing::synthetic_initial_parameters(table);
  auto gathered_over_steps = [&](int disk_buffers, SwappedParameterStats* stats) {
    auto comms = make_in_process_group(1);
    ZeroEngineOptions options;
    options.stage = 3;
    options.max_grad_norm = 0.5;
    options.offload = {.optimizer = true, .param = true};
    if (disk_buffers > 0)
      options.param_disk = ZeroParamDiskTier{.directory = dir, .buffer_count = disk_buffers};
    ZeroEngine engine(table, config, *comms[0], options);
    EXPECT_EQ(engine.parameter_swap_stats() != nullptr, disk_buffers > 0);
    engine.load_full_parameters(init);
    LossScaler scaler = LossScaler::disabled();
    std::vector<std::vector<char>> all;
    for (int step = 0; step < 3; ++step) {
      for (std::vector<char>& unit : gather_a_step(engine, table, config)) all.push_back(std::move(unit));
      EXPECT_TRUE(testing::synthetic_step(engine, config, step, 1.0, scaler).applied);
    }
    for (std::vector<char>& unit : gather_a_step(engine, table, config)) all.push_back(std::move(unit));
    if (stats != nullptr) *stats = *engine.parameter_swap_stats();
    return all;
  };
  const std::vector<std::vector<char>> expected = gathered_over_steps(0, nullptr);
  // The steps change the parameters: the last gathers differ from the first.
  ASSERT_NE(expected.front(), expected.back());
  for (const int buffers : {2, 1, 5}) {
    SwappedParameterStats stats;
    EXPECT_EQ(gathered_over_steps(buffers, &stats), expected) << buffers << " buffers";
    if (buffers == 1) {
      EXPECT_EQ(stats.prefetch_hits, 0u);
      EXPECT_EQ(stats.records_prefetched, 0u);
    } else if (buffers == 5) {
      EXPECT_EQ(stats.records_read, 0u) << "more buffers than records: the file is only written";
    } else {
      // 4 units, 4 x 8 gathers and 3 x 4 updates: all but a few find their record read ahead.
      EXPECT_GE(stats.prefetch_hits, 20u) << buffers << " buffers, " << stats.records_read << " reads";
    }
    EXPECT_GT(stats.records_written, 0u);
  }
  EXPECT_EQ(testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, 3,
                                                    {.optimizer = true, .param = true}, 3, false,
                                                    ZeroParamDiskTier{.directory = dir, .buffer_count = 3}),
            testing::train_with_synthetic_gradients(DeviceKind::cpu, DType::f32, 3,
                                                    {.optimizer = true, .param = true}, 3));
  std::filesystem::remove_all(dir);
}

TEST(ZeroParamDisk, EngineRefusesItWithoutOffloadParam) {
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngineOptions options;
  options.stage = 3;
  options.offload = {.optimizer = true};
  options.param_disk = ZeroParamDiskTier{.directory = "/tmp"};
  try {
    ZeroEngine engine(table, config, *comms[0], options);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("parameters on disk (offload_param device nvme) need offload.param"),
              std::string::npos)
        << e.message();
  }
}

// The host column: the parameter shard becomes buffer_count records of the largest unit slice in the
// compute dtype (plus the staging shard with a delayed update); nothing else changes; the memory plan shows
// the run's row.
TEST(ZeroParamDiskBytes, HostParametersAreTheBuffersNotTheShard) {
  const DebertaConfig model = deberta_small_cpu_config();
  const ParameterTable table(model);
  for (const int world : {1, 2, 4}) {
    const ZeroPartition part(table, world);
    std::vector<int64_t> slices;
    for (const ZeroUnit& unit : part.units()) slices.push_back(unit.slice_numel);
    for (const DType compute : {DType::f32, DType::bf16}) {
      const ZeroStateBytes on_host = zero_state_bytes(part, 3, compute, {.optimizer = true, .param = true});
      for (const int buffers : {1, 5}) {
        const ZeroStateBytes on_disk = zero_state_bytes(
            part, 3, compute, {.optimizer = true, .param = true, .param_disk_buffers = buffers});
        EXPECT_EQ(on_disk.host_parameters, SwappedParameterShard::buffer_bytes_for(slices, compute, buffers));
        EXPECT_EQ(on_disk.host_optimizer, on_host.host_optimizer);
        EXPECT_EQ(on_disk.host_gradients, on_host.host_gradients);
        EXPECT_EQ(on_disk.total(), on_host.total());
        if (buffers == 1) {
          EXPECT_LT(on_disk.host_parameters, on_host.host_parameters) << world;
        }
        const ZeroStateBytes delayed = zero_state_bytes(
            part, 3, compute,
            {.optimizer = true, .param = true, .delayed_update = true, .param_disk_buffers = buffers});
        EXPECT_EQ(delayed.host_parameters,
                  on_disk.host_parameters + static_cast<size_t>(part.shard_numel()) * dtype_size(compute));
        EXPECT_EQ(estimate_memory(model, 3, world, compute, 4, 16,
                                  {.optimizer = true, .param = true, .param_disk_buffers = buffers}, false)
                      .host(),
                  on_disk.host_total());
      }
      // Below stage 3 (no parameter shard to offload) nothing changes.
      EXPECT_EQ(zero_state_bytes(part, 2, compute, {.optimizer = true, .param_disk_buffers = 5}).host_total(),
                zero_state_bytes(part, 2, compute, {.optimizer = true}).host_total());
    }
  }
  const std::string plan = describe_memory_estimates(
      model, 3, 2, DType::bf16, 4, 16, {.optimizer = true, .param = true, .param_disk_buffers = 5});
  EXPECT_NE(plan.find("3 +nvme params (run)"), std::string::npos) << plan;
  const std::string both = describe_memory_estimates(
      model, 3, 2, DType::bf16, 4, 16,
      {.optimizer = true, .param = true, .disk_buffers = 4, .param_disk_buffers = 5});
  EXPECT_NE(both.find("3 +nvme both (run)"), std::string::npos) << both;
}

}  // namespace
}  // namespace zt::optim
