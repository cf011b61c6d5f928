#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/check.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kTempMarker = ".tmp-";

// fsync of an open-able path (a file or a directory); errno text on failure.
void sync_path(const std::string& path, int flags, const char* what) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  ZT_CHECK(fd >= 0, "cannot open ", what, " ", path, " to sync it (", std::strerror(errno), ")");
  const int status = ::fsync(fd);
  const int sync_errno = errno;
  ::close(fd);
  ZT_CHECK(status == 0, "cannot sync ", what, " ", path, " to disk (", std::strerror(sync_errno), ")");
}

std::string directory_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void remove_quietly(const std::string& path) {
  std::error_code ignored;
  fs::remove(path, ignored);
}

}  // namespace

std::string temp_path_for(const std::string& path) {
  return str(path, kTempMarker, static_cast<long>(getpid()));
}

void sync_directory(const std::string& dir) {
  sync_path(dir, O_RDONLY | O_DIRECTORY, "directory");
}

void publish_temp_file(const std::string& temp_path, const std::string& path) {
  try {
    sync_path(temp_path, O_RDONLY, "file");
    ZT_CHECK(std::rename(temp_path.c_str(), path.c_str()) == 0, "cannot rename ", temp_path, " onto ", path,
             " (", std::strerror(errno), ")");
  } catch (...) {
    remove_quietly(temp_path);
    throw;
  }
  // The new file is in place; a failure here only means its name may not survive a power loss.
  sync_directory(directory_of(path));
}

void atomic_write_file(const std::string& path,
                       const std::function<void(const std::string& temp_path)>& write) {
  const std::string temp = temp_path_for(path);
  try {
    write(temp);
  } catch (...) {
    remove_quietly(temp);
    throw;
  }
  publish_temp_file(temp, path);
}

long temp_file_owner(const std::string& file_name) {
  const size_t marker = file_name.rfind(kTempMarker);
  if (marker == std::string::npos || marker == 0) return 0;
  const char* begin = file_name.data() + marker + kTempMarker.size();
  const char* end = file_name.data() + file_name.size();
  long pid = 0;
  const auto [stop, error] = std::from_chars(begin, end, pid);
  if (error != std::errc() || stop != end || begin == end || pid <= 0) return 0;
  return pid;
}

std::vector<std::string> remove_stale_temp_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return removed;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (!entry.is_regular_file(error)) continue;
    const long pid = temp_file_owner(entry.path().filename().string());
    // EPERM: the process exists but belongs to someone else; only ESRCH says nobody is writing.
    if (pid == 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), error)) removed.push_back(entry.path().string());
  }
  return removed;
}

}  // namespace zt
