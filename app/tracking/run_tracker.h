// What a training run reports while it runs: output_dir/metrics.jsonl always (with --output_dir), and
// TensorBoard event files under output_dir/runs/<run name>/ with --with_tracking (HF run_glue_no_trainer's
// --with_tracking --report_to tensorboard).
//
// metrics.jsonl holds one JSON object per line, told apart by "type":
//   {"type": "step", "step": 20, "train/loss": 0.61, "train/learning_rate": 9e-05, ...}   every --log_every
//   {"type": "epoch", "epoch": 1, "step": 115, "train_loss": 0.63, "eval_accuracy": 0.68, ...}
// A step line's keys are the TensorBoard tags; an epoch line's key K is the tag "epoch/K". "step" counts
// completed optimizer steps (the x axis in TensorBoard). Lines written before the "type" field existed are
// epoch lines.
//
// Resuming (Note [Resuming a TensorBoard run] in tensorboard_writer.h): metrics.jsonl is rewritten without
// the lines a killed run wrote after its checkpoint (step lines past the checkpoint's step, epoch lines past
// it or of epochs the resumed run logs again, and a line cut short by the kill), so every step and epoch
// appears once; the event files get a new file starting with SessionLog START at the first step after the
// checkpoint.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zt::tracking {

class TensorBoardWriter;

struct Scalar {
  std::string tag;
  double value = 0;
};

struct RunTrackerOptions {
  std::string output_dir;  // empty: nothing is written
  bool tensorboard = false;
  std::string run_name = "glue_no_trainer";  // run_glue_no_trainer's project name in init_trackers
  bool resumed = false;
  int64_t resumed_step = 0;     // completed optimizer steps the checkpoint holds
  int64_t finished_epochs = 0;  // epochs whose lines the resumed run will not write again (kept)
};

class RunTracker {
 public:
  explicit RunTracker(RunTrackerOptions options);
  ~RunTracker();

  bool enabled() const { return !options_.output_dir.empty(); }
  // The TensorBoard run directory (empty without tensorboard).
  std::string run_dir() const;

  // TensorBoard only: a text summary (rendered as Markdown; `text` is shown verbatim, as a code block).
  void log_text(std::string_view tag, std::string_view text, int64_t step);
  // A "step" line and one scalar per entry (tag = key).
  void log_step(int64_t step, const std::vector<Scalar>& scalars);
  // An "epoch" line with the keys of `scalars`, and the scalars "epoch/<key>" at `step`.
  void log_epoch(int64_t epoch, int64_t step, const std::vector<Scalar>& scalars);

 private:
  void drop_lines_after_checkpoint(const std::string& path) const;

  RunTrackerOptions options_;
  std::ofstream metrics_;
  std::string metrics_path_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace zt::tracking
