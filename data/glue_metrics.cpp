#include "data/glue_metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <unordered_set>

#include "runtime/check.h"

namespace zt::data {
namespace {

void check_lengths(std::span<const int64_t> predictions, std::span<const int64_t> labels, const char* what) {
  ZT_CHECK(predictions.size() == labels.size(), what, ": ", predictions.size(), " predictions for ",
           labels.size(), " labels");
  ZT_CHECK(!predictions.empty(), what, " of zero examples");
}

// Removes the temp file unless the write reached the rename.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

// Writes all of `text` to a new file and makes it durable before the caller's rename publishes it.
void write_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZT_CHECK(fd >= 0, "cannot create ", path, ": ", std::strerror(errno));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ZT_FAIL("cannot write ", path, ": ", std::strerror(error));
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_error = errno;
  ZT_CHECK(::close(fd) == 0 && synced, "cannot sync ", path, ": ", std::strerror(sync_error));
}

}  // namespace

double accuracy(std::span<const int64_t> predictions, std::span<const int64_t> labels) {
  check_lengths(predictions, labels, "accuracy");
  int64_t correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) correct += predictions[i] == labels[i] ? 1 : 0;
  return static_cast<double>(correct) / static_cast<double>(labels.size());
}

double binary_f1(std::span<const int64_t> predictions, std::span<const int64_t> labels, int64_t positive) {
  check_lengths(predictions, labels, "binary_f1");
  int64_t true_positives = 0, false_positives = 0, false_negatives = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const bool predicted = predictions[i] == positive, actual = labels[i] == positive;
    true_positives += predicted && actual ? 1 : 0;
    false_positives += predicted && !actual ? 1 : 0;
    false_negatives += !predicted && actual ? 1 : 0;
  }
  const int64_t denominator = 2 * true_positives + false_positives + false_negatives;
  if (denominator == 0) return 0.0;  // sklearn's zero_division result
  return static_cast<double>(2 * true_positives) / static_cast<double>(denominator);
}

GlueMetrics glue_metrics(std::span<const int64_t> predictions, std::span<const int64_t> labels) {
  ZT_CHECK(predictions.size() == labels.size(), "glue_metrics: ", predictions.size(), " predictions for ",
           labels.size(), " labels");
  std::vector<int64_t> kept_predictions, kept_labels;
  kept_predictions.reserve(labels.size());
  kept_labels.reserve(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) continue;
    kept_predictions.push_back(predictions[i]);
    kept_labels.push_back(labels[i]);
  }
  ZT_CHECK(!kept_labels.empty(), "glue_metrics: none of the ", labels.size(),
           " examples has a label (all labels < 0); unlabeled splits have no metrics");
  return {.accuracy = accuracy(kept_predictions, kept_labels),
          .f1 = binary_f1(kept_predictions, kept_labels),
          .count = static_cast<int64_t>(kept_labels.size())};
}

double matthews_correlation(std::span<const int64_t> predictions, std::span<const int64_t> labels) {
  check_lengths(predictions, labels, "matthews_correlation");
  std::map<int64_t, std::pair<double, double>> counts;  // class -> (true count t_k, predicted count p_k)
  double correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    counts[labels[i]].first += 1;
    counts[predictions[i]].second += 1;
    correct += predictions[i] == labels[i] ? 1 : 0;
  }
  const double s = static_cast<double>(labels.size());
  double tp = 0, pp = 0, tt = 0;
  for (const auto& [cls, tp_counts] : counts) {
    tp += tp_counts.first * tp_counts.second;
    pp += tp_counts.second * tp_counts.second;
    tt += tp_counts.first * tp_counts.first;
  }
  const double denominator = (s * s - pp) * (s * s - tt);
  if (denominator == 0) return 0.0;
  return (correct * s - tp) / std::sqrt(denominator);
}

