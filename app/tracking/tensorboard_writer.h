// TensorBoard event files written from C++: what torch.utils.tensorboard.SummaryWriter writes for
// add_scalar and add_text, in the same format (TFRecord framing, app/tracking/record_file.h, of
// tensorboard.Event protobuf messages, tensorboard_event.h).
//
//   TensorBoardWriter writer("out/runs/glue_no_trainer");          // creates the directory and a new file
//   writer.add_scalar("train/loss", 0.69, 10);
//   writer.add_text("config", describe_text, 0);
//   writer.flush();                                                 // also done by the destructor
//
// Each writer opens a new file events.out.tfevents.<unix seconds>.<host>.<pid>.<n> in the run directory, as
// SummaryWriter does; TensorBoard reads every file of a run directory in name order as one run.
//
// Note [Resuming a TensorBoard run]
// A resumed run writes a new file into the same run directory, starting with SessionLog START at the first
// step it will log (start_session). TensorBoard's reader then drops whatever earlier files logged at that
// step or later (purge_orphaned_data: the steps a killed run logged after its last checkpoint), so the
// curves continue from the checkpoint without duplicate steps. Records are flushed to the file after every
// write call group (flush), so a killed run loses at most the records of its last unflushed group, and a
// record cut short by the kill is skipped by the reader (record_file.h).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace zt::tracking {

class TensorBoardWriter {
 public:
  // Creates `run_dir` if needed and a new event file in it, whose first record is the file version. Throws
  // zt::Error naming the path when it cannot be written.
  explicit TensorBoardWriter(const std::string& run_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  const std::string& path() const { return path_; }

  // A float32 scalar (Summary.Value.simple_value), as SummaryWriter.add_scalar writes it.
  void add_scalar(std::string_view tag, double value, int64_t step);
  // A text summary (plugin "text", a scalar DT_STRING tensor), as SummaryWriter.add_text writes it.
  // TensorBoard renders it as Markdown.
  void add_text(std::string_view tag, std::string_view text, int64_t step);
  // SessionLog START at `step`: Note [Resuming a TensorBoard run].
  void start_session(int64_t step);
  // Writes buffered records to the file; throws zt::Error naming the file when that fails (disk full).
  void flush();

 private:
  void write_event(const std::string& serialized_event);

  std::string path_;
  std::ofstream file_;
};

// "events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>", n counting the writers of this process.
std::string event_file_name();

}  // namespace zt::tracking
