// The --output_dir of a training run: refusing to mix two runs in one directory, and clearing the leftovers
// of crashed writers.
//
// Note [One run per output directory]
// A second run into the same --output_dir overwrote model.h5 and step_5/10.h5, appended to metrics.jsonl and
// kept the first run's step_15/20.h5, so a later --resume_from_checkpoint DIR resumed the stale step 20. As
// HF's run_glue does, a directory that holds files of a run is refused unless --overwrite_output_dir (our
// files are removed first; anything else in the directory is left alone) or --resume_from_checkpoint (the
// run continues there). Files of a run: metrics.jsonl, model.h5, MRPC.tsv, step_<N>.h5 and step_<N>/ (the
// directory form HF Accelerate writes), step_<N>.zero/ (sharded checkpoints) with its uncommitted
// step_<N>.zero.tmp/, runs/ (TensorBoard event files, --with_tracking), and temp files
// "<one of those>.tmp-<pid>". A temp file of a live process means another run is writing there right now:
// refused whatever the flags. Temp files of dead processes are removed first (runtime/atomic_file.h,
// remove_stale_temp_files).
//
// Note [The output directory's lock]
// A run holds an exclusive flock on <output_dir>/.zerotrain.lock (holding its pid) from before it looks at
// the directory until it ends: a second run into the same directory — with --overwrite_output_dir, which
// would delete the live run's files, or resuming — is refused while the first lives, and the kernel drops
// the lock of a killed run. With the lock held, uncommitted sharded checkpoints (step_<N>.zero.tmp/) are
// leftovers of a dead writer and are removed. The file is removed when the lock is released; a run that
// locked a file another released and removed in between locks again (the lock is on the inode).
// Resuming continues the run whose checkpoint is named: into a directory that holds files of another run
// (the checkpoint lies elsewhere) it is refused, as the two runs' metrics and models would mix.
//
//   const OutputDirReport report = prepare_output_dir(c.output_dir, c.overwrite_output_dir,
//                                                     !c.resume_from_checkpoint.empty(), checkpoint);
//   ... train; report.lock is released when report goes out of scope
#pragma once

#include <string>
#include <vector>

namespace zt::optim {

// The exclusive lock of Note [The output directory's lock]; move-only, released (and its file removed) on
// destruction.
class OutputDirLock {
 public:
  OutputDirLock() = default;
  // Throws zt::Error naming the directory and the pid of the run that holds it.
  explicit OutputDirLock(const std::string& dir);
  OutputDirLock(OutputDirLock&& other) noexcept;
  OutputDirLock& operator=(OutputDirLock&& other) noexcept;
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;
  ~OutputDirLock();
  bool held() const { return fd_ >= 0; }

  static constexpr const char* kFileName = ".zerotrain.lock";

 private:
  void release() noexcept;
  int fd_ = -1;
  std::string path_;
};

struct OutputDirReport {
  std::vector<std::string> removed_stale_temp_files;  // of writers that died mid-write
  std::vector<std::string> removed_for_overwrite;     // the earlier run's files (overwrite only)
  OutputDirLock lock;                                 // held for as long as the run uses the directory
};

// Creates `dir` if needed, locks it and applies Note [One run per output directory]. `checkpoint`: the
// checkpoint a resuming run loads (a step_<N>.h5 file or step_<N>.zero directory; empty when unknown).
// Throws zt::Error naming the directory, the files of the other run and the flags that resolve it.
OutputDirReport prepare_output_dir(const std::string& dir, bool overwrite, bool resuming,
                                   const std::string& checkpoint = {});

// Names (not paths) of the entries of `dir` that a training run writes, sorted; none for a missing dir.
std::vector<std::string> run_files_in(const std::string& dir);

}  // namespace zt::optim
