// The disk tier's record cache (optim/swap/swap_record_cache.h): a buffer is reused only after its
// write-back, a prefetch into a full cache never drops a dirty record unwritten, records of their own sizes
// move their own bytes, over both I/O backends, O_DIRECT and buffered.
#include "optim/swap/swap_record_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "tests/support/io_backend_test.h"

namespace zt::swap {
namespace {

// Uneven records, one empty; records 0 and 5 are large, so that a write of one is many requests and still
// in flight when the next call wants its buffer.
const std::vector<size_t> kRecordBytes = {size_t{8} << 20, 100, 3 * 4096 + 5, 0, 9000, size_t{8} << 20};

std::byte pattern(size_t record, size_t i, int version) {
  return static_cast<std::byte>((record * 31 + i * 7 + static_cast<size_t>(version) * 13 + 1) % 251);
}

void fill(std::span<std::byte> bytes, size_t record, int version) {
  for (size_t i = 0; i < kRecordBytes[record]; ++i) bytes[i] = pattern(record, i, version);
}

// The first mismatch of record `record`'s bytes against version `version`, or -1.
int64_t mismatch(std::span<const std::byte> bytes, size_t record, int version) {
  for (size_t i = 0; i < kRecordBytes[record]; ++i) {
    if (bytes[i] != pattern(record, i, version)) return static_cast<int64_t>(i);
  }
  return -1;
}

class SwapRecordCacheTest : public test::IoBackendTest {
 protected:
  void SetUp() override {
    test::IoBackendTest::SetUp();
    if (IsSkipped()) return;
    // Small requests and one worker: a record-0 transfer is 2048 requests, slow enough to overlap.
    io_ = std::make_unique<AsyncFileIo>(
        IoOptions{.backend = backend(), .block_size = 4096, .queue_depth = 2, .thread_count = 1});
    store_ = std::make_unique<SwapStore>(
        SwapStoreOptions{.directory = dir_.string(), .record_bytes = kRecordBytes, .direct = mode()}, *io_);
  }
  // Record `record` as the file has it, read past the cache.
  std::vector<std::byte> on_disk(size_t record) {
    AlignedBuffer buffer(store_->largest_transfer_bytes());
    store_->read(static_cast<int64_t>(record), buffer.bytes()).wait();
    return {buffer.data(), buffer.data() + kRecordBytes[record]};
  }