double pearson(std::span<const double> x, std::span<const double> y) {
  ZT_CHECK(x.size() == y.size(), "pearson: ", x.size(), " values against ", y.size());
  ZT_CHECK(x.size() >= 2, "pearson needs at least 2 values, got ", x.size());
  const double n = static_cast<double>(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

std::vector<double> average_ranks(std::span<const double> values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j + 1)) / 2.0;  // mean of i+1..j+1
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = rank;
    i = j + 1;
  }
  return ranks;
}

double spearman(std::span<const double> x, std::span<const double> y) {
  ZT_CHECK(x.size() == y.size(), "spearman: ", x.size(), " values against ", y.size());
  const std::vector<double> rx = average_ranks(x), ry = average_ranks(y);
  return pearson(rx, ry);
}

std::vector<int64_t> argmax_predictions(const Tensor& logits) {
  ZT_CHECK(logits.rank() == 2, "argmax_predictions: logits must be [N, C], got ", logits.describe());
  ZT_CHECK(logits.device() == DeviceKind::cpu && logits.is_contiguous(),
           "argmax_predictions: logits must be a contiguous host tensor, got ", logits.describe());
  const int64_t rows = logits.dim(0), classes = logits.dim(1);
  ZT_CHECK(classes > 0, "argmax_predictions: logits have no classes: ", logits.describe());
  const float* values = logits.data_as<float>();
  std::vector<int64_t> predictions(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = values + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes && !std::isnan(row[best]); ++c) {
      if (std::isnan(row[c]) || row[c] > row[best]) best = c;  // strict: ties keep the first index
    }
    predictions[static_cast<size_t>(r)] = best;
  }
  return predictions;
}

void write_glue_submission(const std::string& path, std::span<const int64_t> indices,
                           std::span<const int64_t> predictions) {
  ZT_CHECK(indices.size() == predictions.size(), "GLUE submission ", path, ": ", indices.size(),
           " indices for ", predictions.size(), " predictions");
  std::unordered_set<int64_t> seen;
  std::string text = "index\tprediction\n";
  for (size_t i = 0; i < indices.size(); ++i) {
    ZT_CHECK(indices[i] >= 0, "GLUE submission ", path, ": row ", i, " has negative index ", indices[i]);
    ZT_CHECK(seen.insert(indices[i]).second, "GLUE submission ", path, ": index ", indices[i],
             " appears twice (padding repeats of a distributed sampler must be dropped first)");
    ZT_CHECK(predictions[i] == 0 || predictions[i] == 1, "GLUE submission ", path, ": prediction ",
             predictions[i], " for index ", indices[i], " is not 0 or 1");
    text += str(indices[i], '\t', predictions[i], '\n');
  }
  // Same directory as the target, so the rename cannot cross file systems.
  TempFile temp(str(path, ".tmp-", ::getpid()));
  write_synced(temp.path(), text);
  ZT_CHECK(std::rename(temp.path().c_str(), path.c_str()) == 0, "cannot rename ", temp.path(), " onto ", path,
           ": ", std::strerror(errno));
  temp.release();
}

void write_glue_submission_text(const std::string& path, std::span<const int64_t> indices,
                                std::span<const std::string> predictions) {
  ZT_CHECK(indices.size() == predictions.size(), "GLUE submission ", path, ": ", indices.size(),
           " indices for ", predictions.size(), " predictions");
  std::unordered_set<int64_t> seen;
  std::string text = "index\tprediction\n";
  for (size_t i = 0; i < indices.size(); ++i) {
    ZT_CHECK(indices[i] >= 0, "GLUE submission ", path, ": row ", i, " has negative index ", indices[i]);
    ZT_CHECK(seen.insert(indices[i]).second, "GLUE submission ", path, ": index ", indices[i],
             " appears twice (padding repeats of a distributed sampler must be dropped first)");
    text += str(indices[i], '\t', predictions[i], '\n');
  }
  TempFile temp(str(path, ".tmp-", ::getpid()));
  write_synced(temp.path(), text);
  ZT_CHECK(std::rename(temp.path().c_str(), path.c_str()) == 0, "cannot rename ", temp.path(), " onto ", path,
           ": ", std::strerror(errno));
  temp.release();
}

}  // namespace zt::data
