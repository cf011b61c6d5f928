// Encoded datasets and the batcher that turns them into training / evaluation batches.
//
// Note [Sharding across ranks]
// Follows torch DistributedSampler: every rank computes the same epoch order (shuffled by seed + epoch),
// then rank r takes positions r, r + W, r + 2W, ... of it (W = world_size).
//   drop_last = false: the order is padded by repeating its first entries until its length is a multiple
//     of W, so every rank gets ceil(N/W) examples and the same number of batches (collectives stay in step);
//     the repeats are flagged in Batch::is_duplicate so losses and metrics can ignore them. The last batch
//     of a rank may be smaller than batch_size.
//   drop_last = true: the order is cut to a multiple of W (floor(N/W) per rank) and a final partial batch
//     is dropped, so every batch is full.
// Note [Deterministic shuffling]
// The permutation comes from a SplitMix64 stream and a Fisher-Yates shuffle with rejection sampling, both
// defined here, so the same (seed, epoch) gives the same order with any compiler, standard library or
// machine (std::shuffle and std::uniform_int_distribution are implementation-defined).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/glue_tsv.h"
#include "data/tokenizer.h"
#include "runtime/tensor.h"

namespace zt::data {

// SplitMix64 (Steele, Lea, Flood 2014): a 64-bit generator whose output is fixed by its seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t next_below(uint64_t bound);  // uniform in [0, bound), bound > 0, unbiased (rejection)

 private:
  uint64_t state_;
};

// The permutation of [0, n) used for epoch `epoch` under `seed` (Fisher-Yates over SplitMix64).
std::vector<int64_t> shuffled_order(int64_t n, uint64_t seed, int64_t epoch);

struct LengthStats {
  int64_t rows = 0;
  int64_t min_length = 0, max_length = 0;  // tokens per row including [CLS]/[SEP], before padding
  double mean_length = 0;
  int64_t median_length = 0, p95_length = 0;
  int64_t truncated_rows = 0;
  int64_t total_tokens = 0;
};

// One line for logs: "3668 rows, tokens min 19 / median 51 / mean 52.1 / p95 75 / max 103, 0 truncated".
std::string describe(const LengthStats& stats);

// Every row of a GLUE dataset tokenized once: [CLS] A [SEP] B [SEP] ([CLS] A [SEP] for single-sentence
// datasets) with no padding.
class EncodedDataset {
 public:
  EncodedDataset(const GlueDataset& dataset, const Tokenizer& tokenizer, int64_t max_length);

  int64_t size() const { return static_cast<int64_t>(labels_.size()); }
  int64_t max_length() const { return max_length_; }
  int32_t pad_id() const { return pad_id_; }
  std::span<const int32_t> ids(int64_t row) const;  // [length(row)]
  int64_t length(int64_t row) const { return offsets_[row + 1] - offsets_[row]; }
  int label(int64_t row) const { return labels_[row]; }
  float score(int64_t row) const { return scores_[row]; }  // regression target, NaN when unlabeled
  bool regression() const { return regression_; }
  bool truncated(int64_t row) const { return truncated_[row] != 0; }
  LengthStats length_stats() const;

 private:
  int64_t max_length_;
  int32_t pad_id_;
  std::vector<int32_t> ids_;      // all rows concatenated
  std::vector<int64_t> offsets_;  // [size + 1]
  std::vector<int> labels_;       // [size], -1 when unlabeled
  std::vector<float> scores_;     // [size]
  bool regression_ = false;
  std::vector<uint8_t> truncated_;
};

struct BatcherOptions {
  int64_t batch_size = 8;  // per rank
  bool shuffle = true;
  uint64_t seed = 42;
  int rank = 0;
  int world_size = 1;
  bool drop_last = false;           // see Note [Sharding across ranks]
  Padding padding = Padding::none;  // none: pad to the longest row of each batch; max_length: to L
};

// One batch owned by the host. Tensor views point into the vectors, so keep the Batch alive while they
// are used.
struct Batch {
  int64_t batch_size = 0;               // B (rows in this batch)
  int64_t seq_len = 0;                  // L
  std::vector<int64_t> input_ids;       // [B, L], right-padded with [PAD]
  std::vector<int64_t> attention_mask;  // [B, L], 1 real token / 0 padding
  std::vector<int64_t> labels;          // [B], -1 when unlabeled (and for regression rows)
  std::vector<float> scores;            // [B], regression targets, NaN when unlabeled
  std::vector<int64_t> example_index;   // [B], row in the EncodedDataset
  std::vector<uint8_t> is_duplicate;    // [B], 1 for DistributedSampler padding repeats

  Tensor input_ids_tensor() { return Tensor(input_ids.data(), {batch_size, seq_len}, DType::i64); }
  Tensor attention_mask_tensor() { return Tensor(attention_mask.data(), {batch_size, seq_len}, DType::i64); }
  Tensor labels_tensor() { return Tensor(labels.data(), {batch_size}, DType::i64); }
  Tensor scores_tensor() { return Tensor(scores.data(), {batch_size}, DType::f32); }
};

// Where a batcher stands, for checkpoints: the next batch to yield is `batch` of epoch `epoch`.
struct BatcherPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const BatcherPosition&) const = default;
};

class Batcher {
 public:
  Batcher(const EncodedDataset& dataset, BatcherOptions options);

  // Starts `epoch` from its first batch (the shuffle depends on seed and epoch).
  void set_epoch(int64_t epoch);
  // Fills `out` with the next batch of the current epoch; false when the epoch is exhausted.
  bool next(Batch& out);
  // Batch `index` of the current epoch without moving the position.
  Batch batch_at(int64_t index) const;

  int64_t batches_per_epoch() const;
  int64_t examples_per_rank() const { return static_cast<int64_t>(shard_.size()); }
  BatcherPosition position() const { return {epoch_, next_batch_}; }
  void seek(BatcherPosition position);  // resume: set_epoch(position.epoch) then skip to position.batch
  const BatcherOptions& options() const { return options_; }

 private:
  const EncodedDataset& dataset_;
  BatcherOptions options_;
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
  std::vector<int64_t> shard_;         // this rank's rows for the epoch, in order
  std::vector<uint8_t> shard_repeat_;  // 1 where shard_ holds a padding repeat
};

}  // namespace zt::data
