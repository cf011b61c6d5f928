// Batcher: per-epoch coverage across ranks, deterministic shuffling, padding, drop_last and resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "data/batcher.h"
#include "runtime/check.h"

namespace zt::data {
namespace {

const std::string kModel = std::string(ZT_DATA_DIR) + "/spm8k.model";

// n rows whose sentences grow with the row number, so lengths differ from row to row.
GlueDataset synthetic_dataset(int n) {
  std::string text = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n";
  for (int i = 0; i < n; ++i) {
    std::string a = "The company said", b = "Shares rose";
    for (int k = 0; k < i % 7; ++k) a += " again";
    for (int k = 0; k < i % 5; ++k) b += " sharply";
    text += std::to_string(i % 2) + "\t" + std::to_string(i) + "\t" + std::to_string(i + 1000) + "\t" + a +
            " .\t" + b + " .\n";
  }
  return parse_glue_mrpc_tsv(text, "synthetic.tsv");
}

class BatcherTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = new Tokenizer(kModel);
    train_ = new EncodedDataset(read_glue_mrpc_tsv(mrpc_split_path(ZT_DATA_DIR, "train")), *tokenizer_, 128);
  }
  static void TearDownTestSuite() {
    delete train_;
    delete tokenizer_;
  }
  static Tokenizer* tokenizer_;
  static EncodedDataset* train_;
};
Tokenizer* BatcherTest::tokenizer_ = nullptr;
EncodedDataset* BatcherTest::train_ = nullptr;

std::vector<Batch> all_batches(Batcher& batcher) {
  std::vector<Batch> out;
  Batch b;
  while (batcher.next(b)) out.push_back(b);
  return out;
}

std::vector<int64_t> example_order(Batcher& batcher) {
  std::vector<int64_t> order;
  for (const Batch& b : all_batches(batcher)) {
    order.insert(order.end(), b.example_index.begin(), b.example_index.end());
  }
  return order;
}

// Reference outputs of SplitMix64 from its published definition (Vigna's splitmix64.c, state 0).
TEST(SplitMix64, MatchesPublishedSequence) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
}

TEST(SplitMix64, NextBelowStaysInRangeAndCoversIt) {
  SplitMix64 rng(7);
  std::vector<int> hits(6, 0);
  for (int i = 0; i < 6000; ++i) {
    const uint64_t x = rng.next_below(6);
    ASSERT_LT(x, 6u);
    ++hits[x];
  }
  for (int h : hits) EXPECT_NEAR(h, 1000, 150);
  EXPECT_THROW(rng.next_below(0), Error);
}

TEST(ShuffledOrder, IsAPermutationThatDependsOnSeedAndEpoch) {
  const std::vector<int64_t> a = shuffled_order(1000, 42, 0);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_EQ(sorted, identity);
  EXPECT_NE(a, identity);
  EXPECT_EQ(a, shuffled_order(1000, 42, 0));
  EXPECT_NE(a, shuffled_order(1000, 42, 1));
  EXPECT_NE(a, shuffled_order(1000, 43, 0));
  EXPECT_NE(shuffled_order(1000, 43, 0), shuffled_order(1000, 42, 1));
  EXPECT_TRUE(shuffled_order(0, 1, 0).empty());
  EXPECT_EQ(shuffled_order(1, 1, 0), std::vector<int64_t>{0});
}

// drop_last off: over all ranks every example appears exactly once as a real entry; the repeats that
// even out the ranks are flagged, and every rank runs the same number of batches.
TEST_F(BatcherTest, EveryExampleOncePerEpochAcrossRanks) {
  for (int world : {1, 2, 3}) {
    for (int64_t epoch : {0, 3}) {
      SCOPED_TRACE(testing::Message() << "world_size " << world << " epoch " << epoch);
      std::vector<int> real_count(train_->size(), 0);
      int64_t duplicates = 0;
      int64_t batches = -1;
      for (int rank = 0; rank < world; ++rank) {
        Batcher batcher(*train_, {.batch_size = 32, .seed = 5, .rank = rank, .world_size = world});
        batcher.set_epoch(epoch);
        if (batches < 0) batches = batcher.batches_per_epoch();
        EXPECT_EQ(batcher.batches_per_epoch(), batches);
        const std::vector<Batch> got = all_batches(batcher);
        EXPECT_EQ(static_cast<int64_t>(got.size()), batches);
        for (const Batch& b : got) {
          for (int64_t i = 0; i < b.batch_size; ++i) {
            if (b.is_duplicate[i]) {
              ++duplicates;
            } else {
              ++real_count[b.example_index[i]];
            }
          }
        }
      }
      for (int64_t r = 0; r < train_->size(); ++r) ASSERT_EQ(real_count[r], 1) << "example " << r;
      const int64_t n = train_->size();
      EXPECT_EQ(duplicates, (n + world - 1) / world * world - n);
    }
  }
}

