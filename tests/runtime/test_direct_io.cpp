// Asynchronous direct file I/O (runtime/direct_io.h): both backends, O_DIRECT and buffered files, bitwise
// round trips of transfers split into many requests, and the errors a user meets (full disk, refused
// O_DIRECT, unaligned direct transfers, reading past the end).
#include "runtime/direct_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/support/io_backend_test.h"

namespace zt {
namespace {

void fill_pattern(std::span<std::byte> bytes, uint32_t seed) {
  std::mt19937 random(seed);
  for (std::byte& b : bytes) b = static_cast<std::byte>(random() & 0xff);
}

IoOptions options_for(IoBackendChoice backend, size_t block_size = 64 << 10, int queue_depth = 4,
                      int threads = 1) {
  return {.backend = backend, .block_size = block_size, .queue_depth = queue_depth, .thread_count = threads};
}

class DirectIoTest : public test::IoBackendTest {};

TEST_P(DirectIoTest, RoundTripOfTransfersSplitIntoManyRequests) {
  AsyncFileIo io(options_for(backend()));
  IoFile file = IoFile::open(path("store.bin"), mode(), /*create=*/true);
  EXPECT_EQ(file.direct(), mode() != DirectIoMode::off);
  // 3 transfers of 1 MiB + 8 KiB each (16 full requests and a short one), written and read back in flight
  // together, at offsets out of order.
  const size_t bytes = (1 << 20) + 8192;
  std::vector<AlignedBuffer> out, in;
  std::vector<IoTicket> tickets;
  for (int i = 0; i < 3; ++i) {
    out.emplace_back(bytes);
    in.emplace_back(bytes);
    fill_pattern(out.back().bytes(), 100 + i);
  }
  for (int i : {2, 0, 1}) tickets.push_back(io.write(file, out[i].bytes(), uint64_t(i) * bytes));
  for (IoTicket& t : tickets) t.wait();
  tickets.clear();
  for (int i : {1, 2, 0}) tickets.push_back(io.read(file, in[i].bytes(), uint64_t(i) * bytes));
  for (IoTicket& t : tickets) t.wait();
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::memcmp(out[i].data(), in[i].data(), bytes), 0) << "transfer " << i;
}

TEST_P(DirectIoTest, ErrorsNameThePathAndTheReason) {
  AsyncFileIo io(options_for(backend()));
  IoFile file = IoFile::open(path("short.bin"), mode(), /*create=*/true);
  AlignedBuffer buffer(8192);
  io.write(file, buffer.bytes().first(4096), 0).wait();
  // Reading 8 KiB of a 4 KiB file.
  test::TempDirTest::expect_error([&] { io.read(file, buffer.bytes(), 0).wait(); },
                                  {"cannot read " + path("short.bin"), "unexpected end of file"});
}

ZT_INSTANTIATE_IO_BACKEND_TESTS(DirectIoTest);

class DirectIoBackendTest : public test::TempDirTest, public ::testing::WithParamInterface<IoBackendChoice> {
 protected:
  void SetUp() override {
    test::TempDirTest::SetUp();
    const std::string reason = io_uring_unavailable_reason();
    if (GetParam() == IoBackendChoice::io_uring && !reason.empty())
      GTEST_SKIP() << "io_uring unavailable: " << reason;
  }
};

// /dev/full fails every write with ENOSPC: what a full disk looks like to the disk tier.
TEST_P(DirectIoBackendTest, FullDiskIsAnErrorNamingTheFile) {
  AsyncFileIo io(options_for(GetParam()));
  IoFile file = IoFile::open("/dev/full", DirectIoMode::off, /*create=*/false);
  AlignedBuffer buffer(256 << 10);
  test::TempDirTest::expect_error([&] { io.write(file, buffer.bytes(), 0).wait(); },
                                  {"cannot write /dev/full at offset", std::strerror(ENOSPC)});
  // The workers survive a failed request: the next transfer still runs.
  IoFile good = IoFile::open(path("after.bin"), DirectIoMode::automatic, /*create=*/true);
  io.write(good, buffer.bytes(), 0).wait();
}

// DeepSpeed's aio knobs change how requests are submitted, never what arrives.
TEST_P(DirectIoBackendTest, QueueSettingsKeepTheBytes) {
  struct Case {
    int queue_depth, threads;
    bool single_submit, overlap_events;
  };
  AlignedBuffer out(3 << 20), in(3 << 20);
  fill_pattern(out.bytes(), 7);
  for (const Case& c : {Case{1, 1, false, true}, Case{8, 2, true, true}, Case{4, 3, false, false},
                        Case{32, 1, true, false}}) {
    IoOptions options = options_for(GetParam(), 128 << 10, c.queue_depth, c.threads);
    options.single_submit = c.single_submit;
    options.overlap_events = c.overlap_events;
    AsyncFileIo io(options);
    IoFile file = IoFile::open(path("knobs.bin"), DirectIoMode::automatic, /*create=*/true);
    io.write(file, out.bytes(), 4096).wait();
    std::memset(in.data(), 0, in.size());
    io.read(file, in.bytes(), 4096).wait();
    EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0)
        << "queue depth " << c.queue_depth << ", threads " << c.threads;
  }
}

