#include "runtime/direct_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#if ZT_WITH_LIBURING
#include <liburing.h>
#endif

#include "runtime/check.h"
#include "runtime/log.h"

namespace zt {

size_t round_up_to_alignment(size_t bytes, size_t alignment) {
  ZT_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "alignment must be a power of two, got ",
           alignment);
  return (bytes + alignment - 1) & ~(alignment - 1);
}

// ---------------------------------------------------------------------------------------------------------
// AlignedBuffer

AlignedBuffer::AlignedBuffer(size_t bytes, size_t alignment) {
  size_ = round_up_to_alignment(bytes, alignment);
  if (size_ == 0) return;
  void* memory = nullptr;
  const int rc = ::posix_memalign(&memory, alignment, size_);
  ZT_CHECK(rc == 0, "cannot allocate an aligned host buffer of ", size_, " bytes: ", std::strerror(rc));
  data_ = static_cast<std::byte*>(memory);
  std::memset(data_, 0, size_);
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept : data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

// ---------------------------------------------------------------------------------------------------------
// IoFile

std::string_view direct_io_mode_name(DirectIoMode mode) {
  switch (mode) {
    case DirectIoMode::automatic:
      return "automatic";
    case DirectIoMode::required:
      return "required";
    case DirectIoMode::off:
      return "off";
  }
  return "?";
}

namespace {

int system_open(const char* path, int flags, unsigned mode) {
  return ::open(path, flags, static_cast<mode_t>(mode));
}

}  // namespace

IoFile IoFile::open(const std::string& path, DirectIoMode mode, bool create, std::string* notice,
                    OpenFunction open_function) {
  if (open_function == nullptr) open_function = system_open;
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0);
  IoFile file;
  file.path_ = path;
  if (mode != DirectIoMode::off) {
    file.fd_ = open_function(path.c_str(), flags | O_DIRECT, 0600);
    if (file.fd_ >= 0) {
      file.direct_ = true;
      return file;
    }
    const int error = errno;
    ZT_CHECK(error == EINVAL, "cannot open ", path, ": ", std::strerror(error));
    ZT_CHECK(mode == DirectIoMode::automatic, "the file system of ", path,
             " refuses O_DIRECT (direct I/O is required here; use a local disk such as ext4 or xfs)");
    if (notice != nullptr) {
      *notice = str("the file system of ", path,
                    " refuses O_DIRECT: reading and writing it through the page cache (slower, and the "
                    "cache grows with the state; put nvme_path on ext4 or xfs to avoid this)");
    }
  }
  file.fd_ = open_function(path.c_str(), flags, 0600);
  ZT_CHECK(file.fd_ >= 0, "cannot open ", path, ": ", std::strerror(errno));
  return file;
}

IoFile::~IoFile() {
  if (fd_ >= 0) ::close(fd_);
}

IoFile::IoFile(IoFile&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), direct_(other.direct_) {
  other.fd_ = -1;
}

IoFile& IoFile::operator=(IoFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    direct_ = other.direct_;
    other.fd_ = -1;
  }
  return *this;
}

std::string_view io_backend_name(IoBackend backend) {
  return backend == IoBackend::io_uring ? "io_uring" : "thread_pool";
}

// ---------------------------------------------------------------------------------------------------------
// Transfers and requests

namespace detail {

// One read or write as the caller asked for it, split into requests of at most block_size bytes.
struct IoTransfer {
  std::string path;
  bool write = false;
  std::mutex mutex;
  std::condition_variable finished;
  size_t remaining = 0;  // requests not finished yet
  std::string error;     // the first request's failure

