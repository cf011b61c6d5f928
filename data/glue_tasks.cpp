#include "data/glue_tasks.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "data/utf8.h"
#include "runtime/check.h"

namespace zt::data {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

using M = GlueMetric;

std::vector<GlueTaskSpec> make_tasks() {
  const std::vector<std::string_view> binary = {"0", "1"};
  const std::vector<std::string_view> entailment = {"entailment", "not_entailment"};
  std::vector<GlueTaskSpec> tasks;
  auto dev = [](std::string_view file = "dev.tsv") {
    return std::vector<GlueSplitFile>{{"validation", file, "", -1, -1}};
  };
  auto test = [](std::string_view submission) {
    return std::vector<GlueSplitFile>{{"test", "test.tsv", submission, -1, -1}};
  };
  tasks.push_back({.name = "cola",
                   .folder = "CoLA",
                   .train_header = false,
                   .fields = 4,
                   .text_a = 3,
                   .label = 1,
                   .test_text_a = 1,
                   .labels = binary,
                   .label_names = {"unacceptable", "acceptable"},
                   .metrics = {M::matthews_correlation},
                   .dev = dev(),
                   .test = test("CoLA.tsv")});
  tasks.push_back({.name = "sst2",
                   .folder = "SST-2",
                   .text_a = 0,
                   .label = 1,
                   .text_a_name = "sentence",
                   .label_column_name = "label",
                   .test_text_a = 1,
                   .labels = binary,
                   .label_names = {"negative", "positive"},
                   .metrics = {M::accuracy},
                   .dev = dev(),
                   .test = test("SST-2.tsv")});
  tasks.push_back({.name = "mrpc",
                   .folder = "MRPC",
                   .text_a = 3,
                   .text_b = 4,
                   .label = 0,
                   .text_a_name = "#1 String",
                   .text_b_name = "#2 String",
                   .label_column_name = "Quality",
                   .test_text_a = 3,
                   .test_text_b = 4,
                   .labels = binary,
                   .label_names = {"not_equivalent", "equivalent"},
                   .metrics = {M::accuracy, M::f1},
                   .dev = dev(),
                   .test = test("MRPC.tsv")});
  tasks.push_back({.name = "qqp",
                   .folder = "QQP",
                   .text_a = 3,
                   .text_b = 4,
                   .label = 5,
                   .text_a_name = "question1",
                   .text_b_name = "question2",
                   .label_column_name = "is_duplicate",
                   .test_text_a = 1,
                   .test_text_b = 2,
                   .test_index_name = "id",
                   .labels = binary,
                   .label_names = {"not_duplicate", "duplicate"},
                   .metrics = {M::accuracy, M::f1},
                   .dev = dev(),
                   .test = test("QQP.tsv"),
                   .skips_short_rows = true});
  tasks.push_back({.name = "stsb",
                   .folder = "STS-B",
                   .text_a = 7,
                   .text_b = 8,
                   .label = -1,
                   .text_a_name = "sentence1",
                   .text_b_name = "sentence2",
                   .label_column_name = "score",
                   .test_text_a = 7,
                   .test_text_b = 8,
                   .metrics = {M::pearson, M::spearmanr},
                   .dev = dev(),
                   .test = test("STS-B.tsv")});
  tasks.push_back({.name = "mnli",
                   .folder = "MNLI",
                   .text_a = 8,
                   .text_b = 9,
                   .label = -1,
                   .text_a_name = "sentence1",
                   .text_b_name = "sentence2",
                   .label_column_name = "gold_label",
                   .test_text_a = 8,
                   .test_text_b = 9,
                   .labels = {"entailment", "neutral", "contradiction"},
                   .label_names = {"entailment", "neutral", "contradiction"},
                   .metrics = {M::accuracy},
                   .dev = {{"validation_matched", "dev_matched.tsv", "", -1, -1},
                           {"validation_mismatched", "dev_mismatched.tsv", "", -1, -1}},
                   .test = {{"test_matched", "test_matched.tsv", "MNLI-m.tsv", -1, -1},
                            {"test_mismatched", "test_mismatched.tsv", "MNLI-mm.tsv", -1, -1},
                            {"test_ax", "diagnostic.tsv", "AX.tsv", 1, 2}}});
  tasks.push_back({.name = "qnli",
                   .folder = "QNLI",
                   .text_a = 1,
                   .text_b = 2,
                   .label = -1,
                   .text_a_name = "question",
                   .text_b_name = "sentence",
                   .label_column_name = "label",
                   .test_text_a = 1,
                   .test_text_b = 2,
                   .labels = entailment,
                   .label_names = entailment,
                   .metrics = {M::accuracy},
                   .dev = dev(),
                   .test = test("QNLI.tsv")});
  tasks.push_back({.name = "rte",
                   .folder = "RTE",
                   .text_a = 1,
                   .text_b = 2,
                   .label = -1,
                   .text_a_name = "sentence1",
                   .text_b_name = "sentence2",
                   .label_column_name = "label",
                   .test_text_a = 1,
                   .test_text_b = 2,
                   .labels = entailment,
                   .label_names = entailment,
                   .metrics = {M::accuracy},
                   .dev = dev(),
                   .test = test("RTE.tsv")});
  tasks.push_back({.name = "wnli",
                   .folder = "WNLI",
                   .text_a = 1,
                   .text_b = 2,
                   .label = -1,
                   .text_a_name = "sentence1",
                   .text_b_name = "sentence2",
                   .label_column_name = "label",
                   .test_text_a = 1,
                   .test_text_b = 2,
                   .labels = binary,
                   .label_names = {"not_entailment", "entailment"},
                   .metrics = {M::accuracy},
                   .dev = dev(),
                   .test = test("WNLI.tsv")});
  return tasks;
}

// The layout a task's file is expected to have, for error messages.
std::string expected_layout(const GlueTaskSpec& task, GlueFileRole role) {
  if (role == GlueFileRole::test) {
    std::string out = str("a header line starting with '", task.test_index_name, "', text in column ",
                          task.test_text_a + 1);
    if (task.test_text_b >= 0) out += str(" and ", task.test_text_b + 1);
    return out + " (1-based), no label";
  }
  if (!task.train_header) {
    return str("no header, ", task.fields, " tab-separated fields: source, label, original mark, sentence");
  }
  std::string out = str("a header with '", task.text_a_name, "' in column ", task.text_a + 1);
  if (task.text_b >= 0) out += str(", '", task.text_b_name, "' in column ", task.text_b + 1);
  out += str(", '", task.label_column_name, "' in ",
             task.label < 0 ? std::string("the last column") : str("column ", task.label + 1));
  return out;
}

class TaskRowParser {
 public:
  TaskRowParser(const std::string& source, const GlueTaskSpec& task, GlueFileRole role)
      : task_(task), role_(role) {
    dataset_.source = source;
    dataset_.labeled = role == GlueFileRole::labeled;
    dataset_.single_sentence = role == GlueFileRole::test ? task.test_text_b < 0 : task.single_sentence();
    dataset_.regression = task.regression();
    if (role == GlueFileRole::labeled && !task.train_header) fields_ = task.fields;
  }