// The destructor waits for transfers nobody waited for, so their buffers can be freed after it.
TEST_P(DirectIoBackendTest, DestructorFinishesOutstandingTransfers) {
  AlignedBuffer out(2 << 20), in(2 << 20);
  fill_pattern(out.bytes(), 9);
  IoFile file = IoFile::open(path("drain.bin"), DirectIoMode::automatic, /*create=*/true);
  {
    AsyncFileIo io(options_for(GetParam()));
    io.write(file, out.bytes(), 0);
  }
  AsyncFileIo io(options_for(GetParam()));
  io.read(file, in.bytes(), 0).wait();
  EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Backends, DirectIoBackendTest,
                         ::testing::Values(IoBackendChoice::io_uring, IoBackendChoice::thread_pool),
                         [](const auto& info) {
                           return std::string(info.param == IoBackendChoice::io_uring ? "io_uring"
                                                                                      : "thread_pool");
                         });

// A file system that refuses O_DIRECT at open (tmpfs before Linux 6.6): open(2) with EINVAL for O_DIRECT.
int open_refusing_direct(const char* path, int flags, unsigned mode) {
  if (flags & O_DIRECT) {
    errno = EINVAL;
    return -1;
  }
  return ::open(path, flags, static_cast<mode_t>(mode));
}

using IoFileTest = test::TempDirTest;

TEST_F(IoFileTest, RefusedDirectIoFallsBackToBufferedWithANotice) {
  std::string notice;
  IoFile file = IoFile::open(path("a.bin"), DirectIoMode::automatic, true, &notice, open_refusing_direct);
  EXPECT_TRUE(file.is_open());
  EXPECT_FALSE(file.direct());
  EXPECT_NE(notice.find("refuses O_DIRECT"), std::string::npos) << notice;
  EXPECT_NE(notice.find(path("a.bin")), std::string::npos) << notice;
  // And the buffered file works.
  AsyncFileIo io(options_for(IoBackendChoice::automatic));
  AlignedBuffer out(8192), in(8192);
  fill_pattern(out.bytes(), 3);
  io.write(file, out.bytes(), 0).wait();
  io.read(file, in.bytes(), 0).wait();
  EXPECT_EQ(std::memcmp(out.data(), in.data(), out.size()), 0);
}

TEST_F(IoFileTest, RefusedDirectIoIsAnErrorWhenRequired) {
  expect_error(
      [&] { IoFile::open(path("b.bin"), DirectIoMode::required, true, nullptr, open_refusing_direct); },
      {path("b.bin"), "refuses O_DIRECT"});
}

TEST_F(IoFileTest, MissingDirectoryIsAnErrorNamingThePath) {
  expect_error([&] { IoFile::open(path("no/such/dir/c.bin"), DirectIoMode::automatic, true); },
               {"cannot open " + path("no/such/dir/c.bin"), std::strerror(ENOENT)});
}

TEST_F(IoFileTest, UnalignedDirectTransferIsRefused) {
  AsyncFileIo io(options_for(IoBackendChoice::automatic));
  IoFile file = IoFile::open(path("d.bin"), DirectIoMode::required, true);
  AlignedBuffer buffer(8192);
  expect_error([&] { io.write(file, buffer.bytes(), 512); },
               {path("d.bin"), "multiples of 4096", "offset 512"});
  expect_error([&] { io.write(file, buffer.bytes().first(1000), 0); }, {"size 1000"});
}

TEST(AsyncFileIoOptions, OutOfRangeSettingsAreErrors) {
  auto error_of = [](IoOptions options) {
    try {
      AsyncFileIo io(options);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string();
  };
  EXPECT_NE(error_of({.block_size = 1000}).find("block_size must be a positive multiple of 4096"),
            std::string::npos);
  EXPECT_NE(error_of({.queue_depth = 0}).find("queue_depth must be in [1, 4096], got 0"), std::string::npos);
  EXPECT_NE(error_of({.thread_count = 0}).find("thread_count must be in [1, 64], got 0"), std::string::npos);
}

TEST(AlignedBuffer, IsAlignedRoundedUpAndZeroed) {
  AlignedBuffer buffer(5000);
  EXPECT_EQ(buffer.size(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kDirectIoAlignment, 0u);
  for (std::byte b : buffer.bytes()) ASSERT_EQ(b, std::byte{0});
  AlignedBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.size(), 8192u);
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
}

}  // namespace
}  // namespace zt
