// GLUE MRPC TSV reader.
//
// Accepted files (one header line, then one row per line):
//   labeled   (train.tsv, dev.tsv, test.tsv):  Quality \t #1 ID \t #2 ID \t #1 String \t #2 String
//             Quality is "0" (not equivalent) or "1" (equivalent).
//   unlabeled (GLUE test_glue_unlabeled.tsv):  index \t #1 ID \t #2 ID \t #1 String \t #2 String
//             index is a non-negative integer; the row's label is -1.
// Format rules, each violation a zt::Error naming the file, the 1-based line number and the problem:
//   * UTF-8 (validated strictly, see data/utf8.h); one leading BOM (EF BB BF) is skipped.
//   * Exactly 5 tab-separated fields per line. No CSV quoting: '"' is a literal character (MRPC has ~245
//     train strings with an odd number of quotes, which a CSV reader would merge into other rows).
//   * Lines end with LF; the final LF is optional. One CR right before the LF (a CRLF file) is removed, so
//     such files read the same as LF files; a CR anywhere else is kept as text.
//   * Blank lines are errors (they would be rows with 1 field), and so is a file without data rows.
//   * A line may hold at most kMaxTsvLineBytes bytes: a longer one (or /dev/zero, which has no line end) is
//     an error naming the file, the line and the limit, found without reading the rest of it.
// Fields quoted in errors show control characters and a byte order mark as \xNN escapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace zt::data {

// MRPC's longest line is 463 bytes; GLUE's longest (MultiNLI, QQP) are a few KiB.
inline constexpr size_t kMaxTsvLineBytes = size_t{1} << 20;

struct SentencePairExample {
  int64_t index = 0;  // GLUE "index" column for unlabeled files; the 0-based row number otherwise
  int label = -1;     // class id (0 / 1 for MRPC), or -1 for unlabeled files and regression rows
  float score = std::numeric_limits<float>::quiet_NaN();  // regression target; NaN when unlabeled
  std::string id1, id2;
  std::string sentence1, sentence2;  // sentence2 is empty and unused when the dataset is single_sentence
  int64_t line = 0;                  // 1-based line in the source file (the header is line 1)
};

// Rows of one file of any task (MRPC, the other GLUE tasks in data/glue_tasks.h, user CSV / JSON lines in
// data/user_files.h), in file order.
struct GlueDataset {
  std::string source;  // file path (or the name given to parse_glue_mrpc_tsv)
  bool labeled = true;
  bool single_sentence = false;  // rows are encoded [CLS] sentence1 [SEP]
  bool regression = false;       // rows carry `score` (f32), not a class id
  int64_t skipped_rows = 0;      // QQP rows with missing fields, skipped as HF's processor did
  int64_t first_skipped_line = 0;
  std::vector<SentencePairExample> rows;
};

// Reads a whole MRPC TSV file, opening it once and reading it in blocks (a FIFO works; memory is bounded by
// the rows plus one line). Throws zt::Error when the file is missing, a directory or malformed.
GlueDataset read_glue_mrpc_tsv(const std::string& path);

// Parses TSV text already in memory; `source` names it in error messages.
GlueDataset parse_glue_mrpc_tsv(std::string_view text, const std::string& source);

// Throws zt::Error unless every row of `dataset` has a label: `role` names the use that needs them
// ("--train_file"), so an unlabeled GLUE test file is refused instead of training on label -1 (loss 0,
// gradient 0) or scoring 0 of 0 rows.
void require_labels(const GlueDataset& dataset, std::string_view role);

// Calls `on_line` with each line of the file / text, without its LF (a CR before it is left for the
// caller); a line longer than kMaxTsvLineBytes is an error naming `source` and the line number.
void for_each_file_line(const std::string& path, const std::function<void(std::string_view)>& on_line);
void for_each_line(std::string_view text, const std::string& source,
                   const std::function<void(std::string_view)>& on_line);

// Splits on every tab; an empty field between two tabs is kept so field counts are exact.
std::vector<std::string_view> split_tabs(std::string_view line);

// A field as the user should see it in an error: quoted, cut at 40 bytes, with control characters and the
// byte order mark (invisible in a terminal) written as \xNN escapes.
std::string quoted_prefix(std::string_view s);

// <data_dir>/<split>.tsv for split in {train, dev, test, test_glue_unlabeled}; throws on other names.
std::string mrpc_split_path(const std::string& data_dir, const std::string& split);

}  // namespace zt::data