TEST_F(BatcherTest, SmallDatasetsWrapThePaddingLikeDistributedSampler) {
  for (int n : {1, 2, 7}) {
    const EncodedDataset data(synthetic_dataset(n), *tokenizer_, 32);
    const int world = 3;
    std::vector<int> real_count(n, 0);
    for (int rank = 0; rank < world; ++rank) {
      Batcher batcher(data, {.batch_size = 2, .rank = rank, .world_size = world});
      EXPECT_EQ(batcher.examples_per_rank(), (n + world - 1) / world) << "n=" << n;
      for (const Batch& b : all_batches(batcher)) {
        for (int64_t i = 0; i < b.batch_size; ++i) {
          if (!b.is_duplicate[i]) ++real_count[b.example_index[i]];
        }
      }
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(real_count[r], 1) << "n=" << n << " example " << r;
  }
}

TEST_F(BatcherTest, DropLastGivesFullBatchesAndNoRepeats) {
  const int world = 3;
  std::vector<int> count(train_->size(), 0);
  const int64_t batch_size = 32;
  for (int rank = 0; rank < world; ++rank) {
    Batcher batcher(*train_,
                    {.batch_size = batch_size, .rank = rank, .world_size = world, .drop_last = true});
    EXPECT_EQ(batcher.examples_per_rank(), train_->size() / world);
    EXPECT_EQ(batcher.batches_per_epoch(), train_->size() / world / batch_size);
    for (const Batch& b : all_batches(batcher)) {
      EXPECT_EQ(b.batch_size, batch_size);
      for (int64_t i = 0; i < b.batch_size; ++i) {
        EXPECT_EQ(b.is_duplicate[i], 0);
        ++count[b.example_index[i]];
      }
    }
  }
  EXPECT_EQ(*std::max_element(count.begin(), count.end()), 1);
  EXPECT_EQ(std::accumulate(count.begin(), count.end(), int64_t{0}),
            world * (train_->size() / world / batch_size) * batch_size);
}

TEST_F(BatcherTest, OrderIsDeterministicAndChangesWithEpoch) {
  Batcher first(*train_, {.batch_size = 16, .seed = 11});
  Batcher second(*train_, {.batch_size = 16, .seed = 11});
  const std::vector<int64_t> epoch0 = example_order(first);
  EXPECT_EQ(epoch0, example_order(second));
  first.set_epoch(1);
  second.set_epoch(1);
  const std::vector<int64_t> epoch1 = example_order(first);
  EXPECT_EQ(epoch1, example_order(second));
  EXPECT_NE(epoch0, epoch1);
  // The batcher's order is the documented shuffled_order, so other machines can reproduce it.
  EXPECT_EQ(epoch1, shuffled_order(train_->size(), 11, 1));
  Batcher other_seed(*train_, {.batch_size = 16, .seed = 12});
  EXPECT_NE(epoch0, example_order(other_seed));
}

TEST_F(BatcherTest, NoShuffleKeepsFileOrder) {
  Batcher batcher(*train_, {.batch_size = 100, .shuffle = false});
  std::vector<int64_t> identity(train_->size());
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_EQ(example_order(batcher), identity);
}

TEST_F(BatcherTest, DynamicPaddingPadsToLongestInBatch) {
  Batcher batcher(*train_, {.batch_size = 8, .seed = 3});
  for (const Batch& b : all_batches(batcher)) {
    int64_t longest = 0;
    for (int64_t i = 0; i < b.batch_size; ++i)
      longest = std::max(longest, train_->length(b.example_index[i]));
    ASSERT_EQ(b.seq_len, longest);
    ASSERT_EQ(b.input_ids.size(), static_cast<size_t>(b.batch_size * b.seq_len));
    for (int64_t i = 0; i < b.batch_size; ++i) {
      const int64_t row = b.example_index[i];
      const auto ids = train_->ids(row);
      ASSERT_EQ(b.labels[i], train_->label(row));
      for (int64_t t = 0; t < b.seq_len; ++t) {
        const bool real = t < static_cast<int64_t>(ids.size());
        ASSERT_EQ(b.input_ids[i * b.seq_len + t], real ? ids[t] : tokenizer_->pad_id());
        ASSERT_EQ(b.attention_mask[i * b.seq_len + t], real ? 1 : 0);
      }
    }
  }
}

TEST_F(BatcherTest, MaxLengthPaddingAndTensorViews) {
  Batcher batcher(*train_, {.batch_size = 4, .padding = Padding::max_length});
  Batch b;
  ASSERT_TRUE(batcher.next(b));
  EXPECT_EQ(b.seq_len, 128);
  const Tensor ids = b.input_ids_tensor();
  EXPECT_EQ(ids.shape(), (Shape{4, 128}));
  EXPECT_EQ(ids.dtype(), DType::i64);
  EXPECT_EQ(ids.data_as<int64_t>(), b.input_ids.data());
  EXPECT_EQ(b.attention_mask_tensor().shape(), (Shape{4, 128}));
  EXPECT_EQ(b.labels_tensor().shape(), (Shape{4}));
  EXPECT_EQ(ids.data_as<int64_t>()[0], tokenizer_->cls_id());
}

TEST_F(BatcherTest, LastPartialBatchIsKeptWithoutDropLast) {
  Batcher batcher(*train_, {.batch_size = 1000});
  EXPECT_EQ(batcher.batches_per_epoch(), 4);
  const std::vector<Batch> got = all_batches(batcher);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got.back().batch_size, 3668 - 3000);
}

