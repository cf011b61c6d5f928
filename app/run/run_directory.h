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
//   const OutputDirReport report = prepare_output_dir(c.output_dir, c.overwrite_output_dir,
//                                                     !c.resume_from_checkpoint.empty());
#pragma once

#include <string>
#include <vector>

namespace zt::optim {

struct OutputDirReport {
  std::vector<std::string> removed_stale_temp_files;  // of writers that died mid-write
  std::vector<std::string> removed_for_overwrite;     // the earlier run's files (overwrite only)
};

// Creates `dir` if needed and applies Note [One run per output directory]. Throws zt::Error naming the
// directory, the files of the other run and the flags that resolve it.
OutputDirReport prepare_output_dir(const std::string& dir, bool overwrite, bool resuming);

// Names (not paths) of the entries of `dir` that a training run writes, sorted; none for a missing dir.
std::vector<std::string> run_files_in(const std::string& dir);

}  // namespace zt::optim
