#include "optim/swap/swap_preflight.h"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "optim/swap/swap_store.h"
#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt::swap {

namespace fs = std::filesystem;

namespace {

constexpr int kCapIpcLock = 14;       // linux/capability.h
constexpr uint64_t kSpareFiles = 64;  // checkpoints, data files, the HDF5 library, logs

uint64_t limit_value(rlim_t value) {
  return value == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(value);
}

bool has_effective_capability(int capability) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (!line.starts_with("CapEff:")) continue;
    std::istringstream hex(line.substr(7));
    uint64_t mask = 0;
    hex >> std::hex >> mask;
    return (mask >> capability) & 1;
  }
  return false;
}

// Opens a probe file in `directory` as the store would, unlinks it at once, and moves one aligned block
// through it. True when that worked with O_DIRECT.
bool probe_direct_io(const SwapPreflightRequest& request, SwapPreflightReport& report) {
  const std::string probe =
      swap_file_path(request.directory, request.rank, static_cast<long>(::getpid())) + ".probe";
  std::string notice;
  IoFile file = IoFile::open(probe, request.direct, /*create=*/true, &notice);
  std::error_code ignored;
  fs::remove(probe, ignored);
  if (!notice.empty()) report.notices.push_back(notice);
  AlignedBuffer block(kDirectIoAlignment);
  std::memset(block.data(), 0x5a, block.size());
  // Some file systems accept O_DIRECT at open and refuse it at the first transfer.
  ssize_t n = ::pwrite(file.fd(), block.data(), block.size(), 0);
  if (n == static_cast<ssize_t>(block.size())) n = ::pread(file.fd(), block.data(), block.size(), 0);
  if (n == static_cast<ssize_t>(block.size())) return file.direct();
  const int error = errno;
  ZT_CHECK(n < 0, "nvme_path ", request.directory, ": a probe transfer of ", block.size(), " bytes moved ",
           n);
  ZT_CHECK(error == EINVAL && file.direct(), "nvme_path ", request.directory,
           " is not writable: ", std::strerror(error));
  ZT_CHECK(request.direct != DirectIoMode::required, "the file system of nvme_path ", request.directory,
           " refuses O_DIRECT transfers (direct I/O is required here; use a local disk such as ext4 or xfs)");
  report.notices.push_back(str("the file system of nvme_path ", request.directory,
                               " refuses O_DIRECT transfers: the swap files are read and written through the "
                               "page cache (slower; put nvme_path on ext4 or xfs to avoid this)"));
  return false;
}

}  // namespace

ResourceLimits current_resource_limits() {
  ResourceLimits limits;
  rlimit value{};
  if (::getrlimit(RLIMIT_NOFILE, &value) == 0) limits.open_files_soft = limit_value(value.rlim_cur);
  if (::getrlimit(RLIMIT_MEMLOCK, &value) == 0) limits.locked_bytes_soft = limit_value(value.rlim_cur);
  limits.can_lock_any = has_effective_capability(kCapIpcLock);
  std::error_code error;
  for (auto it = fs::directory_iterator("/proc/self/fd", error); !error && it != fs::directory_iterator();
       it.increment(error)) {
    ++limits.open_files_now;
  }
  return limits;
}

void check_resource_limits(const SwapPreflightRequest& request, const ResourceLimits& limits,
                           SwapPreflightReport& report) {
  const uint64_t files = limits.open_files_now + static_cast<uint64_t>(request.files_needed) + kSpareFiles;
  ZT_CHECK(files <= limits.open_files_soft, "the disk tier needs ", request.files_needed,
           " more open files, and ", limits.open_files_now, " are open: the limit of ",
           limits.open_files_soft, " (RLIMIT_NOFILE) leaves too few; raise it with `ulimit -n ", files * 2,
           "`");
  report.can_pin =
      request.pinned_bytes == 0 || limits.can_lock_any || request.pinned_bytes <= limits.locked_bytes_soft;
  if (!report.can_pin) {
    report.notices.push_back(str("pinning ", format_memory_size(request.pinned_bytes),
                                 " of disk-tier buffers exceeds the locked-memory limit of ",
                                 format_memory_size(limits.locked_bytes_soft),
                                 " (RLIMIT_MEMLOCK): they stay pageable (slower host-device copies); raise "
                                 "it with `ulimit -l unlimited`"));
  }
}

SwapPreflightReport preflight_swap_directory(const SwapPreflightRequest& request) {
  SwapPreflightReport report;
  std::error_code error;
  ZT_CHECK(!request.directory.empty(), "nvme_path is empty: the disk tier needs a directory on a fast disk");
  ZT_CHECK(fs::is_directory(request.directory, error), "nvme_path ", request.directory,
           " is not a directory (create it first)");
  // Files of dead processes first, so that their space counts as free.
  for (const std::string& stale : remove_stale_swap_files(request.directory))
    report.notices.push_back(str("removed the swap file of a process that no longer exists: ", stale));
  struct statvfs space {};
  ZT_CHECK(::statvfs(request.directory.c_str(), &space) == 0, "cannot read the free space of nvme_path ",
           request.directory, ": ", std::strerror(errno));
  report.free_bytes = static_cast<uint64_t>(space.f_bavail) * static_cast<uint64_t>(space.f_frsize);
  ZT_CHECK(request.bytes_needed <= report.free_bytes, "nvme_path ", request.directory, " has ",
           format_memory_size(report.free_bytes), " free, and the disk tier needs ",
           format_memory_size(request.bytes_needed),
           " for its swap files (free space or choose another nvme_path)");
  if (request.direct != DirectIoMode::off) {
    report.direct_io = probe_direct_io(request, report);
  }
  check_resource_limits(request, current_resource_limits(), report);
  return report;
}

}  // namespace zt::swap
