// Asynchronous direct file I/O: the transport of the disk tier (ZeRO-Infinity's NVMe offload).
//
// Note [Direct asynchronous file I/O]
// The disk tier moves optimizer shards of hundreds of MiB per step between aligned host buffers and files
// on a fast disk, while the CPU updates another shard. Two things make that run at the disk's speed:
//   O_DIRECT   transfers go between the buffer and the device without the page cache: no second copy, no
//              cache growing to the size of the state (which is what the disk tier exists to avoid). The
//              buffer address, the length and the file offset must be multiples of the logical block size;
//              kDirectIoAlignment (4096) covers every device we meet. File systems that refuse O_DIRECT
//              fail the open with EINVAL (tmpfs before Linux 6.6, some FUSE/network file systems):
//              DirectIoMode::automatic then opens the file buffered and says so once (a notice, never
//              silently), DirectIoMode::required makes that an error.
//   queue depth   one transfer is split into requests of IoOptions::block_size; each worker thread keeps
//              up to queue_depth of them in flight, so the device sees a deep queue (an NVMe drive needs
//              several outstanding requests to reach its bandwidth).
// Two backends run the requests, chosen by IoOptions::backend:
//   io_uring      each worker owns a ring (liburing) and keeps queue_depth requests submitted. DeepSpeed's
//                 aio keys map onto it: single_submit = one io_uring_submit per request instead of one per
//                 batch; overlap_events = refill the queue as requests complete (false: submit a batch and
//                 wait for all of it before the next).
//   thread_pool   each worker runs blocking pread/pwrite on one request at a time (queue depth = threads).
//                 For machines where io_uring is unavailable: a build without liburing, a kernel that
//                 disables it (kernel.io_uring_disabled), sandboxes such as gVisor or seccomp profiles that
//                 refuse io_uring_setup. IoBackendChoice::automatic falls back to it with a notice.
// Transfers complete out of order; a ticket says when all requests of one transfer are done, and wait()
// throws a zt::Error naming the file, the operation, the offset and the system's reason (a full disk is
// "No space left on device"). Buffers must stay alive and untouched until their ticket is waited for.
//
//   AsyncFileIo io({.block_size = 1 << 20, .queue_depth = 8});
//   IoFile file = IoFile::open("/nvme/state.bin", DirectIoMode::automatic);
//   AlignedBuffer buffer(64 << 20);
//   IoTicket written = io.write(file, buffer.bytes(), 0);
//   ... CPU work ...
//   written.wait();
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace zt {

inline constexpr size_t kDirectIoAlignment = 4096;

// `bytes` rounded up to a multiple of `alignment` (a power of two).
size_t round_up_to_alignment(size_t bytes, size_t alignment = kDirectIoAlignment);

// Zero-filled host memory whose address and size are multiples of the alignment (posix_memalign), as
// O_DIRECT needs. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` is rounded up to the alignment; throws zt::Error naming the size when memory runs out.
  explicit AlignedBuffer(size_t bytes, size_t alignment = kDirectIoAlignment);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

enum class DirectIoMode {
  automatic,  // O_DIRECT; buffered, with a notice, where the file system refuses it
  required,   // O_DIRECT or a zt::Error
  off,        // buffered (through the page cache)
};
std::string_view direct_io_mode_name(DirectIoMode mode);

// open(2) as IoFile::open calls it; tests pass a stand-in to play a file system that refuses O_DIRECT.
using OpenFunction = int (*)(const char* path, int flags, unsigned mode);

// A file opened for the disk tier (read-write). Closes on destruction; never removes the file.
class IoFile {
 public:
  IoFile() = default;
  // Opens `path` read-write, creating it (mode 0600) when `create`; throws zt::Error naming the path.
  // Where O_DIRECT is refused with EINVAL and `mode` is automatic, `notice` (when given) receives one
  // line saying that the file is read and written through the page cache instead.
  static IoFile open(const std::string& path, DirectIoMode mode, bool create, std::string* notice = nullptr,
                     OpenFunction open_function = nullptr);
  ~IoFile();
  IoFile(IoFile&& other) noexcept;
  IoFile& operator=(IoFile&& other) noexcept;
  IoFile(const IoFile&) = delete;
  IoFile& operator=(const IoFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  std::string path_;
  bool direct_ = false;
};

enum class IoBackend { io_uring, thread_pool };
enum class IoBackendChoice { automatic, io_uring, thread_pool };
std::string_view io_backend_name(IoBackend backend);

// DeepSpeed's "aio" block, plus the backend.
struct IoOptions {
  IoBackendChoice backend = IoBackendChoice::automatic;
  size_t block_size = size_t{1} << 20;  // bytes per request; a multiple of kDirectIoAlignment
  int queue_depth = 8;                  // requests in flight per worker (io_uring)
  int thread_count = 1;                 // workers, each with its own ring
  bool single_submit = false;           // io_uring: submit each request on its own
  bool overlap_events = true;           // io_uring: refill the queue as requests complete
};

// Empty when an io_uring ring can be set up here, else why not (built without liburing, or the kernel's
// answer to io_uring_queue_init).
std::string io_uring_unavailable_reason();

namespace detail {
struct IoTransfer;
class IoWorkers;
}  // namespace detail

// The completion of one read or write. Copyable; waiting twice is fine.
class IoTicket {
 public:
  IoTicket() = default;
  explicit IoTicket(std::shared_ptr<detail::IoTransfer> transfer) : transfer_(std::move(transfer)) {}
  // Blocks until every request of the transfer is done; throws zt::Error naming the file, the operation,
  // the offset and the reason when one failed. A default-constructed ticket is done.
  void wait() const;
  bool done() const;
  // wait() without the throw: the error message, or empty. For cleanup paths that must not throw.
  std::string wait_quietly() const;

 private:
  std::shared_ptr<detail::IoTransfer> transfer_;
};

class AsyncFileIo {
 public:
  // Starts options.thread_count workers. IoBackendChoice::automatic takes io_uring where it works and the
  // thread pool otherwise, logging a notice with the reason (also in fallback_notice()); io_uring where it
  // does not work is a zt::Error. Throws zt::Error for options out of range, naming the value.
  explicit AsyncFileIo(const IoOptions& options);
  // Waits for every outstanding request (buffers may be freed right after), then stops the workers.
  ~AsyncFileIo();
  AsyncFileIo(const AsyncFileIo&) = delete;
  AsyncFileIo& operator=(const AsyncFileIo&) = delete;

  IoBackend backend() const { return backend_; }
  const IoOptions& options() const { return options_; }
  const std::string& fallback_notice() const { return fallback_notice_; }

  // Queues a transfer of buffer.size() bytes at `offset` of `file`; the file must stay open and the buffer
  // untouched until the ticket is waited for. For a direct file, the buffer's address, its size and the
  // offset must be multiples of kDirectIoAlignment (a zt::Error otherwise). A read past the end of the file
  // fails ("unexpected end of file").
  IoTicket read(const IoFile& file, std::span<std::byte> buffer, uint64_t offset);
  IoTicket write(const IoFile& file, std::span<const std::byte> buffer, uint64_t offset);

 private:
  IoTicket submit(const IoFile& file, std::byte* buffer, size_t bytes, uint64_t offset, bool write);

  IoOptions options_;
  IoBackend backend_ = IoBackend::thread_pool;
  std::string fallback_notice_;
  std::unique_ptr<detail::IoWorkers> workers_;
};

}  // namespace zt
