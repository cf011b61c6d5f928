// Replacing files so that a crash, a full disk or a power loss leaves at a path either the previous file or
// the complete new one, never a partial one; and removing the temp files such writes leave behind when a
// process dies mid-write.
//
// Note [Atomic file replacement]
//   1. Everything is written to "<path>.tmp-<pid>" beside <path>: rename is atomic only within one
//      filesystem, and the pid says whose temp it is (remove_stale_temp_files).
//   2. fsync(temp): without it ext4/xfs may commit the rename before the data, and after a power loss the
//      name points at an empty or partial file.
//   3. rename(temp, path): readers see the old file or the new one.
//   4. fsync(directory): the rename is a change of the directory; until the directory is synced a power
//      loss can bring back the old name (or no file at all, for a first write).
// A failure before 3 (a throwing writer, a full disk, a failed fsync) removes the temp file and leaves
// <path> as it was. A process killed before 3 leaves its temp file, which remove_stale_temp_files
// deletes on the next start in that directory.
//
//   atomic_write_file("out/config.json", [&](const std::string& temp) {
//     std::ofstream file(temp, std::ios::binary);
//     file << text;
//     file.close();
//     ZT_CHECK(!file.fail(), "cannot write ", temp, " (disk full?)");
//   });
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace zt {

// "<path>.tmp-<pid of this process>".
std::string temp_path_for(const std::string& path);

// Steps 2-4 of Note [Atomic file replacement] for a complete, closed temp file. Throws zt::Error naming
// the file; the temp file is removed on failure.
void publish_temp_file(const std::string& temp_path, const std::string& path);

// Calls write(temp_path_for(path)) to write the whole file, then publishes it. When `write` throws, or
// publishing fails, the temp file is removed and the error propagates.
void atomic_write_file(const std::string& path,
                       const std::function<void(const std::string& temp_path)>& write);

// fsync of a directory, so the creation, rename or removal of its entries survives a power loss.
void sync_directory(const std::string& dir);

// Removes the files "<name>.tmp-<pid>" in `dir` whose pid is not a live process (kill(pid, 0) fails with
// ESRCH): the leftovers of writers killed mid-write. Returns the removed paths; a missing directory has
// none. A temp file of a live process is kept, even one whose pid was reused by an unrelated process.
std::vector<std::string> remove_stale_temp_files(const std::string& dir);

// The pid of a temp file name "<name>.tmp-<pid>", or 0 when the name does not have that form.
long temp_file_owner(const std::string& file_name);

}  // namespace zt
