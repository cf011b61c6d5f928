#include "optim/swap/swap_store.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/check.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"

namespace zt::swap {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "zerotrain-swap.";

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// (host, pid) of a swap file name "zerotrain-swap.<host>.<pid>.rank<r>", or pid 0 for any other name.
// The host may contain dots, so the name is read from its end.
std::pair<std::string, long> swap_file_owner(const std::string& name) {
  if (!name.starts_with(kPrefix)) return {"", 0};
  const size_t rank_dot = name.rfind(".rank");
  if (rank_dot == std::string::npos || rank_dot <= kPrefix.size()) return {"", 0};
  const std::string rank = name.substr(rank_dot + 5);
  if (rank.empty() || rank.find_first_not_of("0123456789") != std::string::npos) return {"", 0};
  const size_t pid_dot = name.rfind('.', rank_dot - 1);
  if (pid_dot == std::string::npos || pid_dot < kPrefix.size()) return {"", 0};
  const std::string pid = name.substr(pid_dot + 1, rank_dot - pid_dot - 1);
  if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
    return {"", 0};
  return {name.substr(kPrefix.size(), pid_dot - kPrefix.size()), std::stol(pid)};
}

}  // namespace

std::string swap_file_path(const std::string& directory, int rank, long pid) {
  return (fs::path(directory) / str(kPrefix, host_name(), ".", pid, ".rank", rank)).string();
}

std::vector<std::string> remove_stale_swap_files(const std::string& directory) {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::is_directory(directory, error)) return removed;
  const std::string host = host_name();
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    if (!entry.is_regular_file(error)) continue;
    const auto [owner_host, pid] = swap_file_owner(entry.path().filename().string());
    // EPERM: the process exists but belongs to someone else; only ESRCH says nobody uses the file.
    if (pid == 0 || owner_host != host || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), error)) removed.push_back(entry.path().string());
  }
  return removed;
}

uint64_t swap_file_bytes(const std::vector<size_t>& record_bytes) {
  uint64_t total = 0;
  for (const size_t bytes : record_bytes) {
    ZT_CHECK(!__builtin_add_overflow(total, static_cast<uint64_t>(round_up_to_alignment(bytes)), &total),
             "swap store size overflows: ", record_bytes.size(), " records");
  }
  return total;
}

SwapStore::SwapStore(const SwapStoreOptions& options, AsyncFileIo& io)
    : io_(io), record_bytes_(options.record_bytes) {
  ZT_CHECK(!record_bytes_.empty(), "a swap store needs at least one record");
  ZT_CHECK(options.rank >= 0, "swap store rank must be >= 0, got ", options.rank);
  const uint64_t bytes = swap_file_bytes(record_bytes_);  // checks the sum first
  offsets_.reserve(record_bytes_.size() + 1);
  offsets_.push_back(0);
  for (const size_t record : record_bytes_) {
    const size_t aligned = round_up_to_alignment(record);
    offsets_.push_back(offsets_.back() + aligned);
    largest_transfer_ = std::max(largest_transfer_, aligned);
  }
  std::error_code error;
  ZT_CHECK(fs::is_directory(options.directory, error), "nvme_path ", options.directory,
           " is not a directory (create it first)");
  for (const std::string& stale : remove_stale_swap_files(options.directory))
    ZT_LOG(info) << "removed the swap file of a process that no longer exists: " << stale;

  const std::string path = swap_file_path(options.directory, options.rank, static_cast<long>(::getpid()));
  ZT_CHECK(!fs::exists(path, error), "swap file ", path, " is already in use by this process (rank ",
           options.rank, " has two stores)");
  file_ = IoFile::open(path, options.direct, /*create=*/true, &notice_);
  signal_removal_ = std::make_unique<RemoveOnSignalExit>(path);
  // Reserve the whole file now: a full disk is an error here, naming the path, not during a step. (A store
  // of empty records has nothing to reserve, and posix_fallocate refuses a length of 0.)
  const int rc = bytes == 0 ? 0 : ::posix_fallocate(file_.fd(), 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    file_ = IoFile();
    fs::remove(path, error);
    ZT_FAIL("cannot reserve ", format_memory_size(bytes), " for the swap file ", path, ": ",
            std::strerror(rc), " (nvme_path ", options.directory, " needs that much free space)");
  }
  if (!notice_.empty()) {
    ZT_LOG(warn) << notice_;
  }
  written_.assign(record_bytes_.size(), false);
}

SwapStore::~SwapStore() {
  for (const IoTicket& ticket : outstanding_) ticket.wait_quietly();
  if (!file_.is_open()) return;
  const std::string path = file_.path();
  file_ = IoFile();
  std::error_code error;
  fs::remove(path, error);
  if (error) {
    ZT_LOG(warn) << "cannot remove the swap file " << path << ": " << error.message();
  }
}

size_t SwapStore::record_bytes(int64_t record) const {
  ZT_CHECK(record >= 0 && record < record_count(), "swap record ", record, " out of range [0, ",
           record_count(), ") of ", path());
  return record_bytes_[static_cast<size_t>(record)];
}

size_t SwapStore::transfer_bytes(int64_t record) const {
  return round_up_to_alignment(record_bytes(record));
}

uint64_t SwapStore::record_offset(int64_t record) const {
  record_bytes(record);  // the range check
  return offsets_[static_cast<size_t>(record)];
}

bool SwapStore::written(int64_t record) const {
  record_bytes(record);  // the range check
  return written_[static_cast<size_t>(record)];
}

void SwapStore::check_transfer(int64_t record, size_t buffer_bytes, const std::byte* data) const {
  const size_t needed = transfer_bytes(record);
  ZT_CHECK(buffer_bytes >= needed, "swap buffer of ", buffer_bytes, " bytes is smaller than record ", record,
           " of ", path(), " (", needed, " bytes)");
  ZT_CHECK(reinterpret_cast<uintptr_t>(data) % kDirectIoAlignment == 0, "swap buffer for ", path(),
           " is not aligned to ", kDirectIoAlignment, " bytes");
}

void SwapStore::track(const IoTicket& ticket) {
  std::erase_if(outstanding_, [](const IoTicket& t) { return t.done(); });
  outstanding_.push_back(ticket);
}

IoTicket SwapStore::read(int64_t record, std::span<std::byte> buffer) {
  check_transfer(record, buffer.size(), buffer.data());
  IoTicket ticket = io_.read(file_, buffer.first(transfer_bytes(record)), record_offset(record));
  track(ticket);
  return ticket;
}

IoTicket SwapStore::write(int64_t record, std::span<const std::byte> buffer) {
  check_transfer(record, buffer.size(), buffer.data());
  written_[static_cast<size_t>(record)] = true;
  IoTicket ticket = io_.write(file_, buffer.first(transfer_bytes(record)), record_offset(record));
  track(ticket);
  return ticket;
}

}  // namespace zt::swap
