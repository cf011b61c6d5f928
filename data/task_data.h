// The data of one fine-tuning run, as run_glue's flags name it: a GLUE task (--task_name, files from
// --data_dir or given one by one) or the user's CSV / JSON-lines files (no --task_name). One entry point
// resolves the files, reads them, fixes the label ids and says which metrics and submission files apply;
// the trainer only tokenizes, batches and reports.
//
//   --task_name T --data_dir D   train D/train.tsv; evaluation D/dev.tsv (MNLI: dev_matched.tsv and
//                                dev_mismatched.tsv); test D/test.tsv (MNLI: test_matched / test_mismatched)
//                                when it exists. --train_file / --validation_file / --test_file replace
//                                single files (--validation_file: the first evaluation split).
//   no --task_name               --train_file and --validation_file (.csv / .json / .jsonl, required),
//                                --test_file optional; rules in data/user_files.h.
// Metric keys are run_glue's: "accuracy", "f1", "matthews_correlation", "pearson", "spearmanr", logged as
// eval_<key> (MNLI's mismatched split: eval_<key>_mm, as run_glue's combined MNLI results).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/glue_tasks.h"
#include "data/glue_tsv.h"

namespace zt::data {

struct TaskDataRequest {
  std::string task_name;                               // a GLUE task (glue_tasks()), or empty for user files
  std::string data_dir;                                // the task's GLUE folder
  std::string train_file, validation_file, test_file;  // given files (empty: from data_dir)
  std::map<std::string, int64_t> model_label2id;       // the checkpoint's label2id (user files only)
  std::optional<GlueDataset> train_rows;               // the training file already read (a FIFO reads once)
};

struct TaskSplit {
  std::string name;        // "validation", "validation_matched", "test", "test_mismatched", ...
  std::string key_suffix;  // appended to metric keys: "" or "_mm"
  std::string submission;  // test splits: the GLUE submission file name (CoLA.tsv, ...; user files:
                           // predictions.tsv)
  GlueDataset rows;
};

struct TaskData {
  std::string task_name;  // empty for user files
  bool regression = false;
  std::vector<std::string> labels;       // id -> label as written in the files (classification)
  std::vector<std::string> label_names;  // id -> name for the model's id2label (GLUE: HF datasets' names)
  std::vector<GlueMetric> metrics;
  GlueDataset train;
  std::vector<TaskSplit> eval;     // at least one
  std::vector<TaskSplit> test;     // the test files that exist
  std::vector<std::string> notes;  // lines worth printing: skipped QQP rows, the label2id decision
  int64_t num_labels() const { return regression ? 1 : static_cast<int64_t>(labels.size()); }
  std::string display_name() const { return task_name.empty() ? std::string("user data") : task_name; }
};

TaskData load_task_data(const TaskDataRequest& request);

// What a model predicted for the rows of a split, in row order: argmax classes (classification) or the
// single logit (regression).
struct SplitPredictions {
  std::vector<int64_t> classes = {};
  std::vector<double> scores = {};
};

// The task's metrics of `predictions` against `truth` (the labels as classes, or the targets as scores),
// keyed as run_glue logs them ("accuracy", ...). Throws when the lengths differ.
std::vector<std::pair<std::string, double>> task_metrics(const TaskData& task,
                                                         const SplitPredictions& predictions,
                                                         const SplitPredictions& truth);
// The truth of a labeled split's rows, for task_metrics.
SplitPredictions split_truth(const TaskData& task, const GlueDataset& rows);

// The submission text of row i's prediction: the label as written in the task's files ("entailment",
// "0"), or the score with 3 decimals (STS-B, as run_glue writes it).
std::string prediction_text(const TaskData& task, const SplitPredictions& predictions, size_t row);

// Writes the split's submission file `dir`/<split.submission>: "index\tprediction" rows in file order.
void write_task_submission(const std::string& dir, const TaskData& task, const TaskSplit& split,
                           const SplitPredictions& predictions);

}  // namespace zt::data