  void finish_request(const std::string& failure) {
    std::lock_guard lock(mutex);
    if (!failure.empty() && error.empty()) error = str("cannot ", write ? "write " : "read ", path, failure);
    if (--remaining == 0) finished.notify_all();
  }
};

struct IoRequest {
  std::shared_ptr<IoTransfer> transfer;
  int fd = -1;
  std::byte* buffer = nullptr;
  size_t bytes = 0;
  uint64_t offset = 0;
  bool write = false;
};

namespace {

std::string request_failure(const IoRequest& request, const std::string& reason) {
  return str(" at offset ", request.offset, " (", request.bytes, " bytes): ", reason);
}

// What is left of `request` after `done` bytes went through.
void advance(IoRequest& request, size_t done) {
  request.buffer += done;
  request.bytes -= done;
  request.offset += done;
}

// Runs one request with blocking pread/pwrite to the end; returns the failure text or empty.
std::string run_blocking(IoRequest request) {
  while (request.bytes > 0) {
    const ssize_t n =
        request.write
            ? ::pwrite(request.fd, request.buffer, request.bytes, static_cast<off_t>(request.offset))
            : ::pread(request.fd, request.buffer, request.bytes, static_cast<off_t>(request.offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return request_failure(request, std::strerror(errno));
    }
    if (n == 0) {
      return request_failure(request,
                             request.write ? "the file system accepted no bytes" : "unexpected end of file");
    }
    advance(request, static_cast<size_t>(n));
  }
  return {};
}

}  // namespace

// The worker threads and, for io_uring, one ring per worker.
class IoWorkers {
 public:
  IoWorkers(const IoOptions& options, IoBackend backend) : options_(options) {
#if ZT_WITH_LIBURING
    if (backend == IoBackend::io_uring) {
      // Rings are set up here, on the caller's thread, so that a failure is an error of the constructor.
      for (int i = 0; i < options.thread_count; ++i) {
        auto ring = std::make_unique<io_uring>();
        const int rc = io_uring_queue_init(static_cast<unsigned>(options.queue_depth), ring.get(), 0);
        if (rc < 0) {
          for (auto& r : rings_) io_uring_queue_exit(r.get());
          rings_.clear();
          ZT_FAIL("cannot set up an io_uring ring of depth ", options.queue_depth, ": ", std::strerror(-rc));
        }
        rings_.push_back(std::move(ring));
      }
      for (auto& ring : rings_) threads_.emplace_back([this, r = ring.get()] { run_io_uring(r); });
      return;
    }
#else
    ZT_CHECK(backend == IoBackend::thread_pool, "io_uring needs a build with liburing");
#endif
    for (int i = 0; i < options.thread_count; ++i) threads_.emplace_back([this] { run_thread_pool(); });
  }

  ~IoWorkers() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
#if ZT_WITH_LIBURING
    for (auto& r : rings_) io_uring_queue_exit(r.get());
#endif
  }

  void enqueue(std::vector<IoRequest>& requests) {
    {
      std::lock_guard lock(mutex_);
      for (IoRequest& r : requests) queue_.push_back(std::move(r));
    }
    work_.notify_all();
  }

 private:
  // Up to `room` queued requests into `out`. Blocks while there is nothing to do and `block` is set;
  // returns false when the workers are stopping and the queue is empty.
  bool take(std::deque<IoRequest>& out, size_t room, bool block) {
    std::unique_lock lock(mutex_);
    if (block) work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return !stopping_ || !block;
    while (room > 0 && !queue_.empty()) {
      out.push_back(std::move(queue_.front()));
      queue_.pop_front();
      --room;
    }
    return true;
  }

