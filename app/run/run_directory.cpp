#include "app/run/run_directory.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <string_view>

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

}  // namespace

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

OutputDirReport prepare_output_dir(const std::string& dir, bool overwrite, bool resuming) {
  std::error_code error;
  ZT_CHECK(!fs::exists(dir, error) || fs::is_directory(dir, error), "--output_dir ", dir,
           " exists and is not a directory");
  fs::create_directories(dir, error);
  ZT_CHECK(!error, "--output_dir ", dir, ": cannot create it (", error.message(), ")");

  OutputDirReport report;
  report.removed_stale_temp_files = remove_stale_temp_files(dir);
  const std::vector<std::string> ours = run_files_in(dir);
  for (const std::string& name : ours) {
    const long owner = temp_file_owner(name);
    ZT_CHECK(owner <= 0 || owner == static_cast<long>(getpid()), "--output_dir ", dir, " is in use: process ",
             owner, " is writing ", name,
             " there now (remove that file if the process is not a training run)");
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
