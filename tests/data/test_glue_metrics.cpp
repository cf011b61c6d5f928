#include "data/glue_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/check.h"

namespace zt::data {
namespace {

namespace fs = std::filesystem;
using Values = std::vector<int64_t>;

// Expects `fn` to throw a zt::Error whose message contains `part`.
template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected a zt::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "missing '" << part << "' in: " << e.what();
  }
}

TEST(GlueMetrics, AccuracyAndF1OfAMixedConfusionMatrix) {
  // TP = 2 (rows 0, 6), FP = 2 (rows 1, 2), FN = 1 (row 4), TN = 3 (rows 3, 5, 7).
  const Values predictions{1, 1, 1, 0, 0, 0, 1, 0};
  const Values labels{1, 0, 0, 0, 1, 0, 1, 0};
  EXPECT_DOUBLE_EQ(accuracy(predictions, labels), 5.0 / 8.0);
  // P = 1/2, R = 2/3: 2PR/(P+R) = (2/3)/(7/6) = 4/7 = 2TP/(2TP+FP+FN).
  EXPECT_DOUBLE_EQ(binary_f1(predictions, labels), 4.0 / 7.0);
  // Class 0 as positive: TP = 3, FP = 1 (row 4), FN = 2 (rows 1, 2) -> 6/9.
  EXPECT_DOUBLE_EQ(binary_f1(predictions, labels, 0), 2.0 / 3.0);
}

TEST(GlueMetrics, AllCorrect) {
  const Values both{1, 0, 1, 1};
  EXPECT_EQ(accuracy(both, both), 1.0);
  EXPECT_EQ(binary_f1(both, both), 1.0);
}