  void add_line(std::string_view line) {
    const std::string& source = dataset_.source;
    ++line_number_;
    if (line_number_ == 1 && line.starts_with(kBom)) line.remove_prefix(kBom.size());
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (auto bad = find_invalid_utf8(line)) {
      ZT_FAIL(source, ":", line_number_, ": invalid UTF-8 at byte ", *bad + 1, " of the line");
    }
    const std::vector<std::string_view> fields = split_tabs(line);
    const bool has_header = role_ == GlueFileRole::test || task_.train_header;
    if (line_number_ == 1 && has_header) {
      parse_header(fields);
      return;
    }
    if (static_cast<int>(fields.size()) != fields_) {
      if (task_.skips_short_rows && role_ == GlueFileRole::labeled &&
          static_cast<int>(fields.size()) < fields_) {
        if (dataset_.skipped_rows++ == 0) dataset_.first_skipped_line = line_number_;
        return;
      }
      ZT_FAIL(source, ":", line_number_, ": expected ", fields_, " tab-separated fields (as ",
              has_header ? "the header" : "the task's layout", "), got ", fields.size(),
              line.empty() ? " (blank line)" : "", "; ", task_.name, " files have ",
              expected_layout(task_, role_));
    }
    SentencePairExample row;
    row.line = line_number_;
    if (role_ == GlueFileRole::test) {
      const std::string_view f = fields[0];
      auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), row.index);
      if (f.empty() || ec != std::errc() || ptr != f.data() + f.size() || row.index < 0) {
        ZT_FAIL(source, ":", line_number_, ": index must be a non-negative integer, got ", quoted_prefix(f));
      }
      row.sentence1 = fields[static_cast<size_t>(task_.test_text_a)];
      if (task_.test_text_b >= 0) row.sentence2 = fields[static_cast<size_t>(task_.test_text_b)];
    } else {
      row.index = static_cast<int64_t>(dataset_.rows.size());
      row.sentence1 = fields[static_cast<size_t>(task_.text_a)];
      if (task_.text_b >= 0) row.sentence2 = fields[static_cast<size_t>(task_.text_b)];
      const std::string_view label =
          fields[task_.label < 0 ? fields.size() - 1 : static_cast<size_t>(task_.label)];
      if (task_.regression()) {
        double value = 0;
        auto [ptr, ec] = std::from_chars(label.data(), label.data() + label.size(), value);
        if (label.empty() || ec != std::errc() || ptr != label.data() + label.size() ||
            !std::isfinite(value)) {
          ZT_FAIL(source, ":", line_number_, ": ", task_.name, " score must be a number, got ",
                  quoted_prefix(label));
        }
        row.score = static_cast<float>(value);
      } else {
        const auto it = std::find(task_.labels.begin(), task_.labels.end(), label);
        if (it == task_.labels.end()) {
          std::string known;
          for (std::string_view l : task_.labels) known += str(known.empty() ? "" : ", ", l);
          ZT_FAIL(source, ":", line_number_, ": ", task_.name, " label must be one of ", known, ", got ",
                  quoted_prefix(label));
        }
        row.label = static_cast<int>(it - task_.labels.begin());
      }
    }
    dataset_.rows.push_back(std::move(row));
  }

  GlueDataset finish() {
    ZT_CHECK(line_number_ > 0, dataset_.source, ": empty file (expected ", task_.name,
             " rows: ", expected_layout(task_, role_), ")");
    ZT_CHECK(!dataset_.rows.empty(), dataset_.source, ": no data rows");
    return std::move(dataset_);
  }

 private:
  void parse_header(const std::vector<std::string_view>& fields) {
    const std::string& source = dataset_.source;
    fields_ = static_cast<int>(fields.size());
    auto expect = [&](int column, std::string_view name) {
      if (column < 0 || name.empty()) return;
      const bool ok = column < fields_ && fields[static_cast<size_t>(column)] == name;
      ZT_CHECK(ok, source, ":1: header column ", column + 1, " must be '", name, "', got ",
               column < fields_ ? quoted_prefix(fields[static_cast<size_t>(column)]) : std::string("nothing"),
               "; ", task_.name, " files have ", expected_layout(task_, role_));
    };
    if (role_ == GlueFileRole::test) {
      expect(0, task_.test_index_name);
      ZT_CHECK(std::max(task_.test_text_a, task_.test_text_b) < fields_, source, ":1: header has ", fields_,
               " fields; ", task_.name, " test files have ", expected_layout(task_, role_));
      return;
    }
    expect(task_.text_a, task_.text_a_name);
    expect(task_.text_b, task_.text_b_name);
    expect(task_.label < 0 ? fields_ - 1 : task_.label, task_.label_column_name);
  }

  const GlueTaskSpec& task_;
  GlueFileRole role_;
  GlueDataset dataset_;
  int64_t line_number_ = 0;
  int fields_ = 0;
};

}  // namespace