  std::unique_ptr<AsyncFileIo> io_;
  std::unique_ptr<SwapStore> store_;
};

TEST_P(SwapRecordCacheTest, ReusingABufferWaitsForItsWriteBack) {
  SwapRecordCache cache(*store_, 1, {.what = "test cache"});
  fill(cache.acquire(0, /*read=*/false), 0, 1);
  cache.release(0, /*dirty=*/true);  // written behind: in flight
  // The one buffer is wanted for record 5, which the caller overwrites at once: record 0's write must be
  // done before the buffer is handed out, or record 5's bytes would land in record 0 on the disk.
  fill(cache.acquire(5, /*read=*/false), 5, 1);
  cache.release(5, /*dirty=*/true);
  // Wanted again for a read of record 1: record 5's write is done before the read fills the buffer.
  std::span<std::byte> one = cache.acquire(1);
  EXPECT_EQ(one[0], std::byte{0});  // the reserved file reads as zeros
  EXPECT_EQ(mismatch(on_disk(0), 0, 1), -1);
  EXPECT_EQ(mismatch(on_disk(5), 5, 1), -1);
  cache.release(1, false);
  EXPECT_EQ(mismatch(cache.acquire(0), 0, 1), -1);  // read back from the disk
  cache.release(0, false);
  EXPECT_EQ(cache.stats().records_written, 2u);
  // Record 0 only: record 1 was never written, so its buffer is zero-filled, not read; acquire(r, false)
  // reads nothing.
  EXPECT_EQ(cache.stats().records_read, 1u);
  EXPECT_EQ(cache.stats().records_zero_filled, 1u);
  EXPECT_EQ(cache.stats().bytes_written, store_->transfer_bytes(0) + store_->transfer_bytes(5));
}

TEST_P(SwapRecordCacheTest, PrefetchIntoAFullCacheWritesTheDirtyRecordFirst) {
  SwapRecordCache cache(*store_, 2, {.what = "test cache"});
  fill(cache.acquire(0, /*read=*/false), 0, 1);
  cache.release(0, /*dirty=*/true);
  cache.acquire(4);  // held: the other buffer
  const std::vector<size_t> keep = {4, 2};
  // Without waiting: the only free buffer is record 0's, taken only once its write is done.
  const bool started = cache.prefetch(2, keep, /*wait=*/false);
  EXPECT_EQ(cache.has(0), !started);
  EXPECT_EQ(cache.has(2), started);
  // Waiting: takes it after the write.
  if (!started) {
    EXPECT_TRUE(cache.prefetch(2, keep, /*wait=*/true));
  }
  EXPECT_FALSE(cache.has(0));
  EXPECT_TRUE(cache.has(2));
  EXPECT_EQ(mismatch(on_disk(0), 0, 1), -1);
  EXPECT_EQ(cache.stats().records_written, 1u);
  // A buffer holding a kept record is not free; with wait, having none is an error.
  EXPECT_FALSE(cache.prefetch(1, keep, /*wait=*/false));
  expect_error([&] { cache.prefetch(1, keep, /*wait=*/true); },
               {"test cache: no free buffer in ", "(2 buffers)"});
  cache.release(4, false);
  cache.acquire(2);
  EXPECT_EQ(cache.stats().prefetch_hits, 1u);
  cache.release(2, false);
}

// The loading path: a record changed piece by piece (a tensor at a time) with WriteBack::later is written
// once — when its buffer is needed, or at flush — and a record released unmodified after such a change stays
// due for its write.
TEST_P(SwapRecordCacheTest, DeferredWritesGoOutOnceWhenTheBufferIsNeededOrAtFlush) {
  SwapRecordCache cache(*store_, 1, {.what = "test cache"});
  const size_t bytes = kRecordBytes[0];
  std::vector<std::byte> expected(bytes);
  fill(expected, 0, 1);
  for (size_t piece = 0; piece < 4; ++piece) {  // four pieces of record 0, each in its own acquire/release
    std::span<std::byte> buffer = cache.acquire(0);
    const size_t begin = piece * bytes / 4, end = (piece + 1) * bytes / 4;
    std::memcpy(buffer.data() + begin, expected.data() + begin, end - begin);
    cache.release(0, /*dirty=*/true, WriteBack::later);
  }
  EXPECT_EQ(cache.stats().records_written, 0u);
  EXPECT_EQ(cache.stats().records_read, 0u);  // the first acquire zero-filled the never-written record
  EXPECT_EQ(on_disk(0)[bytes / 2], std::byte{0});
  // The one buffer is wanted for record 2: record 0 goes out first, once, whole.
  cache.acquire(2);
  EXPECT_EQ(cache.stats().records_written, 1u);
  EXPECT_EQ(mismatch(on_disk(0), 0, 1), -1);
  cache.release(2, false);
  EXPECT_EQ(mismatch(cache.acquire(0), 0, 1), -1);  // read back from the disk
  EXPECT_EQ(cache.stats().records_read, 1u);
  cache.release(0, false);
  // Changed and left dirty, then acquired and released unmodified: still newer than the disk, so flush
  // writes it.
  fill(cache.acquire(0), 0, 2);
  cache.release(0, /*dirty=*/true, WriteBack::later);
  cache.acquire(0);
  cache.release(0, /*dirty=*/false);
  EXPECT_EQ(mismatch(on_disk(0), 0, 1), -1);
  cache.flush();
  EXPECT_EQ(mismatch(on_disk(0), 0, 2), -1);
  EXPECT_EQ(cache.stats().records_written, 2u);
}

TEST_P(SwapRecordCacheTest, RecordsOfTheirOwnSizesMoveTheirOwnBytes) {
  SwapRecordCache cache(*store_, 2, {.what = "test cache", .write_behind = false});
  for (int version = 1; version <= 2; ++version) {
    for (size_t r = 0; r < kRecordBytes.size(); ++r) {
      fill(cache.acquire(r, /*read=*/version == 2), r, version);
      cache.release(r, /*dirty=*/true);
    }
  }
  for (size_t r = kRecordBytes.size(); r-- > 0;) {
    EXPECT_EQ(mismatch(cache.acquire(r), r, 2), -1) << "record " << r;
    cache.release(r, false);
    EXPECT_EQ(mismatch(on_disk(r), r, 2), -1) << "record " << r;
  }
  uint64_t file = 0;
  for (size_t r = 0; r < kRecordBytes.size(); ++r) file += store_->transfer_bytes(static_cast<int64_t>(r));
  EXPECT_EQ(file, store_->file_bytes());
  EXPECT_EQ(cache.stats().bytes_written, 2 * file);
  EXPECT_EQ(cache.stats().records_written, 2 * kRecordBytes.size());
}

TEST_P(SwapRecordCacheTest, RefusesMisuse) {
  AlignedBuffer memory(2 * store_->largest_transfer_bytes() + kDirectIoAlignment);
  expect_error(
      [&] {
        const std::vector<std::span<std::byte>> misaligned = {
            {memory.data() + 1, store_->largest_transfer_bytes()}};
        SwapRecordCache cache(*store_, misaligned, {.what = "test cache"});
      },
      {"test cache: buffer 0 of ", "cannot hold the largest record of "});
  expect_error(
      [&] {
        const std::vector<std::span<std::byte>> small = {{memory.data(), 4096}};
        SwapRecordCache cache(*store_, small, {.what = "test cache"});
      },
      {"test cache: buffer 0 of 4096 bytes"});
  const std::vector<std::span<std::byte>> one = {{memory.data(), store_->largest_transfer_bytes()}};
  SwapRecordCache cache(*store_, one, {.what = "test cache", .unit = "block"});
  expect_error([&] { cache.acquire(9); }, {"test cache: block 9 of 6"});
  expect_error([&] { cache.prefetch(6, {}, false); }, {"test cache: prefetch of block 6 of 6"});
  cache.acquire(1);
  expect_error([&] { cache.acquire(2); }, {"block 2 acquired while block 1 is still held"});
  expect_error([&] { cache.release(2, false); }, {"release of block 2 which is not held"});
  EXPECT_FALSE(cache.prefetch(2, {}, /*wait=*/false));  // the one buffer is held
  cache.release(1, true);
  cache.wait_all();
  EXPECT_EQ(cache.stats().records_written, 1u);
}

ZT_INSTANTIATE_IO_BACKEND_TESTS(SwapRecordCacheTest);

}  // namespace
}  // namespace zt::swap