TEST(GlueMetrics, NoPositivePredictedGivesZeroF1) {
  // Labels have positives, predictions none: P is 0/0 but R = 0, so F1 is 0 (2TP/(2TP+FP+FN) = 0/2).
  EXPECT_EQ(binary_f1(Values{0, 0, 0}, Values{0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(accuracy(Values{0, 0, 0}, Values{0, 1, 1}), 1.0 / 3.0);
  // Predicting every row positive is the opposite degenerate case: P = 2/3, R = 1, F1 = 4/5.
  EXPECT_DOUBLE_EQ(binary_f1(Values{1, 1, 1}, Values{0, 1, 1}), 0.8);
}

TEST(GlueMetrics, F1WithoutAnyPositiveIsZeroNotNaN) {
  // TP + FP + FN = 0: undefined, sklearn's zero_division gives 0 although every prediction is right.
  const double f1 = binary_f1(Values{0, 0}, Values{0, 0});
  EXPECT_FALSE(std::isnan(f1));
  EXPECT_EQ(f1, 0.0);
  EXPECT_EQ(accuracy(Values{0, 0}, Values{0, 0}), 1.0);
}

TEST(GlueMetrics, IgnoredLabelsAreSkipped) {
  // Kept rows 0, 2, 4, 5: (1,1) (1,1) (1,0) (0,0) -> TP 2, FP 1, TN 1. Scoring the two ignored rows as
  // wrong would give accuracy 3/6 instead.
  const Values predictions{1, 0, 1, 1, 1, 0};
  const Values labels{1, -1, 1, -100, 0, 0};
  const GlueMetrics m = glue_metrics(predictions, labels);
  EXPECT_EQ(m.count, 4);
  EXPECT_DOUBLE_EQ(m.accuracy, 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(m.f1, 4.0 / 5.0);

  expect_error([] { glue_metrics(Values{0, 1}, Values{-1, -1}); }, "none of the 2 examples has a label");
}

TEST(GlueMetrics, MismatchedOrEmptyInputsAreErrors) {
  expect_error([] { accuracy(Values{0, 1}, Values{0}); }, "2 predictions for 1 labels");
  expect_error([] { binary_f1(Values{}, Values{}); }, "zero examples");
  expect_error([] { glue_metrics(Values{1}, Values{1, 0}); }, "1 predictions for 2 labels");
}

TEST(GlueMetrics, ArgmaxTakesTheFirstMaximumAndNaNWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits{0.1f, 0.9f,   //
                            2.0f, -1.0f,  //
                            3.0f, 3.0f,   // tie: first index
                            nan,  5.0f,   // NaN is the maximum, as in torch.argmax
                            1.0f, nan};
  EXPECT_EQ(argmax_predictions(Tensor(logits.data(), {5, 2}, DType::f32)), (Values{1, 0, 0, 0, 1}));

  std::vector<float> three{-1.0f, 4.0f, 4.0f, 0.0f, -2.0f, 7.0f};
  EXPECT_EQ(argmax_predictions(Tensor(three.data(), {2, 3}, DType::f32)), (Values{1, 2}));

  EXPECT_TRUE(argmax_predictions(Tensor(three.data(), {0, 3}, DType::f32)).empty());
  expect_error([&] { argmax_predictions(Tensor(three.data(), {6}, DType::f32)); }, "must be [N, C]");
  std::vector<int32_t> ints(4, 0);
  EXPECT_THROW(argmax_predictions(Tensor(ints.data(), {2, 2}, DType::i32)), Error);
}

class GlueSubmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / str("zt_glue_sub_", getpid(), "_",
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  size_t files_in_dir() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(GlueSubmissionTest, WritesGlueFormatAndReadsBack) {
  const std::string path = (dir_ / "MRPC.tsv").string();
  const Values indices{3, 0, 1, 1724};
  const Values predictions{1, 0, 1, 0};
  write_glue_submission(path, indices, predictions);
  EXPECT_EQ(read_text(path), "index\tprediction\n3\t1\n0\t0\n1\t1\n1724\t0\n");

  // Read back as GLUE's server parses it: header, then index and prediction per tab-separated row.
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(line, "index\tprediction");
  Values read_indices, read_predictions;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    read_indices.push_back(std::stoll(line.substr(0, tab)));
    read_predictions.push_back(std::stoll(line.substr(tab + 1)));
  }
  EXPECT_EQ(read_indices, indices);
  EXPECT_EQ(read_predictions, predictions);
  EXPECT_EQ(files_in_dir(), 1u) << "no temp file may remain";
}

TEST_F(GlueSubmissionTest, InvalidRowsLeaveThePreviousFileIntact) {
  const std::string path = (dir_ / "MRPC.tsv").string();
  write_glue_submission(path, Values{0, 1}, Values{1, 1});
  const std::string before = read_text(path);

  expect_error([&] { write_glue_submission(path, Values{0, 1}, Values{1, 2}); }, "prediction 2 for index 1");
  expect_error([&] { write_glue_submission(path, Values{5, 5}, Values{1, 0}); }, "index 5 appears twice");
  expect_error([&] { write_glue_submission(path, Values{-1}, Values{1}); }, "negative index -1");
  expect_error([&] { write_glue_submission(path, Values{0, 1}, Values{1}); }, "2 indices for 1 predictions");
  expect_error([&] { write_glue_submission((dir_ / "absent" / "MRPC.tsv").string(), Values{0}, Values{1}); },
               "cannot create");
  EXPECT_EQ(read_text(path), before);
  EXPECT_EQ(files_in_dir(), 1u);

  write_glue_submission(path, Values{7}, Values{0});  // replaces the old file
  EXPECT_EQ(read_text(path), "index\tprediction\n7\t0\n");
}

TEST(GlueMetrics, MatthewsCorrelationOfABinaryConfusionMatrix) {
  // TP 2, FP 2, FN 1, TN 3: (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = 4 / sqrt(240).
  const Values predictions{1, 1, 1, 0, 0, 0, 1, 0};
  const Values labels{1, 0, 0, 0, 1, 0, 1, 0};
  EXPECT_NEAR(matthews_correlation(predictions, labels), 4.0 / std::sqrt(240.0), 1e-15);
  EXPECT_DOUBLE_EQ(matthews_correlation(labels, labels), 1.0);
  const Values flipped{0, 1, 1, 1, 0, 1, 0, 1};
  EXPECT_DOUBLE_EQ(matthews_correlation(flipped, labels), -1.0);
}

TEST(GlueMetrics, MatthewsCorrelationIsZeroWhenUndefinedAndHandlesThreeClasses) {
  EXPECT_EQ(matthews_correlation(Values{1, 1, 1}, Values{0, 1, 0}), 0.0);  // one predicted class
  // c = 4, s = 6, t = p = (2, 2, 2): (24 - 12) / sqrt((36 - 12)(36 - 12)) = 0.5.
  EXPECT_DOUBLE_EQ(matthews_correlation(Values{0, 2, 2, 0, 1, 1}, Values{0, 1, 2, 0, 1, 2}), 0.5);
}

TEST(GlueMetrics, PearsonAndSpearmanWithTies) {
  using Reals = std::vector<double>;
  // mean 2.5 / 5: sxy = 11, sxx = 5, syy = 26.
  EXPECT_NEAR(pearson(Reals{1, 2, 3, 4}, Reals{2, 4, 5, 9}), 11.0 / std::sqrt(130.0), 1e-15);
  EXPECT_EQ(average_ranks(Reals{10, 20, 20, 5}), (Reals{2, 3.5, 3.5, 1}));
  // ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): sxy = 4.5, sxx = 4.5, syy = 5.
  EXPECT_NEAR(spearman(Reals{1, 2, 2, 3}, Reals{1, 3, 2, 4}), 4.5 / std::sqrt(22.5), 1e-15);
  EXPECT_TRUE(std::isnan(pearson(Reals{1, 1, 1}, Reals{1, 2, 3})));  // constant input, as scipy
  expect_error([] { pearson(Reals{1}, Reals{1}); }, "at least 2");
}

TEST_F(GlueSubmissionTest, TextPredictionsForAnyTask) {
  const std::string path = (dir_ / "MNLI-m.tsv").string();
  const std::vector<std::string> predictions{"entailment", "neutral"};
  write_glue_submission_text(path, Values{3, 1}, predictions);
  EXPECT_EQ(read_text(path), "index\tprediction\n3\tentailment\n1\tneutral\n");
  expect_error([&] { write_glue_submission_text(path, Values{2, 2}, predictions); }, "index 2 appears twice");
}

}  // namespace
}  // namespace zt::data
