// SentencePiece tokenizer for sentence-pair classification, matching what HF run_glue feeds DeBERTa-v2.
//
// Pair layout: [CLS] A [SEP] B [SEP] (single sentence: [CLS] A [SEP]); attention_mask = 1 on those tokens, 0
// on padding ([PAD]). Pieces come from libsentencepiece with the model's own normalizer (nmt_nfkc for
// DeBERTa's spm.model), i.e. HF 4.x behaviour; see data/README.md for where HF 5.x differs (a few NFKC-only
// characters). Special ids are looked up by piece name ([CLS], [SEP], [PAD], [UNK]); a model without them is
// an error.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zt::data {

// How many leading pieces of A and of B a pair keeps under HF truncation=True ("longest_first"), as the
// `tokenizers` library computes it (reference/deberta-v2.md 10.2), with budget T = max_length - 3:
//   no cut when n_a + n_b <= T; otherwise with n1 = min(n_a, n_b) (A on ties), n2 = max:
//   n2 := (n1 > T) ? n1 : max(n1, T - n1); if n1 + n2 > T then n1 := floor(T/2), n2 := n1 + T mod 2.
// So the longer side is cut first, and when both must be cut the longer one (B on ties) gets the odd token.
struct KeptLengths {
  int64_t a = 0;
  int64_t b = 0;
};
KeptLengths longest_first_kept_lengths(int64_t n_a, int64_t n_b, int64_t budget);

enum class Padding {
  none,        // length = number of real tokens (the batcher pads each batch to its longest row)
  max_length,  // right-padded with [PAD] to max_length
};

struct PairEncoding {
  std::vector<int32_t> input_ids;       // [L]
  std::vector<int32_t> attention_mask;  // [L], 1 for real tokens, 0 for padding
  int64_t pieces_a = 0;                 // piece counts before truncation
  int64_t pieces_b = 0;
  bool truncated = false;   // some piece of A or B was dropped
  int64_t num_padding = 0;  // trailing [PAD] positions
  int64_t real_length() const { return static_cast<int64_t>(input_ids.size()) - num_padding; }
};

class Tokenizer {
 public:
  // Loads a SentencePiece model file (e.g. data/glue_mrpc/spm8k.model or DeBERTa's spm.model).
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Piece ids of one text, without special tokens.
  std::vector<int32_t> encode(std::string_view text) const;

  // [CLS] A [SEP] B [SEP], truncated longest_first to fit max_length (>= 3), padded per `padding`.
  PairEncoding encode_pair(std::string_view a, std::string_view b, int64_t max_length = 128,
                           Padding padding = Padding::none) const;

  // [CLS] A [SEP] for single-sentence tasks (CoLA, SST-2, a user file with one text column): A keeps its
  // first max_length - 2 pieces (>= 2), as HF truncation=True does with one sequence. pieces_b is 0.
  PairEncoding encode_single(std::string_view a, int64_t max_length = 128,
                             Padding padding = Padding::none) const;

  // Joins pieces into text (specials and padding shown as their piece names, e.g. "[CLS]").
  std::string decode(std::span<const int32_t> ids) const;
  std::string id_to_piece(int32_t id) const;

  int32_t vocab_size() const;
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  const std::string& model_path() const { return model_path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string model_path_;
  int32_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1;
};

}  // namespace zt::data
