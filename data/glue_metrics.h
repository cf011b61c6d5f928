// GLUE metrics and the GLUE submission files.
//
// Per task (data/glue_tasks.h) the metrics of HF `evaluate.load("glue", task)`:
//   matthews_correlation (CoLA) = sklearn.metrics.matthews_corrcoef, the multiclass form over the confusion
//       matrix C (t_k true counts, p_k predicted counts, c correct, s total):
//       (c s - sum_k t_k p_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)); 0 when the denominator is 0.
//   pearson (STS-B) = scipy.stats.pearsonr's r = sum (x - mx)(y - my) / sqrt(sum (x - mx)^2 sum (y - my)^2),
//       in double; NaN when either side is constant (scipy warns and returns NaN too).
//   spearmanr (STS-B) = Pearson's r of the ranks, ties given the average of their ranks (scipy's default).
//
// The metrics are those of HF `evaluate.load("glue", "mrpc")`, which run_glue_no_trainer reports:
//   accuracy = (predictions == labels).mean()
//   f1       = sklearn.metrics.f1_score(labels, predictions), binary with pos_label 1:
//              F1 = 2PR / (P + R) = 2TP / (2TP + FP + FN)   (P = TP / (TP + FP), R = TP / (TP + FN));
//              computed in the second form, as sklearn >= 1.3 does. When it is undefined — no positive
//              label and no positive prediction, so TP + FP + FN = 0 — it is 0, sklearn's
//              zero_division="warn" result (sklearn also prints a warning; we do not).
// Any value other than `positive` counts as negative. Empty inputs are errors: there is no score of
// nothing, and evaluating nothing is a caller bug.
//
// Submission: GLUE's server takes MRPC.tsv with the header "index\tprediction" and one row per test example
// "<index>\t<0|1>", the index being the "index" column of test.tsv (SentencePairExample::index); this is
// also what HF run_glue writes for its predict step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zt::data {

// Fraction of positions where predictions[i] == labels[i]. Equal, non-zero lengths.
double accuracy(std::span<const int64_t> predictions, std::span<const int64_t> labels);

// sklearn's binary F1 for class `positive` (see the header comment; 0 when undefined).
double binary_f1(std::span<const int64_t> predictions, std::span<const int64_t> labels, int64_t positive = 1);

struct GlueMetrics {
  double accuracy = 0;
  double f1 = 0;
  int64_t count = 0;  // examples scored: those with label >= 0
};

// accuracy and binary F1 over the examples whose label is >= 0; labels < 0 (unlabeled rows, padding
// repeats marked -1 by the caller) are skipped, as CrossEntropyLoss's ignore_index skips them in the loss.
// Throws when no example is labeled.
GlueMetrics glue_metrics(std::span<const int64_t> predictions, std::span<const int64_t> labels);

// sklearn's matthews_corrcoef (header comment); classes are any int64 values.
double matthews_correlation(std::span<const int64_t> predictions, std::span<const int64_t> labels);

// scipy's pearsonr / spearmanr statistic (header comment). Equal lengths >= 2.
double pearson(std::span<const double> x, std::span<const double> y);
double spearman(std::span<const double> x, std::span<const double> y);

// 1-based ranks with ties averaged (scipy.stats.rankdata(method="average")).
std::vector<double> average_ranks(std::span<const double> values);

// Class of each row of logits [N, C] (host f32, contiguous): the index of the largest value, the first one
// on ties, and a NaN counts as the largest (torch.argmax's rules).
std::vector<int64_t> argmax_predictions(const Tensor& logits);

// Writes MRPC.tsv for GLUE (the header comment) to `path` atomically: everything goes to a temp file in the
// same directory, which is synced and renamed onto `path`, so a crash leaves the old file or none. Rows
// are written in the given order. Throws when the lengths differ, an index is negative or repeated, or a
// prediction is not 0 or 1.
void write_glue_submission(const std::string& path, std::span<const int64_t> indices,
                           std::span<const int64_t> predictions);

// Any task's submission file, written atomically like MRPC.tsv: "index\tprediction", then one
// "<index>\t<prediction text>" per row (a label name such as "entailment", "0"/"1", or a score).
// Throws when the lengths differ or an index is negative or repeated.
void write_glue_submission_text(const std::string& path, std::span<const int64_t> indices,
                                std::span<const std::string> predictions);

}  // namespace zt::data