std::string_view metric_name(GlueMetric metric) {
  switch (metric) {
    case GlueMetric::matthews_correlation:
      return "matthews_correlation";
    case GlueMetric::accuracy:
      return "accuracy";
    case GlueMetric::f1:
      return "f1";
    case GlueMetric::pearson:
      return "pearson";
    case GlueMetric::spearmanr:
      return "spearmanr";
  }
  return "?";
}

const std::vector<GlueTaskSpec>& glue_tasks() {
  static const std::vector<GlueTaskSpec> tasks = make_tasks();
  return tasks;
}

const GlueTaskSpec& glue_task(std::string_view name) {
  std::string known;
  for (const GlueTaskSpec& task : glue_tasks()) {
    if (task.name == name) return task;
    known += str(known.empty() ? "" : ", ", task.name);
  }
  ZT_FAIL("unknown --task_name '", name, "' (GLUE tasks: ", known,
          "; without --task_name, --train_file/--validation_file take CSV or JSON lines)");
}

GlueDataset parse_glue_task_tsv(std::string_view text, const std::string& source, const GlueTaskSpec& task,
                                GlueFileRole role) {
  if (task.name == "mrpc") return parse_glue_mrpc_tsv(text, source);
  TaskRowParser parser(source, task, role);
  for_each_line(text, source, [&](std::string_view line) { parser.add_line(line); });
  return parser.finish();
}

GlueDataset read_glue_task_tsv(const std::string& path, const GlueTaskSpec& task, GlueFileRole role) {
  if (task.name == "mrpc") return read_glue_mrpc_tsv(path);
  TaskRowParser parser(path, task, role);
  for_each_file_line(path, [&](std::string_view line) { parser.add_line(line); });
  return parser.finish();
}

}  // namespace zt::data
