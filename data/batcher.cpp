#include "data/batcher.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "runtime/check.h"

namespace zt::data {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::next_below(uint64_t bound) {
  ZT_CHECK(bound > 0, "next_below needs a positive bound");
  // Reject the top partial block of 2^64 so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % bound;
}

std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch) {
  ZT_CHECK(n >= 0, "cannot shuffle ", n, " items");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Mixing the epoch through one SplitMix64 step decorrelates (seed, epoch) and (seed + 1, epoch - 1).
  SplitMix64 epoch_mixer(static_cast<uint64_t>(epoch));
  SplitMix64 rng(seed ^ epoch_mixer.next());
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.next_below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

EncodedDataset::EncodedDataset(const GlueDataset& dataset, const Tokenizer& tokenizer, int64_t max_length)
    : max_length_(max_length), pad_id_(tokenizer.pad_id()), regression_(dataset.regression) {
  offsets_.reserve(dataset.rows.size() + 1);
  offsets_.push_back(0);
  for (const SentencePairExample& row : dataset.rows) {
    const PairEncoding enc =
        dataset.single_sentence
            ? tokenizer.encode_single(row.sentence1, max_length, Padding::none)
            : tokenizer.encode_pair(row.sentence1, row.sentence2, max_length, Padding::none);
    ids_.insert(ids_.end(), enc.input_ids.begin(), enc.input_ids.end());
    offsets_.push_back(static_cast<int64_t>(ids_.size()));
    labels_.push_back(row.label);
    scores_.push_back(row.score);
    truncated_.push_back(enc.truncated ? 1 : 0);
  }
}

std::span<const int32_t> EncodedDataset::ids(int64_t row) const {
  ZT_CHECK(row >= 0 && row < size(), "row ", row, " outside the dataset [0, ", size(), ")");
  return std::span<const int32_t>(ids_).subspan(offsets_[row], offsets_[row + 1] - offsets_[row]);
}

LengthStats EncodedDataset::length_stats() const {
  LengthStats s;
  s.rows = size();
  if (s.rows == 0) return s;
  std::vector<int64_t> lengths(s.rows);
  for (int64_t r = 0; r < s.rows; ++r) lengths[r] = length(r);
  std::sort(lengths.begin(), lengths.end());
  s.min_length = lengths.front();
  s.max_length = lengths.back();
  s.total_tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  s.mean_length = static_cast<double>(s.total_tokens) / static_cast<double>(s.rows);
  s.median_length = lengths[(s.rows - 1) / 2];
  s.p95_length = lengths[std::min<int64_t>(s.rows - 1, (s.rows * 95) / 100)];
  s.truncated_rows = std::count(truncated_.begin(), truncated_.end(), uint8_t{1});
  return s;
}

std::string describe(const LengthStats& s) {
  char mean[32];
  std::snprintf(mean, sizeof(mean), "%.1f", s.mean_length);
  return str(s.rows, " rows, tokens min ", s.min_length, " / median ", s.median_length, " / mean ", mean,
             " / p95 ", s.p95_length, " / max ", s.max_length, ", ", s.truncated_rows, " truncated");
}

Batcher::Batcher(const EncodedDataset& dataset, BatcherOptions options)
    : dataset_(dataset), options_(options) {
  ZT_CHECK(options_.batch_size > 0, "batch_size must be positive, got ", options_.batch_size);
  ZT_CHECK(options_.world_size > 0, "world_size must be positive, got ", options_.world_size);
  ZT_CHECK(options_.rank >= 0 && options_.rank < options_.world_size, "rank ", options_.rank,
           " outside [0, world_size=", options_.world_size, ")");
  ZT_CHECK(dataset_.size() > 0, "cannot batch an empty dataset");
  set_epoch(0);
}

void Batcher::set_epoch(int64_t epoch) {
  ZT_CHECK(epoch >= 0, "epoch must be non-negative, got ", epoch);
  epoch_ = epoch;
  next_batch_ = 0;
  const int64_t n = dataset_.size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (options_.shuffle) {
    order = shuffled_order(n, options_.seed, epoch);
  } else {
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t world = options_.world_size;
  std::vector<uint8_t> repeat(order.size(), 0);
  if (options_.drop_last) {
    order.resize(static_cast<size_t>(n / world * world));
    repeat.resize(order.size());
  } else {
    const int64_t total = (n + world - 1) / world * world;
    for (int64_t i = n; i < total; ++i) {
      order.push_back(order[(i - n) % n]);  // wraps when n < world_size, as DistributedSampler does
      repeat.push_back(1);
    }
  }
  shard_.clear();
  shard_repeat_.clear();
  for (size_t i = static_cast<size_t>(options_.rank); i < order.size(); i += static_cast<size_t>(world)) {
    shard_.push_back(order[i]);
    shard_repeat_.push_back(repeat[i]);
  }
}

int64_t Batcher::batches_per_epoch() const {
  const int64_t n = examples_per_rank();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

Batch Batcher::batch_at(int64_t index) const {
  ZT_CHECK(index >= 0 && index < batches_per_epoch(), "batch ", index, " outside epoch of ",
           batches_per_epoch(), " batches");
  const int64_t begin = index * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, examples_per_rank());
  Batch batch;
  batch.batch_size = end - begin;
  if (options_.padding == Padding::max_length) {
    batch.seq_len = dataset_.max_length();
  } else {
    for (int64_t i = begin; i < end; ++i) batch.seq_len = std::max(batch.seq_len, dataset_.length(shard_[i]));
  }
  batch.input_ids.assign(batch.batch_size * batch.seq_len, dataset_.pad_id());
  batch.attention_mask.assign(batch.batch_size * batch.seq_len, 0);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t row = shard_[i];
    const int64_t b = i - begin;
    const std::span<const int32_t> ids = dataset_.ids(row);
    std::copy(ids.begin(), ids.end(), batch.input_ids.begin() + b * batch.seq_len);
    std::fill_n(batch.attention_mask.begin() + b * batch.seq_len, ids.size(), 1);
    batch.labels.push_back(dataset_.label(row));
    batch.scores.push_back(dataset_.score(row));
    batch.example_index.push_back(row);
    batch.is_duplicate.push_back(shard_repeat_[i]);
  }
  return batch;
}

bool Batcher::next(Batch& out) {
  if (next_batch_ >= batches_per_epoch()) return false;
  out = batch_at(next_batch_++);
  return true;
}

void Batcher::seek(BatcherPosition position) {
  set_epoch(position.epoch);
  ZT_CHECK(position.batch >= 0 && position.batch <= batches_per_epoch(), "cannot resume at batch ",
           position.batch, " of an epoch with ", batches_per_epoch(), " batches");
  next_batch_ = position.batch;
}

}  // namespace zt::data