  void run_thread_pool() {
    std::deque<IoRequest> taken;
    while (true) {
      taken.clear();
      if (!take(taken, 1, /*block=*/true)) return;
      for (IoRequest& r : taken) r.transfer->finish_request(run_blocking(r));
    }
  }

#if ZT_WITH_LIBURING
  void run_io_uring(io_uring* ring) {
    const auto depth = static_cast<size_t>(options_.queue_depth);
    std::vector<IoRequest> slots(depth);  // the request of each in-flight slot (user_data = slot index)
    std::vector<size_t> free_slots;
    for (size_t i = depth; i-- > 0;) free_slots.push_back(i);
    std::deque<IoRequest> pending;  // taken or partly done, waiting for a slot
    size_t in_flight = 0;

    while (true) {
      // Fill the queue. overlap_events false: a new batch only once the previous one has completed.
      const size_t room = (!options_.overlap_events && in_flight > 0) ? 0 : depth - in_flight;
      if (pending.size() < room) {
        const bool idle = in_flight == 0 && pending.empty();
        if (!take(pending, room - pending.size(), /*block=*/idle) && idle) return;
      }
      for (size_t n = 0; n < room && !pending.empty(); ++n) {
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        if (sqe == nullptr) break;
        const size_t slot = free_slots.back();
        free_slots.pop_back();
        slots[slot] = std::move(pending.front());
        pending.pop_front();
        const IoRequest& r = slots[slot];
        if (r.write) {
          io_uring_prep_write(sqe, r.fd, r.buffer, static_cast<unsigned>(r.bytes), r.offset);
        } else {
          io_uring_prep_read(sqe, r.fd, r.buffer, static_cast<unsigned>(r.bytes), r.offset);
        }
        io_uring_sqe_set_data64(sqe, slot);
        ++in_flight;
        if (options_.single_submit) check_submit(io_uring_submit(ring));
      }
      if (in_flight == 0) continue;

      // Submit what is prepared (batch mode), wait for one completion, then take every one that is ready.
      check_submit(io_uring_submit_and_wait(ring, 1));
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(ring, &cqe) == 0 && cqe != nullptr) {
        const auto slot = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(ring, cqe);
        IoRequest request = std::move(slots[slot]);
        free_slots.push_back(slot);
        --in_flight;
        complete(std::move(request), res, pending);
      }
    }
  }

  // io_uring_submit's result. Interrupted or busy submits are retried by the next call (the requests stay
  // in the submission queue). Anything else means the ring itself is unusable, with requests of callers in
  // it that would otherwise wait forever: the process ends with the reason.
  static void check_submit(int rc) {
    if (rc >= 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) return;
    ZT_LOG(error) << "io_uring submit failed: " << std::strerror(-rc) << "; disk I/O cannot continue";
    std::abort();
  }

  // A completion: done, failed, or partly done (the rest goes back to `pending`).
  static void complete(IoRequest request, int res, std::deque<IoRequest>& pending) {
    if (res == -EINTR || res == -EAGAIN) {
      pending.push_back(std::move(request));
      return;
    }
    if (res < 0) {
      request.transfer->finish_request(request_failure(request, std::strerror(-res)));
      return;
    }
    if (res == 0) {
      request.transfer->finish_request(request_failure(
          request, request.write ? "the file system accepted no bytes" : "unexpected end of file"));
      return;
    }
    advance(request, static_cast<size_t>(res));
    if (request.bytes > 0) {
      pending.push_back(std::move(request));
      return;
    }
    request.transfer->finish_request({});
  }

  std::vector<std::unique_ptr<io_uring>> rings_;
#endif

