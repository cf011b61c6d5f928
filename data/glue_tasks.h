// The nine GLUE tasks as HF run_glue takes them (--task_name), read from the GLUE distribution's own TSV
// files (the glue_data/<TASK>/ folders of the GLUE download script).
//
// Table (columns 0-based; "last" = the row's last field; every file is tab-separated, no quoting, UTF-8):
//   task   train/dev header        text (train/dev)  label      labels (id order)                  test text
//   cola   none, 4 fields          3                 1          0 1                                1 (header)
//   sst2   sentence label          0                 1          0 1                                1
//   mrpc   Quality #1 ID ...       3, 4              0          0 1                                3, 4
//   qqp    id qid1 qid2 q1 q2 dup  3, 4              5          0 1                                1, 2
//   stsb   index genre ... score   7, 8              last       regression (float 0-5)             7, 8
//   mnli   index promptID ...      8, 9              last       entailment neutral contradiction   8, 9
//   qnli   index question sent.    1, 2              last       entailment not_entailment          1, 2
//   rte    index s1 s2 label       1, 2              last       entailment not_entailment          1, 2
//   wnli   index s1 s2 label       1, 2              last       0 1                                1, 2
// The label order is that of HF datasets' glue builder (what run_glue gets). MNLI's dev split is two files,
// dev_matched.tsv and dev_mismatched.tsv (test: test_matched.tsv, test_mismatched.tsv). Test files start
// with a header whose first field is `index` (QQP: `id`) and have no label column.
//
// Rows: every row must have as many fields as the header (CoLA: 4), except QQP, whose train/dev files hold
// rows with missing fields; HF's QqpProcessor skipped those (an IndexError on line[5]) and so do we,
// counting them in GlueDataset::skipped_rows. The header's text and label columns are checked by name,
// so a file of another task or layout fails on line 1 with the layout expected.
//
// Submission files (GLUE's leaderboard zip): CoLA.tsv SST-2.tsv MRPC.tsv QQP.tsv STS-B.tsv MNLI-m.tsv
// MNLI-mm.tsv QNLI.tsv RTE.tsv WNLI.tsv and AX.tsv (MNLI's model on GLUE's diagnostic.tsv, which an MNLI
// folder may hold: index sentence1 sentence2), each "index\tprediction" with the label as it is written in
// the task's files (0/1, entailment, ...) or STS-B's score.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/glue_tsv.h"

namespace zt::data {

enum class GlueMetric { matthews_correlation, accuracy, f1, pearson, spearmanr };

// The key run_glue logs for the metric ("matthews_correlation", "accuracy", "f1", "pearson", "spearmanr").
std::string_view metric_name(GlueMetric metric);

// One evaluation or test split: its file in the task folder and the submission file of its predictions.
struct GlueSplitFile {
  std::string_view split;       // "validation", "validation_matched", "test_mismatched", "test_ax", ...
  std::string_view file;        // "dev.tsv", "dev_matched.tsv", "diagnostic.tsv", ...
  std::string_view submission;  // "CoLA.tsv", "MNLI-m.tsv", ... (test splits); empty for dev splits
  // Test text columns of this file when they differ from the task's (GLUE's diagnostic.tsv, read with
  // MNLI's model: index sentence1 sentence2); -1: the task's.
  int test_text_a, test_text_b;
};

struct GlueTaskSpec {
  std::string_view name;        // --task_name
  std::string_view folder;      // GLUE's folder name: CoLA, SST-2, ...
  bool train_header = true;     // CoLA's train/dev have none
  int fields = 0;               // fields per row when there is no header (CoLA: 4)
  int text_a = 0, text_b = -1;  // columns of the texts in train/dev files; -1: single sentence
  int label = -1;               // label column; -1: the last field
  // Header names checked at text_a, text_b and the label column (train/dev), at test_text_a/b (test).
  std::string_view text_a_name = {}, text_b_name = {}, label_column_name = {};
  int test_text_a = 1, test_text_b = -1;
  std::string_view test_index_name = "index";
  std::vector<std::string_view> labels =
      {};  // class labels as written in the files, in id order; empty: regression
  std::vector<std::string_view> label_names = {};  // HF datasets' names for the ids (id2label)
  std::vector<GlueMetric> metrics;
  std::vector<GlueSplitFile> dev;   // evaluated every epoch (MNLI: matched and mismatched)
  std::vector<GlueSplitFile> test;  // predicted once after training
  bool skips_short_rows = false;    // QQP: rows with missing fields are skipped, not errors

  bool regression() const { return labels.empty(); }
  bool single_sentence() const { return text_b < 0; }
  int64_t num_labels() const { return regression() ? 1 : static_cast<int64_t>(labels.size()); }
};

// Every task, in GLUE's order (cola sst2 mrpc qqp stsb mnli qnli rte wnli).
const std::vector<GlueTaskSpec>& glue_tasks();
// The task named `name` (lower case, as run_glue spells it); throws listing the known names otherwise.
const GlueTaskSpec& glue_task(std::string_view name);

enum class GlueFileRole { labeled, test };

// Reads one of the task's files. `role` labeled: train or dev layout (labels checked against the task's
// label set); test: the test layout (no label, the `index`/`id` column kept as SentencePairExample::index).
// Errors name the file, the line and, on layout problems, the layout expected.
GlueDataset read_glue_task_tsv(const std::string& path, const GlueTaskSpec& task, GlueFileRole role);
GlueDataset parse_glue_task_tsv(std::string_view text, const std::string& source, const GlueTaskSpec& task,
                                GlueFileRole role);

}  // namespace zt::data
