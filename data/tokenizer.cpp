#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>

#include "runtime/check.h"

namespace zt::data {

KeptLengths longest_first_kept_lengths(int64_t n_a, int64_t n_b, int64_t budget) {
  ZT_CHECK(n_a >= 0 && n_b >= 0 && budget >= 0, "lengths and budget must be non-negative, got n_a=", n_a,
           " n_b=", n_b, " budget=", budget);
  if (n_a + n_b <= budget) return {n_a, n_b};
  const bool a_is_shorter = n_a <= n_b;
  int64_t n1 = a_is_shorter ? n_a : n_b;
  int64_t n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  return a_is_shorter ? KeptLengths{n1, n2} : KeptLengths{n2, n1};
}

struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor processor;
};

Tokenizer::Tokenizer(const std::string& model_path)
    : impl_(std::make_unique<Impl>()), model_path_(model_path) {
  const auto status = impl_->processor.Load(model_path);
  ZT_CHECK(status.ok(), "cannot load SentencePiece model '", model_path, "': ", status.ToString());
  // PieceToId answers unk_id for an unknown piece, so a missing special only shows by reading it back.
  auto special = [&](const char* piece) {
    const int id = impl_->processor.PieceToId(piece);
    ZT_CHECK(impl_->processor.IdToPiece(id) == piece, "SentencePiece model '", model_path, "' has no piece '",
             piece, "' (needed for [CLS] A [SEP] B [SEP] pairs with [PAD] padding)");
    return static_cast<int32_t>(id);
  };
  cls_id_ = special("[CLS]");
  sep_id_ = special("[SEP]");
  pad_id_ = special("[PAD]");
  unk_id_ = special("[UNK]");
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = impl_->processor.Encode(text, &ids);
  ZT_CHECK(status.ok(), "SentencePiece failed to encode ", text.size(), " bytes: ", status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

PairEncoding Tokenizer::encode_pair(std::string_view a, std::string_view b, int64_t max_length,
                                    Padding padding) const {
  ZT_CHECK(max_length >= 3, "max_length must leave room for [CLS] A [SEP] B [SEP], got ", max_length);
  const std::vector<int32_t> pieces_a = encode(a);
  const std::vector<int32_t> pieces_b = encode(b);
  PairEncoding out;
  out.pieces_a = static_cast<int64_t>(pieces_a.size());
  out.pieces_b = static_cast<int64_t>(pieces_b.size());
  const KeptLengths kept = longest_first_kept_lengths(out.pieces_a, out.pieces_b, max_length - 3);
  out.truncated = kept.a < out.pieces_a || kept.b < out.pieces_b;

  const int64_t length = kept.a + kept.b + 3;
  const int64_t padded = padding == Padding::max_length ? max_length : length;
  out.input_ids.reserve(padded);
  out.input_ids.push_back(cls_id_);
  out.input_ids.insert(out.input_ids.end(), pieces_a.begin(), pieces_a.begin() + kept.a);
  out.input_ids.push_back(sep_id_);
  out.input_ids.insert(out.input_ids.end(), pieces_b.begin(), pieces_b.begin() + kept.b);
  out.input_ids.push_back(sep_id_);
  out.input_ids.resize(padded, pad_id_);
  out.attention_mask.assign(padded, 0);
  std::fill_n(out.attention_mask.begin(), length, 1);
  out.num_padding = padded - length;
  return out;
}

PairEncoding Tokenizer::encode_single(std::string_view a, int64_t max_length, Padding padding) const {
  ZT_CHECK(max_length >= 2, "max_length must leave room for [CLS] A [SEP], got ", max_length);
  const std::vector<int32_t> pieces_a = encode(a);
  PairEncoding out;
  out.pieces_a = static_cast<int64_t>(pieces_a.size());
  const int64_t kept = std::min(out.pieces_a, max_length - 2);
  out.truncated = kept < out.pieces_a;
  const int64_t length = kept + 2;
  const int64_t padded = padding == Padding::max_length ? max_length : length;
  out.input_ids.reserve(padded);
  out.input_ids.push_back(cls_id_);
  out.input_ids.insert(out.input_ids.end(), pieces_a.begin(), pieces_a.begin() + kept);
  out.input_ids.push_back(sep_id_);
  out.input_ids.resize(padded, pad_id_);
  out.attention_mask.assign(padded, 0);
  std::fill_n(out.attention_mask.begin(), length, 1);
  out.num_padding = padded - length;
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  std::vector<int> run;  // consecutive ordinary pieces, decoded together so "▁" becomes spaces
  auto flush = [&] {
    if (run.empty()) return;
    if (!text.empty()) text += ' ';
    text += impl_->processor.DecodeIds(run);
    run.clear();
  };
  for (int32_t id : ids) {
    ZT_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary [0, ", vocab_size(),
             ")");
    if (impl_->processor.IsControl(id) || id == pad_id_) {
      flush();
      if (!text.empty()) text += ' ';
      text += impl_->processor.IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  ZT_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " outside the vocabulary [0, ", vocab_size(), ")");
  return impl_->processor.IdToPiece(id);
}

int32_t Tokenizer::vocab_size() const {
  return impl_->processor.GetPieceSize();
}

}  // namespace zt::data