// A checkpointed position resumes the exact same stream of batches.
TEST_F(BatcherTest, ResumeFromPositionIsExact) {
  Batcher original(*train_, {.batch_size = 32, .seed = 9, .rank = 1, .world_size = 2});
  original.set_epoch(2);
  Batch b;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(original.next(b));
  const BatcherPosition saved = original.position();
  EXPECT_EQ(saved, (BatcherPosition{2, 5}));
  const std::vector<Batch> rest = all_batches(original);

  Batcher resumed(*train_, {.batch_size = 32, .seed = 9, .rank = 1, .world_size = 2});
  resumed.seek(saved);
  const std::vector<Batch> again = all_batches(resumed);
  ASSERT_EQ(again.size(), rest.size());
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(again[i].input_ids, rest[i].input_ids) << i;
    EXPECT_EQ(again[i].example_index, rest[i].example_index) << i;
  }
  EXPECT_THROW(resumed.seek({2, resumed.batches_per_epoch() + 1}), Error);
}

TEST_F(BatcherTest, RejectsBadOptions) {
  EXPECT_THROW(Batcher(*train_, {.batch_size = 0}), Error);
  EXPECT_THROW(Batcher(*train_, {.rank = 2, .world_size = 2}), Error);
  EXPECT_THROW(Batcher(*train_, {.world_size = 0}), Error);
}

TEST_F(BatcherTest, LengthStatsSummarizeTheDataset) {
  const LengthStats s = train_->length_stats();
  EXPECT_EQ(s.rows, 3668);
  int64_t total = 0, longest = 0, shortest = 1 << 30, truncated = 0;
  for (int64_t r = 0; r < train_->size(); ++r) {
    total += train_->length(r);
    longest = std::max(longest, train_->length(r));
    shortest = std::min(shortest, train_->length(r));
    truncated += train_->truncated(r) ? 1 : 0;
  }
  EXPECT_EQ(s.total_tokens, total);
  EXPECT_EQ(s.max_length, longest);
  EXPECT_EQ(s.min_length, shortest);
  EXPECT_EQ(s.truncated_rows, truncated);
  EXPECT_LE(s.max_length, 128);
  EXPECT_GE(s.median_length, s.min_length);
  EXPECT_LE(s.median_length, s.p95_length);
}

}  // namespace
}  // namespace zt::data
