// Tokenizer: the longest_first truncation rule on hand-made lengths, pair layout, padding, and loading
// errors. HF parity over the whole MRPC corpus is in test_tokenizer_parity.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "data/tokenizer.h"
#include "runtime/check.h"
#include "tests/support/error_matchers.h"

namespace zt::data {
namespace {

const std::string kModel = std::string(ZT_DATA_DIR) + "/spm8k.model";

struct TruncationCase {
  int64_t n_a, n_b, budget, keep_a, keep_b;
  const char* why;
};

TEST(LongestFirst, HandMadeLengths) {
  const TruncationCase cases[] = {
      {3, 4, 10, 3, 4, "fits: nothing cut"},
      {5, 5, 10, 5, 5, "exactly fits"},
      {0, 0, 0, 0, 0, "empty"},
      {2, 20, 10, 2, 8, "A short: only B cut"},
      {20, 2, 10, 8, 2, "B short: only A cut"},
      {20, 30, 11, 5, 6, "both cut, odd T: longer (B) gets the extra token"},
      {30, 20, 11, 6, 5, "both cut, odd T: longer (A) gets the extra token"},
      {20, 20, 11, 5, 6, "tie, odd T: B (second) gets the extra token"},
      {20, 20, 10, 5, 5, "tie, even T: equal halves"},
      {20, 30, 10, 5, 5, "both cut, even T"},
      {6, 6, 11, 5, 6, "tie just over an odd T"},
      {5, 7, 11, 5, 6, "A fits in half: B takes the rest"},
      {6, 7, 11, 5, 6, "A over floor(T/2): both cut"},
      {60, 70, 125, 60, 65, "MRPC max_length 128: shorter A kept whole"},
      {63, 63, 125, 62, 63, "MRPC max_length 128: tie"},
      {70, 64, 125, 63, 62, "MRPC max_length 128: A longer, both cut, A gets the extra token"},
      {15, 40, 29, 14, 15, "max_length 32: both over half"},
      {10, 40, 29, 10, 19, "max_length 32: A under half"},
      {200, 1, 125, 124, 1, "one side of length 1"},
      {0, 200, 125, 0, 125, "empty A"},
      {7, 9, 0, 0, 0, "zero budget"},
      {7, 9, 1, 0, 1, "budget 1 goes to the longer"},
  };
  for (const auto& c : cases) {
    const KeptLengths kept = longest_first_kept_lengths(c.n_a, c.n_b, c.budget);
    EXPECT_EQ(kept.a, c.keep_a) << c.why;
    EXPECT_EQ(kept.b, c.keep_b) << c.why;
  }
}

// Properties over a grid: the kept total is min(n_a + n_b, T); each side keeps at most its length; a side
// that is cut keeps at least as much as the other side keeps, less the one odd token (longest cut first).
TEST(LongestFirst, PropertiesOverAGrid) {
  for (int64_t budget = 0; budget <= 13; ++budget) {
    for (int64_t n_a = 0; n_a <= 16; ++n_a) {
      for (int64_t n_b = 0; n_b <= 16; ++n_b) {
        const KeptLengths k = longest_first_kept_lengths(n_a, n_b, budget);
        SCOPED_TRACE(testing::Message() << "n_a=" << n_a << " n_b=" << n_b << " T=" << budget);
        ASSERT_EQ(k.a + k.b, std::min(n_a + n_b, budget));
        ASSERT_LE(k.a, n_a);
        ASSERT_LE(k.b, n_b);
        if (k.a < n_a) {
          ASSERT_GE(k.a + 1, k.b);
        }
        if (k.b < n_b) {
          ASSERT_GE(k.b + 1, k.a);
        }
      }
    }
  }
}

TEST(Tokenizer, SpecialIdsComeFromPieceNames) {
  const Tokenizer tok(kModel);
  EXPECT_EQ(tok.vocab_size(), 8000);
  EXPECT_EQ(tok.id_to_piece(tok.cls_id()), "[CLS]");
  EXPECT_EQ(tok.id_to_piece(tok.sep_id()), "[SEP]");
  EXPECT_EQ(tok.id_to_piece(tok.pad_id()), "[PAD]");
  EXPECT_EQ(tok.id_to_piece(tok.unk_id()), "[UNK]");
}

TEST(Tokenizer, PairLayoutAndDynamicLength) {
  const Tokenizer tok(kModel);
  const auto a = tok.encode("The company said .");
  const auto b = tok.encode("It rose 5 percent .");
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  const PairEncoding enc = tok.encode_pair("The company said .", "It rose 5 percent .");
  std::vector<int32_t> expected = {tok.cls_id()};
  expected.insert(expected.end(), a.begin(), a.end());
  expected.push_back(tok.sep_id());
  expected.insert(expected.end(), b.begin(), b.end());
  expected.push_back(tok.sep_id());
  EXPECT_EQ(enc.input_ids, expected);
  EXPECT_EQ(enc.attention_mask, std::vector<int32_t>(expected.size(), 1));
  EXPECT_FALSE(enc.truncated);
  EXPECT_EQ(enc.num_padding, 0);
  EXPECT_EQ(tok.decode(enc.input_ids), "[CLS] The company said . [SEP] It rose 5 percent . [SEP]");
}

TEST(Tokenizer, PadsToMaxLengthWithPadAndZeroMask) {
  const Tokenizer tok(kModel);
  const PairEncoding dynamic = tok.encode_pair("Shares fell .", "Stocks dropped .", 16, Padding::none);
  const PairEncoding padded = tok.encode_pair("Shares fell .", "Stocks dropped .", 16, Padding::max_length);
  const auto n = static_cast<int64_t>(dynamic.input_ids.size());
  ASSERT_LT(n, 16);
  ASSERT_EQ(padded.input_ids.size(), 16u);
  EXPECT_EQ(padded.num_padding, 16 - n);
  EXPECT_EQ(padded.real_length(), n);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(padded.input_ids[i], i < n ? dynamic.input_ids[i] : tok.pad_id()) << i;
    EXPECT_EQ(padded.attention_mask[i], i < n ? 1 : 0) << i;
  }
}

TEST(Tokenizer, SingleSentenceLayoutTruncationAndPadding) {
  const Tokenizer tok(kModel);
  const std::string text = "one two three four five six seven eight nine ten";
  const auto a = tok.encode(text);
  ASSERT_GT(a.size(), 4u);
  const PairEncoding whole = tok.encode_single(text);
  std::vector<int32_t> expected = {tok.cls_id()};
  expected.insert(expected.end(), a.begin(), a.end());
  expected.push_back(tok.sep_id());
  EXPECT_EQ(whole.input_ids, expected);
  EXPECT_FALSE(whole.truncated);
  EXPECT_EQ(whole.pieces_b, 0);

  // max_length 6 keeps 4 pieces: [CLS] a0 a1 a2 a3 [SEP].
  const PairEncoding cut = tok.encode_single(text, 6);
  EXPECT_TRUE(cut.truncated);
  EXPECT_EQ(cut.input_ids, (std::vector<int32_t>{tok.cls_id(), a[0], a[1], a[2], a[3], tok.sep_id()}));
  const PairEncoding padded = tok.encode_single("yes", 8, Padding::max_length);
  ASSERT_EQ(padded.input_ids.size(), 8u);
  EXPECT_EQ(padded.input_ids.back(), tok.pad_id());
  EXPECT_EQ(padded.attention_mask[padded.real_length() - 1], 1);
  EXPECT_EQ(padded.attention_mask[padded.real_length()], 0);
  EXPECT_THROW(tok.encode_single("a", 1), Error);
}

TEST(Tokenizer, TruncatesPairsLongestFirst) {
  const Tokenizer tok(kModel);
  const std::string long_a = "one two three four five six seven eight nine ten eleven twelve thirteen";
  const std::string short_b = "yes";
  const auto a = tok.encode(long_a);
  const auto b = tok.encode(short_b);
  const int64_t max_length = 8;
  ASSERT_GT(static_cast<int64_t>(a.size() + b.size()), max_length - 3);
  const PairEncoding enc = tok.encode_pair(long_a, short_b, max_length, Padding::max_length);
  const KeptLengths kept = longest_first_kept_lengths(a.size(), b.size(), max_length - 3);
  EXPECT_TRUE(enc.truncated);
  EXPECT_EQ(enc.pieces_a, static_cast<int64_t>(a.size()));
  EXPECT_EQ(enc.pieces_b, static_cast<int64_t>(b.size()));
  ASSERT_EQ(enc.input_ids.size(), static_cast<size_t>(max_length));
  EXPECT_EQ(enc.num_padding, 0);
  EXPECT_EQ(enc.input_ids[0], tok.cls_id());
  for (int64_t i = 0; i < kept.a; ++i) EXPECT_EQ(enc.input_ids[1 + i], a[i]);
  EXPECT_EQ(enc.input_ids[1 + kept.a], tok.sep_id());
  for (int64_t i = 0; i < kept.b; ++i) EXPECT_EQ(enc.input_ids[2 + kept.a + i], b[i]);
  EXPECT_EQ(enc.input_ids.back(), tok.sep_id());
  EXPECT_THROW(tok.encode_pair("a", "b", 2), Error);
}

TEST(Tokenizer, MissingModelFileIsAnError) {
  EXPECT_ERROR_HAS(Tokenizer("/nonexistent/spm.model"),
                   "cannot load SentencePiece model '/nonexistent/spm.model'");
}

// The shipped model with its "[CLS]" piece renamed in place (same byte length keeps the protobuf valid).
TEST(Tokenizer, MissingSpecialPieceIsNamed) {
  std::ifstream in(kModel, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t renamed = 0;
  for (size_t pos = bytes.find("[CLS]"); pos != std::string::npos; pos = bytes.find("[CLS]", pos)) {
    bytes.replace(pos, 5, "[XLS]");
    ++renamed;
  }
  ASSERT_GT(renamed, 0u);
  const auto path = std::filesystem::temp_directory_path() / "zt_test_no_cls.model";
  std::ofstream(path.string(), std::ios::binary) << bytes;
  EXPECT_ERROR_HAS(Tokenizer(path.string()), "has no piece '[CLS]'");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace zt::data
