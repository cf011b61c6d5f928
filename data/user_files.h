// The user's own data, as HF run_glue(_no_trainer) reads --train_file / --validation_file / --test_file
// without --task_name.
//
// Formats, by extension:
//   .csv          RFC 4180: the first record is the header; fields separated by ','; a field in double quotes
//                 may hold ',', '"' (written "") and line breaks; CRLF or LF; blank lines are skipped (as
//                 pandas does). An unquoted field is taken as written.
//   .json/.jsonl  one JSON object per line (JSON lines, what `datasets` reads as json); a file that is one
//                 JSON array of objects is read too. Columns are the keys in order of first appearance.
// Rules (run_glue's):
//   * The label column is `label`. Its values in the training file decide the problem:
//       all integers            -> classification, labels = the sorted distinct integers
//       any non-integer number  -> regression (num_labels 1, MSE loss), the values as f32 targets
//       all strings             -> classification, labels = the distinct strings sorted (byte order)
//     (CSV cells are typed the way pandas types a column: integer text, number text, anything else.)
//     A file mixing numbers and strings is an error, not silently strings.
//   * Text columns: `sentence1` and `sentence2` when both exist; else the first two non-label columns when
//     there are two or more; else the first one (single sentence, encoded [CLS] A [SEP]).
//   * With the model's label2id (a checkpoint's config.json), its ids are used when its names, lower-cased,
//     are exactly the data's label set (run_glue's test); otherwise the data's order, and `warning` says why.
//     HF's placeholder names LABEL_0, LABEL_1, ... are no label names and are ignored.
//   * The validation file needs the label column and only labels the training file has; the test file may
//     lack the label column (its values, if any, are ignored); both need the training file's text columns.
// Every problem is one zt::Error line naming the file, the 1-based row (and line) and what is wrong: no
// label column, unknown label in the validation file, an empty file, mixed number/string labels, a row
// with a missing field, malformed CSV quoting or JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/glue_tsv.h"

namespace zt::data {

// One cell of a user file, typed as pandas / datasets would see it.
struct UserCell {
  enum class Kind { missing, string, integer, number } kind = Kind::missing;
  std::string text;  // the value as written (JSON numbers as the parser prints them)
  double value = 0;  // integer / number
};

// A user file read as a table: a header and rows of cells, one per column.
struct UserTable {
  std::string source;
  std::vector<std::string> columns;
  std::vector<std::vector<UserCell>> rows;
  std::vector<int64_t> lines;  // 1-based line where each row starts
};

UserTable read_user_table(const std::string& path);
UserTable parse_user_csv(std::string_view text, const std::string& source);
UserTable parse_user_json_lines(std::string_view text, const std::string& source);

struct UserLabels {
  bool regression = false;
  std::vector<std::string> names;  // id -> label as written in the files (classification)
  bool from_model = false;         // ids are the model's label2id
  std::string warning;             // the model's label2id was not used: why
  int64_t num_labels() const { return regression ? 1 : static_cast<int64_t>(names.size()); }
};

struct UserDatasets {
  UserLabels labels;
  std::string text_a_column, text_b_column;  // text_b_column empty: single sentence
  GlueDataset train, validation;
  std::optional<GlueDataset> test;
};

// Reads the files (validation and test optional: empty path) and applies the rules above.
// `model_label2id` is the checkpoint's label2id (empty: none).
UserDatasets read_user_datasets(const std::string& train_path, const std::string& validation_path,
                                const std::string& test_path,
                                const std::map<std::string, int64_t>& model_label2id = {});

}  // namespace zt::data
