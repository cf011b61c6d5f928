#include "data/task_data.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/check.h"

namespace zt::data {
namespace {

namespace fs = std::filesystem;

template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected a zt::Error containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "missing '" << part << "' in: " << e.what();
  }
}

TaskDataRequest glue_request(const std::string& task, const std::string& data_dir) {
  TaskDataRequest r;
  r.task_name = task;
  r.data_dir = data_dir;
  return r;
}

TaskDataRequest user_request(const std::string& train, const std::string& validation) {
  TaskDataRequest r;
  r.train_file = train;
  r.validation_file = validation;
  return r;
}

class TaskDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / str("zt_task_data_", getpid(), "_",
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

TEST_F(TaskDataTest, MnliFolderHasTwoEvaluationAndTwoTestSplits) {
  const std::string head = "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\t";
  const std::string row = "0\t1\t2\tg\t.\t.\t.\t.\tA.\tB.\t";
  write("MNLI/train.tsv", head + "label1\tgold_label\n" + row + "neutral\tneutral\n");
  write("MNLI/dev_matched.tsv", head + "label1\tgold_label\n" + row + "x\tentailment\n");
  write("MNLI/dev_mismatched.tsv", head + "label1\tgold_label\n" + row + "x\tcontradiction\n");
  write("MNLI/test_matched.tsv",
        "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\n" +
            std::string("5\t1\t2\tg\t.\t.\t.\t.\tA.\tB.\n"));
  write("MNLI/diagnostic.tsv", "index\tsentence1\tsentence2\n0\tThe cat sat.\tA cat sat.\n");
  const TaskData d = load_task_data(glue_request("mnli", (dir_ / "MNLI").string()));
  EXPECT_EQ(d.num_labels(), 3);
  ASSERT_EQ(d.eval.size(), 2u);
  EXPECT_EQ(d.eval[1].name, "validation_mismatched");
  EXPECT_EQ(d.eval[1].key_suffix, "_mm");
  EXPECT_EQ(d.eval[1].rows.rows[0].label, 2);
  ASSERT_EQ(d.test.size(), 2u);  // test_mismatched.tsv is absent: no predictions for it
  EXPECT_EQ(d.test[0].submission, "MNLI-m.tsv");
  // GLUE's diagnostic set, read in its own layout, predicted by the MNLI model into AX.tsv.
  EXPECT_EQ(d.test[1].submission, "AX.tsv");
  EXPECT_EQ(d.test[1].rows.rows[0].sentence1, "The cat sat.");
  EXPECT_EQ(d.test[1].rows.rows[0].sentence2, "A cat sat.");
  write_task_submission(dir_.string(), d, d.test[0], {.classes = {2}, .scores = {}});
  EXPECT_EQ(read(dir_ / "MNLI-m.tsv"), "index\tprediction\n5\tcontradiction\n");
}

TEST_F(TaskDataTest, MissingTaskFilesNameThePathAndTheFlag) {
  expect_error([&] { load_task_data(glue_request("cola", (dir_ / "CoLA").string())); },
               "--task_name cola: the training file " + (dir_ / "CoLA" / "train.tsv").string() +
                   " does not exist (GLUE's CoLA/ folder holds it");
  expect_error([&] { load_task_data(glue_request("rte", "")); }, "--task_name rte needs --data_dir");
  expect_error([&] { load_task_data(user_request(write("t.csv", "text,label\na,1\n"), "")); },
               "without --task_name, --train_file and --validation_file");
}

TEST_F(TaskDataTest, MetricsPerTaskAndScoresWithThreeDecimals) {
  const std::string head =
      "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n";
  write("STS-B/train.tsv", head + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\t1.0\n");
  write("STS-B/dev.tsv", head + "0\tg\tf\ty\t1\tn\tn\tA.\tB.\t1.0\n1\tg\tf\ty\t1\tn\tn\tA.\tC.\t3.0\n" +
                             "2\tg\tf\ty\t1\tn\tn\tA.\tD.\t2.0\n");
  const TaskData d = load_task_data(glue_request("stsb", (dir_ / "STS-B").string()));
  EXPECT_TRUE(d.regression);
  const SplitPredictions p{.classes = {}, .scores = {0.5, 2.5, 2.0}};
  const auto m = task_metrics(d, p, split_truth(d, d.eval[0].rows));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].first, "pearson");
  // x = (0.5, 2.5, 2), y = (1, 3, 2): mx 5/3, my 2; sxy = 1.1667 + 0.8333 + 0 = 2, sxx = 2.1667, syy = 2.
  EXPECT_NEAR(m[0].second, 2.0 / std::sqrt(13.0 / 6.0 * 2.0), 1e-12);
  EXPECT_EQ(m[1].first, "spearmanr");
  EXPECT_NEAR(m[1].second, 1.0, 1e-12);
  EXPECT_EQ(prediction_text(d, p, 0), "0.500");

  write("CoLA/train.tsv", "s\t1\t\tA.\ns\t0\t*\tB.\n");
  write("CoLA/dev.tsv", "s\t1\t\tA.\ns\t0\t*\tB.\ns\t1\t\tC.\ns\t0\t*\tD.\n");
  const TaskData cola = load_task_data(glue_request("cola", (dir_ / "CoLA").string()));
  const auto mc =
      task_metrics(cola, {.classes = {1, 0, 0, 0}, .scores = {}}, split_truth(cola, cola.eval[0].rows));
  ASSERT_EQ(mc.size(), 1u);
  EXPECT_EQ(mc[0].first, "matthews_correlation");
  // TP 1, TN 2, FP 0, FN 1: (2 - 0) / sqrt(1 * 2 * 2 * 3).
  EXPECT_NEAR(mc[0].second, 2.0 / std::sqrt(12.0), 1e-12);
  EXPECT_TRUE(cola.test.empty());
}

TEST_F(TaskDataTest, UserFilesBinaryGetAccuracyAndF1ManyClassesAccuracy) {
  const std::string train = write("train.csv", "text,label\na,yes\nb,no\n");
  const std::string dev = write("dev.csv", "text,label\na,yes\nb,no\n");
  const TaskData d = load_task_data(user_request(train, dev));
  ASSERT_EQ(d.metrics.size(), 2u);
  EXPECT_EQ(d.metrics[1], GlueMetric::f1);
  EXPECT_EQ(d.display_name(), "user data");
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes[0].find("2 classes (0 = no, 1 = yes)"), std::string::npos) << d.notes[0];
  const std::string train3 = write("train3.csv", "text,label\na,x\nb,y\nc,z\n");
  const TaskData three = load_task_data(user_request(train3, train3));
  EXPECT_EQ(three.metrics, std::vector<GlueMetric>{GlueMetric::accuracy});
}

}  // namespace
}  // namespace zt::data
