#include "data/task_data.h"

#include <cstdio>
#include <filesystem>

#include "data/glue_metrics.h"
#include "data/user_files.h"
#include "runtime/check.h"

namespace zt::data {
namespace {

namespace fs = std::filesystem;

std::string joined(const std::string& dir, std::string_view file) {
  return (fs::path(dir) / std::string(file)).string();
}

// A GLUE file that must exist: a missing one names the path, the task and the layout the reader expects.
GlueDataset read_required(const std::string& path, const GlueTaskSpec& task, GlueFileRole role,
                          std::string_view what) {
  std::error_code ignored;
  if (!fs::exists(path, ignored)) {
    ZT_FAIL("--task_name ", task.name, ": the ", what, " file ", path, " does not exist (GLUE's ",
            task.folder, "/ folder holds it; pass --data_dir <glue_data>/", task.folder, " or --",
            what == "training"     ? "train"
            : what == "validation" ? "validation"
                                   : "test",
            "_file)");
  }
  return read_glue_task_tsv(path, task, role);
}

// The task as a test file of `split` is laid out (AX: MNLI's labels, diagnostic.tsv's columns).
GlueTaskSpec test_layout(const GlueTaskSpec& task, const GlueSplitFile& split) {
  GlueTaskSpec layout = task;
  if (split.test_text_a >= 0) layout.test_text_a = split.test_text_a;
  if (split.test_text_b >= 0) layout.test_text_b = split.test_text_b;
  return layout;
}

TaskData load_glue_task(const TaskDataRequest& request) {
  const GlueTaskSpec& task = glue_task(request.task_name);
  TaskData out;
  out.task_name = std::string(task.name);
  out.regression = task.regression();
  for (std::string_view l : task.labels) out.labels.emplace_back(l);
  for (std::string_view l : task.label_names) out.label_names.emplace_back(l);
  out.metrics = task.metrics;
  const bool have_dir = !request.data_dir.empty();
  ZT_CHECK(have_dir || (!request.train_file.empty() && !request.validation_file.empty()), "--task_name ",
           task.name, " needs --data_dir (GLUE's ", task.folder,
           "/ folder) or --train_file and --validation_file");
  const std::string train =
      request.train_file.empty() ? joined(request.data_dir, "train.tsv") : request.train_file;
  out.train = request.train_rows ? *request.train_rows
                                 : read_required(train, task, GlueFileRole::labeled, "training");
  if (out.train.skipped_rows > 0) {
    out.notes.push_back(str(train, ": skipped ", out.train.skipped_rows,
                            " rows with missing fields (first at line ", out.train.first_skipped_line,
                            "), as HF's QQP processor does"));
  }
  for (size_t k = 0; k < task.dev.size(); ++k) {
    const GlueSplitFile& split = task.dev[k];
    std::string path;
    if (k == 0 && !request.validation_file.empty()) {
      path = request.validation_file;
    } else if (have_dir) {
      path = joined(request.data_dir, split.file);
    } else {
      continue;  // MNLI mismatched without --data_dir: not evaluated
    }
    TaskSplit s{.name = std::string(split.split),
                .key_suffix = k == 0 ? "" : "_mm",
                .submission = "",
                .rows = read_required(path, task, GlueFileRole::labeled, "validation")};
    if (s.rows.skipped_rows > 0) {
      out.notes.push_back(str(path, ": skipped ", s.rows.skipped_rows,
                              " rows with missing fields (first at line ", s.rows.first_skipped_line,
                              "), as HF's QQP processor does"));
    }
    out.eval.push_back(std::move(s));
  }
  for (size_t k = 0; k < task.test.size(); ++k) {
    const GlueSplitFile& split = task.test[k];
    std::string path;
    if (k == 0 && !request.test_file.empty()) {
      path = request.test_file;
    } else if (have_dir) {
      path = joined(request.data_dir, split.file);
    }
    std::error_code ignored;
    if (path.empty() || !fs::exists(path, ignored)) continue;  // test predictions are optional
    // MRPC's shipped test.tsv is labeled (its reader takes both layouts); the others are GLUE's unlabeled.
    out.test.push_back({.name = std::string(split.split),
                        .key_suffix = k == 1 ? "_mm" : "",
                        .submission = std::string(split.submission),
                        .rows = read_glue_task_tsv(path, test_layout(task, split), GlueFileRole::test)});
  }
  return out;
}

TaskData load_user_files(const TaskDataRequest& request) {
  ZT_CHECK(!request.train_file.empty() && !request.validation_file.empty(),
           "without --task_name, --train_file and --validation_file name the user's data (.csv, .json or "
           ".jsonl, as run_glue takes them)");
  UserDatasets files = read_user_datasets(request.train_file, request.validation_file, request.test_file,
                                          request.model_label2id);
  TaskData out;
  out.regression = files.labels.regression;
  out.labels = files.labels.names;
  out.label_names = files.labels.names;
  out.metrics = out.regression ? std::vector<GlueMetric>{GlueMetric::pearson, GlueMetric::spearmanr}
                               : std::vector<GlueMetric>{GlueMetric::accuracy};
  if (!out.regression && out.labels.size() == 2) out.metrics.push_back(GlueMetric::f1);
  out.train = std::move(files.train);
  out.eval.push_back(
      {.name = "validation", .key_suffix = "", .submission = "", .rows = std::move(files.validation)});
  if (files.test) {
    out.test.push_back(
        {.name = "test", .key_suffix = "", .submission = "predictions.tsv", .rows = std::move(*files.test)});
  }
  std::string texts = files.text_a_column;
  if (!files.text_b_column.empty()) texts += " + " + files.text_b_column;
  if (out.regression) {
    out.notes.push_back(str("user data: regression (float labels), text ", texts));
  } else {
    std::string names;
    for (size_t i = 0; i < out.labels.size(); ++i) names += str(i == 0 ? "" : ", ", i, " = ", out.labels[i]);
    out.notes.push_back(str("user data: ", out.labels.size(), " classes (", names, ")",
                            files.labels.from_model ? " from the model's label2id" : "", ", text ", texts));
  }
  if (!files.labels.warning.empty()) out.notes.push_back("warning: " + files.labels.warning);
  return out;
}

}  // namespace

TaskData load_task_data(const TaskDataRequest& request) {
  return request.task_name.empty() ? load_user_files(request) : load_glue_task(request);
}

SplitPredictions split_truth(const TaskData& task, const GlueDataset& rows) {
  ZT_CHECK(rows.labeled, rows.source, ": an unlabeled split has no metrics");
  SplitPredictions truth;
  for (const SentencePairExample& row : rows.rows) {
    if (task.regression) {
      truth.scores.push_back(row.score);
    } else {
      truth.classes.push_back(row.label);
    }
  }
  return truth;
}

std::vector<std::pair<std::string, double>> task_metrics(const TaskData& task,
                                                         const SplitPredictions& predictions,
                                                         const SplitPredictions& truth) {
  std::vector<std::pair<std::string, double>> out;
  if (task.regression) {
    ZT_CHECK(predictions.scores.size() == truth.scores.size(), "task_metrics: ", predictions.scores.size(),
             " scores for ", truth.scores.size(), " targets");
    for (GlueMetric m : task.metrics) {
      const double v = m == GlueMetric::pearson ? pearson(predictions.scores, truth.scores)
                                                : spearman(predictions.scores, truth.scores);
      out.emplace_back(std::string(metric_name(m)), v);
    }
    return out;
  }
  const std::vector<int64_t>& labels = truth.classes;
  ZT_CHECK(predictions.classes.size() == labels.size(), "task_metrics: ", predictions.classes.size(),
           " predictions for ", labels.size(), " labels");
  for (GlueMetric m : task.metrics) {
    double v = 0;
    switch (m) {
      case GlueMetric::accuracy:
        v = accuracy(predictions.classes, labels);
        break;
      case GlueMetric::f1:
        v = binary_f1(predictions.classes, labels);
        break;
      case GlueMetric::matthews_correlation:
        v = matthews_correlation(predictions.classes, labels);
        break;
      case GlueMetric::pearson:
      case GlueMetric::spearmanr:
        ZT_FAIL("task_metrics: ", metric_name(m), " needs a regression task");
    }
    out.emplace_back(std::string(metric_name(m)), v);
  }
  return out;
}

std::string prediction_text(const TaskData& task, const SplitPredictions& predictions, size_t row) {
  if (task.regression) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.3f", predictions.scores.at(row));
    return text;
  }
  const int64_t c = predictions.classes.at(row);
  ZT_CHECK(c >= 0 && c < static_cast<int64_t>(task.labels.size()), "predicted class ", c, " outside the ",
           task.labels.size(), " labels");
  return task.labels[static_cast<size_t>(c)];
}

void write_task_submission(const std::string& dir, const TaskData& task, const TaskSplit& split,
                           const SplitPredictions& predictions) {
  std::vector<int64_t> indices;
  std::vector<std::string> texts;
  for (size_t i = 0; i < split.rows.rows.size(); ++i) {
    indices.push_back(split.rows.rows[i].index);
    texts.push_back(prediction_text(task, predictions, i));
  }
  write_glue_submission_text((fs::path(dir) / split.submission).string(), indices, texts);
}

}  // namespace zt::data