  IoOptions options_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<IoRequest> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

// ---------------------------------------------------------------------------------------------------------
// IoTicket

void IoTicket::wait() const {
  const std::string error = wait_quietly();
  if (!error.empty()) throw Error(error);
}

std::string IoTicket::wait_quietly() const {
  if (!transfer_) return {};
  std::unique_lock lock(transfer_->mutex);
  transfer_->finished.wait(lock, [&] { return transfer_->remaining == 0; });
  return transfer_->error;
}

bool IoTicket::done() const {
  if (!transfer_) return true;
  std::lock_guard lock(transfer_->mutex);
  return transfer_->remaining == 0;
}

// ---------------------------------------------------------------------------------------------------------
// AsyncFileIo

std::string io_uring_unavailable_reason() {
#if ZT_WITH_LIBURING
  io_uring ring{};
  const int rc = io_uring_queue_init(1, &ring, 0);
  if (rc < 0) return str("io_uring_queue_init failed: ", std::strerror(-rc));
  io_uring_queue_exit(&ring);
  return {};
#else
  return "this build has no liburing (apt install liburing-dev, then rebuild)";
#endif
}

AsyncFileIo::AsyncFileIo(const IoOptions& options) : options_(options) {
  ZT_CHECK(options.block_size > 0 && options.block_size % kDirectIoAlignment == 0,
           "aio block_size must be a positive multiple of ", kDirectIoAlignment, " bytes, got ",
           options.block_size);
  ZT_CHECK(options.block_size <= (size_t{1} << 30), "aio block_size must be at most 1 GiB, got ",
           options.block_size);
  ZT_CHECK(options.queue_depth >= 1 && options.queue_depth <= 4096,
           "aio queue_depth must be in [1, 4096], got ", options.queue_depth);
  ZT_CHECK(options.thread_count >= 1 && options.thread_count <= 64,
           "aio thread_count must be in [1, 64], got ", options.thread_count);
  switch (options.backend) {
    case IoBackendChoice::thread_pool:
      backend_ = IoBackend::thread_pool;
      break;
    case IoBackendChoice::io_uring: {
      const std::string reason = io_uring_unavailable_reason();
      ZT_CHECK(reason.empty(), "io_uring is not available here: ", reason);
      backend_ = IoBackend::io_uring;
      break;
    }
    case IoBackendChoice::automatic: {
      const std::string reason = io_uring_unavailable_reason();
      if (reason.empty()) {
        backend_ = IoBackend::io_uring;
      } else {
        backend_ = IoBackend::thread_pool;
        fallback_notice_ = str("io_uring is not available (", reason, "): disk I/O runs on ",
                               options.thread_count, " thread(s) with pread/pwrite instead");
        ZT_LOG(warn) << fallback_notice_;
      }
      break;
    }
  }
  workers_ = std::make_unique<detail::IoWorkers>(options_, backend_);
}

AsyncFileIo::~AsyncFileIo() = default;

IoTicket AsyncFileIo::read(const IoFile& file, std::span<std::byte> buffer, uint64_t offset) {
  return submit(file, buffer.data(), buffer.size(), offset, /*write=*/false);
}

IoTicket AsyncFileIo::write(const IoFile& file, std::span<const std::byte> buffer, uint64_t offset) {
  // The request only reads from a write's buffer; one request type serves both directions.
  return submit(file, const_cast<std::byte*>(buffer.data()), buffer.size(), offset, /*write=*/true);
}

IoTicket AsyncFileIo::submit(const IoFile& file, std::byte* buffer, size_t bytes, uint64_t offset,
                             bool write) {
  ZT_CHECK(file.is_open(), "disk I/O on a file that is not open");
  if (file.direct()) {
    ZT_CHECK(reinterpret_cast<uintptr_t>(buffer) % kDirectIoAlignment == 0 &&
                 bytes % kDirectIoAlignment == 0 && offset % kDirectIoAlignment == 0,
             "direct I/O on ", file.path(),
             " needs the buffer address, the size and the offset to be multiples of ", kDirectIoAlignment,
             " (size ", bytes, ", offset ", offset, ")");
  }
  auto transfer = std::make_shared<detail::IoTransfer>();
  transfer->path = file.path();
  transfer->write = write;
  if (bytes == 0) return IoTicket(std::move(transfer));
  std::vector<detail::IoRequest> requests;
  for (size_t done = 0; done < bytes; done += options_.block_size) {
    const size_t n = std::min(options_.block_size, bytes - done);
    requests.push_back({transfer, file.fd(), buffer + done, n, offset + done, write});
  }
  transfer->remaining = requests.size();
  workers_->enqueue(requests);
  return IoTicket(std::move(transfer));
}

}  // namespace zt
