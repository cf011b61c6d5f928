// Offloaded optimizer state on disk (optim/swap/swapped_state_store.h): AdamW steps through the store equal
// the same steps on resident arrays bit for bit — every buffer count and overlap flag, both I/O backends,
// O_DIRECT and buffered — while the host holds only the buffers and every block goes through the disk.
#include "optim/swap/swapped_state_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "optim/adamw.h"
#include "tests/support/io_backend_test.h"

namespace zt::swap {
namespace {

// Units of a ZeRO shard are uneven, and a rank may own an empty slice.
const std::vector<int64_t> kBlocks = {1000, 0, 4096, 333, 5000, 1, 2048};
// Their records, master | m | v at 12 bytes an element, each rounded up to 4 KiB: 12288 + 0 + 49152 + 4096 +
// 61440 + 4096 + 24576 bytes of file, not 7 records of the largest (430080); buffers hold the largest.
constexpr uint64_t kFileBytes = 155648;
constexpr size_t kLargestRecord = 61440;
constexpr int kSteps = 4;

struct State {
  std::vector<std::vector<float>> master, m, v;
};

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& f : x) f = normal(random);
  return x;
}

// The same bytes (sizes included). An empty block's span may hold a null pointer, which memcmp must not see
// even for 0 bytes.
bool same_bits(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

std::vector<float> grads_of(size_t block, int step) {
  return random_floats(kBlocks[block], static_cast<uint32_t>(1000 * step + block), 0.1f);
}

optim::AdamWStepScalars scalars(int step) {
  return optim::adamw_step_scalars({.lr = 1e-3, .weight_decay = 0.01}, 1e-3, step);
}

State resident_run() {
  State s;
  for (size_t b = 0; b < kBlocks.size(); ++b) {
    s.master.push_back(random_floats(kBlocks[b], static_cast<uint32_t>(b), 1.0f));
    s.m.emplace_back(static_cast<size_t>(kBlocks[b]), 0.0f);
    s.v.emplace_back(static_cast<size_t>(kBlocks[b]), 0.0f);
  }
  for (int step = 1; step <= kSteps; ++step) {
    for (size_t b = 0; b < kBlocks.size(); ++b) {
      const std::vector<float> g = grads_of(b, step);
      optim::adamw_update_elements(scalars(step), b % 2 == 0, kBlocks[b], s.master[b].data(), g.data(),
                                   s.m[b].data(), s.v[b].data());
    }
  }
  return s;
}

class SwappedStateStoreTest : public test::IoBackendTest {
 protected:
  IoOptions io() const {
    return {.backend = backend(), .block_size = 8192, .queue_depth = 4, .thread_count = 2};
  }
};

TEST_P(SwappedStateStoreTest, AdamWThroughTheDiskEqualsResidentBitwise) {
  const State expected = resident_run();
  for (const bool pipeline_read : {false, true}) {
    for (const bool pipeline_write : {false, true}) {
      for (const int extra : {0, 2}) {
        const int buffers = 1 + int(pipeline_read) + int(pipeline_write) + extra;
        SCOPED_TRACE(
            str("pipeline_read ", pipeline_read, ", pipeline_write ", pipeline_write, ", buffers ", buffers));
        SwappedStateStore store({.directory = dir_.string(),
                                 .rank = 2,
                                 .block_numel = kBlocks,
                                 .buffer_count = buffers,
                                 .pipeline_read = pipeline_read,
                                 .pipeline_write = pipeline_write,
                                 .direct = mode()},
                                io());
        EXPECT_EQ(store.buffer_bytes(), static_cast<size_t>(buffers) * kLargestRecord);
        EXPECT_EQ(std::filesystem::file_size(store.store().path()), kFileBytes);
        // Load the master (m and v start at zero: the reserved file reads as zeros).
        for (size_t b = 0; b < kBlocks.size(); ++b) {
          const SwappedStateBlock block = store.acquire(b);
          ASSERT_EQ(block.master.size(), static_cast<size_t>(kBlocks[b]));
          const std::vector<float> init = random_floats(kBlocks[b], static_cast<uint32_t>(b), 1.0f);
          std::copy(init.begin(), init.end(), block.master.begin());
          for (size_t i = 0; i < block.exp_avg.size(); ++i) ASSERT_EQ(block.exp_avg[i], 0.0f);
          store.release(b, true);
        }
        for (int step = 1; step <= kSteps; ++step) {
          for (size_t b = 0; b < kBlocks.size(); ++b) {
            const SwappedStateBlock block = store.acquire(b);
            const std::vector<float> g = grads_of(b, step);
            optim::adamw_update_elements(scalars(step), b % 2 == 0, kBlocks[b], block.master.data(), g.data(),
                                         block.exp_avg.data(), block.exp_avg_sq.data());
            store.release(b, true);
          }
        }
        // Read back in reverse order (a checkpoint may walk the blocks any way).
        for (size_t b = kBlocks.size(); b-- > 0;) {
          const SwappedStateBlock block = store.acquire(b);
          EXPECT_TRUE(same_bits(block.master, expected.master[b])) << "master " << b;
          EXPECT_TRUE(same_bits(block.exp_avg, expected.m[b])) << "m " << b;
          EXPECT_TRUE(same_bits(block.exp_avg_sq, expected.v[b])) << "v " << b;
          store.release(b, false);
        }
        // More blocks than buffers: every block of every step came from the disk and went back to it.
        const auto blocks = static_cast<uint64_t>(kBlocks.size());
        EXPECT_GE(store.stats().blocks_read, blocks * kSteps);
        EXPECT_EQ(store.stats().blocks_written, blocks * (kSteps + 1));
        // Each block moved its own bytes: kSteps + 1 writes of every block are that many files.
        EXPECT_EQ(store.stats().bytes_written, (kSteps + 1) * kFileBytes);
        store.flush();
      }
    }
  }
}

ZT_INSTANTIATE_IO_BACKEND_TESTS(SwappedStateStoreTest);

using SwappedStateStoreRules = test::TempDirTest;

// Any access order sees the last written values, including a block whose write is still in flight.
TEST_F(SwappedStateStoreRules, RandomOrderSeesTheLatestValues) {
  SwappedStateStore store({.directory = dir_.string(),
                           .block_numel = kBlocks,
                           .buffer_count = 3,
                           .pipeline_read = true,
                           .pipeline_write = false},
                          {});
  SwappedStateStore piped({.directory = dir_.string(),
                           .rank = 1,
                           .block_numel = kBlocks,
                           .buffer_count = 4,
                           .pipeline_read = true,
                           .pipeline_write = true},
                          {});
  std::vector<float> latest(kBlocks.size(), 0.0f);
  std::mt19937 random(5);
  for (int i = 0; i < 200; ++i) {
    const size_t b = random() % kBlocks.size();
    const bool modify = random() % 2 == 0;
    for (SwappedStateStore* s : {&store, &piped}) {
      const SwappedStateBlock block = s->acquire(b);
      for (const std::span<float> part : {block.master, block.exp_avg, block.exp_avg_sq}) {
        for (const float x : part) ASSERT_EQ(x, latest[b]) << "block " << b << " at access " << i;
        if (modify) std::fill(part.begin(), part.end(), static_cast<float>(i));
      }
      s->release(b, modify);
    }
    if (modify) latest[b] = static_cast<float>(i);
  }
}

TEST_F(SwappedStateStoreRules, MisuseIsAnError) {
  expect_error(
      [&] {
        SwappedStateStore s({.directory = dir_.string(),
                             .block_numel = kBlocks,
                             .buffer_count = 2,
                             .pipeline_read = true,
                             .pipeline_write = true},
                            {});
      },
      {"buffer_count 2 is too few", "needs 3"});
  SwappedStateStore store({.directory = dir_.string(), .block_numel = {10, 20}, .buffer_count = 2}, {});
  store.acquire(0);
  expect_error([&] { store.acquire(1); }, {"block 1 acquired while block 0 is still held"});
  expect_error([&] { store.release(1, false); }, {"release of block 1 which is not held"});
  store.release(0, false);
  expect_error([&] { store.acquire(2); }, {"block 2 of 2"});
  const std::string path = store.store().path();
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(SwappedStateStoreBytes, BuffersAndFileSizes) {
  const SwappedStateOptions options{.directory = "/x", .block_numel = {1000, 3000, 10}, .buffer_count = 4};
  // A buffer holds master, m and v of the largest block: 3 * 3000 * 4 = 36000 bytes -> 36864 aligned.
  EXPECT_EQ(SwappedStateStore::buffer_bytes_for(options), 4u * 36864u);
  // The file holds each block's own record: 12000 -> 12288, 36000 -> 36864, 120 -> 4096.
  EXPECT_EQ(SwappedStateStore::file_bytes_for(options), 12288u + 36864u + 4096u);
  EXPECT_EQ(SwappedStateStore::file_bytes_for({.directory = "", .block_numel = kBlocks}), kFileBytes);
  // A shard of empty slices has an empty file and empty buffers.
  EXPECT_EQ(SwappedStateStore::file_bytes_for({.directory = "", .block_numel = {0, 0}}), 0u);
  EXPECT_EQ(SwappedStateStore::buffer_bytes_for({.directory = "", .block_numel = {0, 0}, .buffer_count = 2}),
            0u);
}

}  // namespace
}  // namespace zt::swap
