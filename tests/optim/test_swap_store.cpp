// The disk tier's store, pipeline and preflight (optim/swap/): records round-trip bit for bit through both
// I/O backends with and without O_DIRECT, the pipeline gives every record's update the bytes the previous
// pass wrote whatever its buffer count and overlap flags, files live exactly as long as the store (stale
// ones of dead processes are removed), and a disk that is too small is an error naming the path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "optim/swap/swap_pipeline.h"
#include "optim/swap/swap_preflight.h"
#include "optim/swap/swap_store.h"
#include "tests/support/io_backend_test.h"

namespace zt::swap {
namespace {

namespace fs = std::filesystem;

// A record of the test: `floats` values; record k's value i is a function of (k, i, pass).
constexpr size_t kFloats = 3 * 1000 + 7;  // three state tensors of a block plus a ragged tail
constexpr size_t kRecordBytes = kFloats * sizeof(float);

float initial_value(int64_t record, size_t i) {
  return static_cast<float>(record) * 0.5f + static_cast<float>(i) * 0.25f - 7.0f;
}
// An AdamW-like update: not exactly invertible, so any stale or misplaced record shows in the result.
void transform(std::span<float> x, int64_t record, int pass) {
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = x[i] * 0.999f + 1e-3f * static_cast<float>(record + pass) / (1.0f + x[i] * x[i]);
}
std::span<float> as_floats(std::span<std::byte> bytes) {
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

// `count` records of `bytes` each.
std::vector<size_t> equal_records(int64_t count, size_t bytes) {
  return std::vector<size_t>(static_cast<size_t>(count), bytes);
}

std::vector<AlignedBuffer> make_buffers(int count, size_t bytes) {
  std::vector<AlignedBuffer> buffers;
  for (int i = 0; i < count; ++i) buffers.emplace_back(bytes);
  return buffers;
}

class SwapStoreTest : public test::IoBackendTest {
 protected:
  IoOptions io_options() const {
    return {.backend = backend(), .block_size = 16 << 10, .queue_depth = 4, .thread_count = 2};
  }
  SwapStoreOptions store_options(int64_t records) const {
    return {.directory = dir_.string(),
            .rank = 1,
            .record_bytes = equal_records(records, kRecordBytes),
            .direct = mode()};
  }
};

TEST_P(SwapStoreTest, RecordsRoundTripBitwise) {
  AsyncFileIo io(io_options());
  SwapStore store(store_options(7), io);
  EXPECT_EQ(store.direct(), mode() != DirectIoMode::off);
  EXPECT_EQ(store.largest_transfer_bytes(), round_up_to_alignment(kRecordBytes));
  EXPECT_EQ(store.file_bytes(), 7 * round_up_to_alignment(kRecordBytes));
  EXPECT_EQ(fs::file_size(store.path()), store.file_bytes());  // reserved up front
  std::vector<AlignedBuffer> out = make_buffers(7, store.largest_transfer_bytes());
  std::vector<IoTicket> tickets;
  for (int64_t k : {3, 0, 6, 1, 5, 2, 4}) {
    std::span<float> x = as_floats(out[k].bytes().first(kRecordBytes));
    for (size_t i = 0; i < kFloats; ++i) x[i] = initial_value(k, i);
    tickets.push_back(store.write(k, out[k].bytes()));
  }
  for (IoTicket& t : tickets) t.wait();
  AlignedBuffer in(store.largest_transfer_bytes());
  for (int64_t k = 0; k < 7; ++k) {
    store.read(k, in.bytes()).wait();
    EXPECT_EQ(std::memcmp(in.data(), out[k].data(), kRecordBytes), 0) << "record " << k;
  }
}

// Every combination of overlap flags and buffer counts: a fill pass, three update passes and a read-only
// pass give exactly what the same updates give in memory.
TEST_P(SwapStoreTest, PipelineEqualsTheUpdatesInMemory) {
  constexpr int64_t kRecords = 23;
  std::vector<std::vector<float>> expected(kRecords, std::vector<float>(kFloats));
  for (int64_t k = 0; k < kRecords; ++k) {
    for (size_t i = 0; i < kFloats; ++i) expected[k][i] = initial_value(k, i);
    for (int pass = 0; pass < 3; ++pass) transform(expected[k], k, pass);
  }
  AsyncFileIo io(io_options());
  for (const bool pipeline_read : {false, true}) {
    for (const bool pipeline_write : {false, true}) {
      for (const int extra_buffers : {0, 1, 3}) {
        SCOPED_TRACE(str("pipeline_read ", pipeline_read, ", pipeline_write ", pipeline_write,
                         ", extra buffers ", extra_buffers));
        SwapStore store(store_options(kRecords), io);
        const SwapPipelineOptions update_pass{.pipeline_read = pipeline_read,
                                              .pipeline_write = pipeline_write};
        std::vector<AlignedBuffer> buffers = make_buffers(
            swap_pipeline_min_buffers(update_pass) + extra_buffers, store.largest_transfer_bytes());
        std::vector<int64_t> order;
        SwapPipelineOptions fill = update_pass;
        fill.read = false;
        run_swap_pipeline(store, buffers, 0, kRecords, fill, [&](int64_t k, std::span<std::byte> bytes) {
          std::span<float> x = as_floats(bytes);
          ASSERT_EQ(x.size(), kFloats);
          for (size_t i = 0; i < kFloats; ++i) x[i] = initial_value(k, i);
        });
        for (int pass = 0; pass < 3; ++pass) {
          SwapPipelineStats stats;
          run_swap_pipeline(
              store, buffers, 0, kRecords, update_pass,
              [&](int64_t k, std::span<std::byte> bytes) {
                order.push_back(k);
                transform(as_floats(bytes), k, pass);
              },
              &stats);
          EXPECT_EQ(stats.bytes_read, store.file_bytes());
          EXPECT_EQ(stats.bytes_written, store.file_bytes());
        }
        for (int64_t i = 0; i < static_cast<int64_t>(order.size()); ++i) ASSERT_EQ(order[i], i % kRecords);
        SwapPipelineOptions read_only = update_pass;
        read_only.write = false;
        int64_t checked = 0;
        run_swap_pipeline(store, buffers, 0, kRecords, read_only, [&](int64_t k, std::span<std::byte> bytes) {
          ASSERT_EQ(std::memcmp(bytes.data(), expected[k].data(), kRecordBytes), 0) << "record " << k;
          ++checked;
        });
        EXPECT_EQ(checked, kRecords);
      }
    }
  }
}

// Records of unequal sizes (a rank's sub-groups: the embeddings' slice and the layers'), one empty: each
// takes its own aligned size at the sum of the sizes before it, the file is the sum (not count x the
// largest), and a transfer moves exactly its record's aligned bytes, so neither a write through a buffer
// of the largest size nor a read into one touches a neighbour or the buffer past the record.
const std::vector<size_t> kUnequalRecords = {
    5 * kDirectIoAlignment + 100, 100, 0, 3 * kDirectIoAlignment, kRecordBytes, 1, 40 * kDirectIoAlignment};

std::byte pattern_of(int64_t record) {
  return static_cast<std::byte>(0x11 * (record + 1));
}

TEST_P(SwapStoreTest, UnequalRecordsTakeTheirOwnSpaceAndMoveOnlyTheirBytes) {
  AsyncFileIo io(io_options());
  SwapStore store({.directory = dir_.string(), .rank = 1, .record_bytes = kUnequalRecords, .direct = mode()},
                  io);
  const auto records = static_cast<int64_t>(kUnequalRecords.size());
  ASSERT_EQ(store.record_count(), records);
  uint64_t sum = 0;
  size_t largest = 0;
  for (int64_t k = 0; k < records; ++k) {
    const size_t aligned = round_up_to_alignment(kUnequalRecords[k]);
    EXPECT_EQ(store.record_bytes(k), kUnequalRecords[k]);
    EXPECT_EQ(store.transfer_bytes(k), aligned);
    EXPECT_EQ(store.record_offset(k), sum) << "record " << k;
    sum += aligned;
    largest = std::max(largest, aligned);
  }
  EXPECT_EQ(sum, (5 + 1 + 1 + 0 + 3 + 3 + 1 + 40) * kDirectIoAlignment);
  EXPECT_EQ(store.file_bytes(), sum);
  EXPECT_EQ(swap_file_bytes(kUnequalRecords), sum);
  EXPECT_LT(store.file_bytes(), records * largest);
  EXPECT_EQ(store.largest_transfer_bytes(), largest);
  EXPECT_EQ(fs::file_size(store.path()), sum);  // reserved up front

  // Last record first: a write longer than its record would overwrite the start of the one written before.
  std::vector<AlignedBuffer> out = make_buffers(static_cast<int>(records), largest);
  for (int64_t k = records; k-- > 0;) {
    std::memset(out[k].data(), static_cast<int>(pattern_of(k)), largest);
    store.write(k, out[k].bytes()).wait();
  }
  // The file: each record's aligned span holds its pattern, the padding included, and nothing else.
  std::vector<char> file(sum);
  std::ifstream(store.path(), std::ios::binary).read(file.data(), static_cast<std::streamsize>(sum));
  for (int64_t k = 0; k < records; ++k) {
    const uint64_t begin = store.record_offset(k);
    for (uint64_t i = begin; i < begin + store.transfer_bytes(k); ++i)
      ASSERT_EQ(static_cast<std::byte>(file[i]), pattern_of(k)) << "record " << k << " byte " << i - begin;
  }
  AlignedBuffer in(largest);
  for (int64_t k = 0; k < records; ++k) {
    std::memset(in.data(), 0xee, largest);
    store.read(k, in.bytes()).wait();
    const size_t moved = store.transfer_bytes(k);
    for (size_t i = 0; i < largest; ++i) {
      ASSERT_EQ(in.data()[i], i < moved ? pattern_of(k) : std::byte{0xee}) << "record " << k << " byte " << i;
    }
  }

  // A pass moves each record's bytes once: the file's size each way, and every update sees its own size.
  std::vector<AlignedBuffer> buffers = make_buffers(3, largest);
  SwapPipelineStats stats;
  std::vector<size_t> seen;
  run_swap_pipeline(
      store, buffers, 0, records, {},
      [&](int64_t k, std::span<std::byte> bytes) {
        seen.push_back(bytes.size());
        for (const std::byte b : bytes) ASSERT_EQ(b, pattern_of(k)) << "record " << k;
        std::memset(bytes.data(), static_cast<int>(pattern_of(k + 7)), bytes.size());
      },
      &stats);
  EXPECT_EQ(seen, kUnequalRecords);
  EXPECT_EQ(stats.bytes_read, sum);
  EXPECT_EQ(stats.bytes_written, sum);
  for (int64_t k = 0; k < records; ++k) {
    store.read(k, in.bytes()).wait();
    for (size_t i = 0; i < kUnequalRecords[k]; ++i)
      ASSERT_EQ(in.data()[i], pattern_of(k + 7)) << "record " << k << " byte " << i;
  }
}

ZT_INSTANTIATE_IO_BACKEND_TESTS(SwapStoreTest);

using SwapStoreLifecycle = test::TempDirTest;

TEST_F(SwapStoreLifecycle, FileLivesAsLongAsTheStore) {
  AsyncFileIo io({});
  std::string path;
  {
    SwapStore store({.directory = dir_.string(), .rank = 3, .record_bytes = equal_records(5, 100)}, io);
    path = store.path();
    EXPECT_EQ(path, swap_file_path(dir_.string(), 3, getpid()));
    EXPECT_NE(path.find("zerotrain-swap."), std::string::npos);
    EXPECT_TRUE(fs::exists(path));
    EXPECT_EQ(fs::file_size(path), 5u * kDirectIoAlignment);
    // A second store of the same rank in the same process is a mistake, not a shared file.
    expect_error(
        [&] {
          SwapStore again({.directory = dir_.string(), .rank = 3, .record_bytes = equal_records(5, 100)}, io);
        },
        {path, "already in use"});
    // A write still in flight when the store goes away is finished first.
    AlignedBuffer buffer(store.largest_transfer_bytes());
    store.write(4, buffer.bytes());
  }
  EXPECT_FALSE(fs::exists(path));
}

// A buffer must hold the record it moves, not more: one of the small record's size moves the small record
// and is refused for the large one, naming it. A store of empty records (a rank whose slices are all
// empty) is an empty file.
TEST_F(SwapStoreLifecycle, BuffersAreCheckedAgainstTheirRecord) {
  AsyncFileIo io({});
  SwapStore store({.directory = dir_.string(), .record_bytes = {100, 3 * kDirectIoAlignment}}, io);
  AlignedBuffer small(kDirectIoAlignment);
  std::memset(small.data(), 7, small.size());
  store.write(0, small.bytes()).wait();
  store.read(0, small.bytes()).wait();
  EXPECT_EQ(small.data()[99], std::byte{7});
  expect_error([&] { store.write(1, small.bytes()); },
               {"swap buffer of 4096 bytes is smaller than record 1", "(12288 bytes)"});
  expect_error([&] { store.read(2, small.bytes()); }, {"swap record 2 out of range [0, 2)"});
  expect_error([&] { SwapStore none({.directory = dir_.string(), .rank = 1, .record_bytes = {}}, io); },
               {"at least one record"});
  SwapStore empty({.directory = dir_.string(), .rank = 2, .record_bytes = {0, 0}}, io);
  EXPECT_EQ(empty.file_bytes(), 0u);
  EXPECT_EQ(fs::file_size(empty.path()), 0u);
  AlignedBuffer nothing(0);
  empty.write(1, nothing.bytes()).wait();
  empty.read(0, nothing.bytes()).wait();
}

TEST_F(SwapStoreLifecycle, StaleFilesOfDeadProcessesAreRemovedAtStart) {
  // A pid that surely is dead: a child that has exited and been reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const std::string dead = swap_file_path(dir_.string(), 0, child);
  const std::string live = swap_file_path(dir_.string(), 0, getppid());
  const std::string other_host = path(str("zerotrain-swap.some-other-host.", child, ".rank0"));
  const std::string unrelated = path(str("notes.", child, ".rank0"));
  for (const std::string& p : {dead, live, other_host, unrelated}) std::ofstream(p) << "x";
  AsyncFileIo io({});
  SwapStore store({.directory = dir_.string(), .rank = 0, .record_bytes = {8}}, io);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other_host));
  EXPECT_TRUE(fs::exists(unrelated));
}

TEST_F(SwapStoreLifecycle, MissingDirectoryIsAnError) {
  AsyncFileIo io({});
  expect_error([&] { SwapStore store({.directory = path("none"), .record_bytes = {8}}, io); },
               {"nvme_path " + path("none"), "not a directory"});
}

TEST_F(SwapStoreLifecycle, PipelineChecksItsBuffersAndFinishesTransfersWhenAnUpdateThrows) {
  AsyncFileIo io({});
  SwapStore store({.directory = dir_.string(), .record_bytes = equal_records(8, 4096)}, io);
  std::vector<AlignedBuffer> two = make_buffers(2, 4096);
  expect_error([&] { run_swap_pipeline(store, two, 0, 8, {}, [](int64_t, std::span<std::byte>) {}); },
               {"needs at least 3 buffers", store.path()});
  std::vector<AlignedBuffer> small = make_buffers(3, 0);
  expect_error([&] { run_swap_pipeline(store, small, 0, 8, {}, [](int64_t, std::span<std::byte>) {}); },
               {"smaller than record 0"});
  std::vector<AlignedBuffer> buffers = make_buffers(4, 4096);
  // Fill record k with byte k, then a pass that fails at record 5: records before it are written back.
  run_swap_pipeline(store, buffers, 0, 8, {.read = false},
                    [](int64_t k, std::span<std::byte> b) { std::memset(b.data(), int(k), b.size()); });
  EXPECT_THROW(run_swap_pipeline(store, buffers, 0, 8, {},
                                 [](int64_t k, std::span<std::byte> b) {
                                   if (k == 5) throw std::runtime_error("update failed");
                                   std::memset(b.data(), int(k + 100), b.size());
                                 }),
               std::runtime_error);
  AlignedBuffer in(4096);
  for (int64_t k = 0; k < 8; ++k) {
    store.read(k, in.bytes()).wait();
    EXPECT_EQ(static_cast<int>(in.data()[0]), k < 5 ? k + 100 : k) << "record " << k;
  }
}

// A disk too small for the store: a real full file system (a 256 KiB tmpfs in a private mount namespace,
// in a child process). Needs CAP_SYS_ADMIN (root, as in CI); skipped elsewhere.
TEST_F(SwapStoreLifecycle, DiskTooSmallIsAnErrorNamingThePath) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string mount_point = dir_.string();
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=256k") != 0) {
      _exit(77);
    }
    std::string messages;
    try {
      preflight_swap_directory({.directory = mount_point, .bytes_needed = 1 << 20, .files_needed = 1});
    } catch (const Error& e) {
      messages += e.message() + "\n";
    }
    try {
      AsyncFileIo io({});
      SwapStore store({.directory = mount_point, .record_bytes = {size_t{1} << 20}}, io);
    } catch (const Error& e) {
      messages += e.message() + "\n";
    }
    messages +=
        str("left:", std::distance(fs::directory_iterator(mount_point), fs::directory_iterator()), "\n");
    ssize_t ignored = write(fds[1], messages.data(), messages.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string messages;
  char chunk[1024];
  for (ssize_t n; (n = read(fds[0], chunk, sizeof(chunk))) > 0;)
    messages.append(chunk, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot mount a tmpfs in a private mount namespace here";
  EXPECT_NE(messages.find("nvme_path " + mount_point + " has 256 KiB free, and the disk tier needs 1 MiB"),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find("cannot reserve 1 MiB for the swap file " + swap_file_path(mount_point, 0, child)),
            std::string::npos)
      << messages;
  EXPECT_NE(messages.find(std::strerror(ENOSPC)), std::string::npos) << messages;
  EXPECT_NE(messages.find("left:0"), std::string::npos)
      << "the failed swap file must be removed: " << messages;
}

using SwapPreflight = test::TempDirTest;

TEST_F(SwapPreflight, ReportsDirectIoAndFreeSpace) {
  const SwapPreflightReport report =
      preflight_swap_directory({.directory = dir_.string(), .bytes_needed = 1 << 20, .files_needed = 2});
  EXPECT_GE(report.free_bytes, uint64_t{1} << 20);
  // Either the temp directory takes O_DIRECT, or the report says that it runs buffered.
  EXPECT_TRUE(report.direct_io || !report.notices.empty());
  EXPECT_TRUE(fs::is_empty(dir_)) << "the probe file must not stay";
}

TEST_F(SwapPreflight, TooLittleSpaceIsAnErrorNamingThePath) {
  expect_error(
      [&] { preflight_swap_directory({.directory = dir_.string(), .bytes_needed = uint64_t{1} << 62}); },
      {"nvme_path " + dir_.string(), "free, and the disk tier needs 4194304 TiB"});
}

TEST_F(SwapPreflight, MissingDirectoryIsAnError) {
  expect_error([&] { preflight_swap_directory({.directory = path("absent")}); },
               {"nvme_path " + path("absent"), "not a directory"});
  expect_error([&] { preflight_swap_directory({.directory = ""}); }, {"nvme_path is empty"});
}

TEST(SwapResourceLimits, TooFewOpenFilesIsAnError) {
  SwapPreflightReport report;
  // 64 descriptors are kept spare for checkpoints, data files and libraries.
  const ResourceLimits limits{.open_files_soft = 200, .locked_bytes_soft = 1 << 20, .open_files_now = 130};
  EXPECT_NO_THROW(check_resource_limits({.directory = "", .files_needed = 4}, limits, report));
  try {
    check_resource_limits({.directory = "", .files_needed = 8}, limits, report);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("RLIMIT_NOFILE"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("ulimit -n"), std::string::npos) << e.message();
  }
}

TEST(SwapResourceLimits, PinningBeyondTheLockedMemoryLimitIsANotice) {
  const ResourceLimits limits{.open_files_soft = 1 << 20, .locked_bytes_soft = 64 << 20};
  SwapPreflightReport within;
  check_resource_limits({.directory = "", .pinned_bytes = 64 << 20}, limits, within);
  EXPECT_TRUE(within.can_pin);
  EXPECT_TRUE(within.notices.empty());
  SwapPreflightReport beyond;
  check_resource_limits({.directory = "", .pinned_bytes = 65 << 20}, limits, beyond);
  EXPECT_FALSE(beyond.can_pin);
  ASSERT_EQ(beyond.notices.size(), 1u);
  EXPECT_NE(beyond.notices[0].find("RLIMIT_MEMLOCK"), std::string::npos) << beyond.notices[0];
  EXPECT_NE(beyond.notices[0].find("stay pageable"), std::string::npos) << beyond.notices[0];
  ResourceLimits privileged = limits;
  privileged.can_lock_any = true;
  SwapPreflightReport root;
  check_resource_limits({.directory = "", .pinned_bytes = 65 << 20}, privileged, root);
  EXPECT_TRUE(root.can_pin);
}

}  // namespace
}  // namespace zt::swap
