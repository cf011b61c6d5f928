#include "app/run/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "runtime/atomic_file.h"
#include "runtime/check.h"

namespace zt::optim {
namespace {

namespace fs = std::filesystem;

// "step_<digits><suffix>".
bool is_step_name(std::string_view name, std::string_view suffix) {
  constexpr std::string_view prefix = "step_";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  return !digits.empty() &&
         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A file or directory a run writes (or its temp file), by name.
bool is_run_entry(const std::string& name, bool is_directory) {
  // step_<N>/ (HF Accelerate), step_<N>.zero/ (a sharded checkpoint) and its uncommitted step_<N>.zero.tmp/,
  // runs/ (TensorBoard event files, --with_tracking)
  if (is_directory)
    return is_step_name(name, "") || is_step_name(name, ".zero") || is_step_name(name, ".zero.tmp") ||
           name == "runs";
  std::string_view base = name;
  if (temp_file_owner(name) > 0) base = base.substr(0, base.rfind(".tmp-"));
  return base == "metrics.jsonl" || base == "model.h5" || base == "MRPC.tsv" || is_step_name(base, ".h5");
}

std::string listed(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += str(" and ", names.size() - kShown, " more");
  return out;
}

// The pid a lock file holds, for the message; 0 when unreadable.
long lock_holder(const std::string& path) {
  long pid = 0;
  std::ifstream(path) >> pid;
  return pid;
}

}  // namespace

OutputDirLock::OutputDirLock(const std::string& dir) : path_((fs::path(dir) / kFileName).string()) {
  for (;;) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ZT_CHECK(fd >= 0, "--output_dir ", dir, ": cannot create its lock file ", path_, " (",
             std::strerror(errno), ")");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      ::close(fd);
      ZT_CHECK(error == EWOULDBLOCK, "--output_dir ", dir, ": cannot lock ", path_, " (",
               std::strerror(error), ")");
      const long holder = lock_holder(path_);
      ZT_FAIL("--output_dir ", dir, " is in use by another run",
              holder > 0 ? str(" (process ", holder, ")") : std::string(), ", which holds its lock ", path_,
              "; wait for it to end, or choose another --output_dir");
    }
    // The holder before us may have removed the file after we opened it: then the lock is on a file no one
    // else will open, and we lock the one at the path now.
    struct stat locked {};
    struct stat named {};
    if (::fstat(fd, &locked) == 0 && ::stat(path_.c_str(), &named) == 0 && locked.st_ino == named.st_ino &&
        locked.st_dev == named.st_dev) {
      fd_ = fd;
      break;
    }
    ::close(fd);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  // The pid is for messages only; the lock holds without it.
  const bool written = ::ftruncate(fd_, 0) == 0 &&
                       ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  static_cast<void>(written);
}

OutputDirLock::OutputDirLock(OutputDirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

OutputDirLock& OutputDirLock::operator=(OutputDirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

OutputDirLock::~OutputDirLock() {
  release();
}

void OutputDirLock::release() noexcept {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked, so no one holds a lock on a file at this path after us
  ::close(fd_);
  fd_ = -1;
}

std::vector<std::string> run_files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (is_run_entry(name, entry.is_directory(error))) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

OutputDirReport prepare_output_dir(const std::string& dir, bool overwrite, bool resuming,
                                   const std::string& checkpoint) {
  std::error_code error;
  ZT_CHECK(!fs::exists(dir, error) || fs::is_directory(dir, error), "--output_dir ", dir,
           " exists and is not a directory");
  fs::create_directories(dir, error);
  ZT_CHECK(!error, "--output_dir ", dir, ": cannot create it (", error.message(), ")");

  OutputDirReport report;
  report.lock = OutputDirLock(dir);
  report.removed_stale_temp_files = remove_stale_temp_files(dir);
  // With the lock held no one writes here: an uncommitted sharded checkpoint is a dead writer's.
  for (const std::string& name : run_files_in(dir)) {
    if (!is_step_name(name, ".zero.tmp")) continue;
    const fs::path path = fs::path(dir) / name;
    fs::remove_all(path, error);
    ZT_CHECK(!error, "--output_dir ", dir, ": cannot remove the unfinished checkpoint ", path.string(), " (",
             error.message(), ")");
    report.removed_stale_temp_files.push_back(path.string());
  }
  const std::vector<std::string> ours = run_files_in(dir);
  for (const std::string& name : ours) {
    const long owner = temp_file_owner(name);
    ZT_CHECK(owner <= 0 || owner == static_cast<long>(getpid()), "--output_dir ", dir, " is in use: process ",
             owner, " is writing ", name,
             " there now (remove that file if the process is not a training run)");
  }
  if (resuming && !ours.empty() && !checkpoint.empty()) {
    const fs::path run_of_checkpoint = fs::path(checkpoint).parent_path();
    const bool same_run = fs::equivalent(run_of_checkpoint.empty() ? "." : run_of_checkpoint, dir, error);
    ZT_CHECK(same_run, "--output_dir ", dir, " holds ", listed(ours), " of another run than the checkpoint ",
             checkpoint, " (which is in ", run_of_checkpoint.string(),
             "): resuming there would mix the two runs' metrics and models. Resume into ",
             run_of_checkpoint.string(), " or into an empty --output_dir");
  }
  if (ours.empty() || resuming) return report;
  ZT_CHECK(overwrite, "Output directory (", dir, ") already exists and is not empty: it holds ", listed(ours),
           " of an earlier run. Use --overwrite_output_dir to overcome (it removes those files), or "
           "--resume_from_checkpoint ",
           dir, " to continue that run.");
  for (const std::string& name : ours) {
    const fs::path path = fs::path(dir) / name;
    fs::remove_all(path, error);
    ZT_CHECK(!error, "--overwrite_output_dir: cannot remove ", path.string(), " (", error.message(), ")");
    report.removed_for_overwrite.push_back(path.string());
  }
  sync_directory(dir);
  return report;
}

}  // namespace zt::optim
