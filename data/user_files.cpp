#include "data/user_files.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/utf8.h"
#include "runtime/check.h"

namespace zt::data {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

std::string where(const std::string& source, size_t row, int64_t line) {
  return str(source, ": row ", row + 1, " (line ", line, ")");
}

// pandas' typing of one CSV cell: integer text ("-12"), number text ("3.5", "1e-3"), else a string; an
// empty cell is missing.
UserCell csv_cell(std::string text) {
  UserCell cell;
  if (text.empty()) return cell;
  const char* begin = text.data();
  const char* end = begin + text.size();
  int64_t integer = 0;
  auto [iptr, iec] = std::from_chars(begin, end, integer);
  if (iec == std::errc() && iptr == end) {
    cell.kind = UserCell::Kind::integer;
    cell.value = static_cast<double>(integer);
  } else {
    double number = 0;
    auto [nptr, nec] = std::from_chars(begin, end, number);
    if (nec == std::errc() && nptr == end) {
      cell.kind = UserCell::Kind::number;
      cell.value = number;
    } else {
      cell.kind = UserCell::Kind::string;
    }
  }
  cell.text = std::move(text);
  return cell;
}

std::string_view skip_bom(std::string_view text) {
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());
  return text;
}

}  // namespace

UserTable parse_user_csv(std::string_view text, const std::string& source) {
  text = skip_bom(text);
  if (auto bad = find_invalid_utf8(text)) ZT_FAIL(source, ": invalid UTF-8 at byte ", *bad + 1);
  UserTable table;
  table.source = source;
  size_t pos = 0;
  int64_t line = 1;
  bool header_done = false;
  while (pos < text.size()) {
    const int64_t record_line = line;
    std::vector<std::string> fields;
    std::string field;
    bool at_field_start = true, quoted = false, record_done = false;
    while (!record_done) {
      if (pos >= text.size()) {
        ZT_CHECK(!quoted, source, ": line ", record_line,
                 ": a quoted field is not closed before the end of the file");
        fields.push_back(std::move(field));
        break;
      }
      const char c = text[pos];
      if (quoted) {
        if (c == '"') {
          if (pos + 1 < text.size() && text[pos + 1] == '"') {
            field.push_back('"');
            pos += 2;
            continue;
          }
          quoted = false;
          ++pos;
          // After a closing quote only a separator or the record's end may follow.
          if (pos < text.size() && text[pos] != ',' && text[pos] != '\n' && text[pos] != '\r') {
            ZT_FAIL(source, ": line ", line,
                    ": text after a closing quote (RFC 4180: write a quote inside a "
                    "quoted field as \"\")");
          }
          continue;
        }
        if (c == '\n') ++line;
        field.push_back(c);
        ++pos;
        continue;
      }
      if (c == '"' && at_field_start) {
        quoted = true;
        at_field_start = false;
        ++pos;
      } else if (c == ',') {
        fields.push_back(std::move(field));
        field.clear();
        at_field_start = true;
        ++pos;
      } else if (c == '\n' || (c == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') ||
                 (c == '\r' && pos + 1 == text.size())) {
        fields.push_back(std::move(field));
        pos += c == '\r' && pos + 1 < text.size() ? 2 : 1;
        ++line;
        record_done = true;
      } else {
        field.push_back(c);
        at_field_start = false;
        ++pos;
      }
    }
    if (fields.size() == 1 && fields[0].empty()) continue;  // a blank line
    if (!header_done) {
      table.columns = std::move(fields);
      std::set<std::string> seen;
      for (const std::string& name : table.columns) {
        ZT_CHECK(seen.insert(name).second, source, ": line ", record_line, ": the header names column '",
                 name, "' twice");
      }
      header_done = true;
      continue;
    }
    ZT_CHECK(fields.size() == table.columns.size(), where(source, table.rows.size(), record_line), ": ",
             fields.size(), " fields, the header has ", table.columns.size());
    std::vector<UserCell> row;
    row.reserve(fields.size());
    for (std::string& f : fields) row.push_back(csv_cell(std::move(f)));
    table.rows.push_back(std::move(row));
    table.lines.push_back(record_line);
  }
  ZT_CHECK(header_done, source, ": empty file (expected a CSV header line and data rows)");
  ZT_CHECK(!table.rows.empty(), source, ": no data rows after the header");
  return table;
}

UserTable parse_user_json_lines(std::string_view text, const std::string& source) {
  using Json = nlohmann::ordered_json;
  text = skip_bom(text);
  UserTable table;
  table.source = source;
  std::vector<std::pair<Json, int64_t>> objects;  // (object, line)
  const size_t first = text.find_first_not_of(" \t\r\n");
  ZT_CHECK(first != std::string_view::npos, source,
           ": empty file (expected JSON lines: one object per line)");
  if (text[first] == '[') {
    Json array;
    try {
      array = Json::parse(text);
    } catch (const Json::exception& e) {
      ZT_FAIL(source, ": not valid JSON (", e.what(), ")");
    }
    int64_t index = 0;
    for (Json& item : array) objects.emplace_back(std::move(item), ++index);
  } else {
    int64_t line = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view piece = text.substr(pos, end - pos);
      pos = end + 1;
      ++line;
      if (piece.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      try {
        objects.emplace_back(Json::parse(piece), line);
      } catch (const Json::exception& e) {
        ZT_FAIL(source, ": line ", line, ": not a JSON object (", e.what(), ")");
      }
    }
  }
  ZT_CHECK(!objects.empty(), source, ": empty file (expected JSON lines: one object per line)");
  std::map<std::string, size_t> column_index;
  for (size_t r = 0; r < objects.size(); ++r) {
    const auto& [object, line] = objects[r];
    ZT_CHECK(object.is_object(), where(source, r, line), ": expected a JSON object, got ",
             object.type_name());
    for (auto it = object.begin(); it != object.end(); ++it) {
      if (column_index.emplace(it.key(), table.columns.size()).second) table.columns.push_back(it.key());
    }
  }
  for (size_t r = 0; r < objects.size(); ++r) {
    const auto& [object, line] = objects[r];
    std::vector<UserCell> row(table.columns.size());
    for (auto it = object.begin(); it != object.end(); ++it) {
      UserCell& cell = row[column_index.at(it.key())];
      const Json& v = it.value();
      if (v.is_null()) continue;
      if (v.is_string()) {
        cell.kind = UserCell::Kind::string;
        cell.text = v.get<std::string>();
        if (auto bad = find_invalid_utf8(cell.text)) ZT_FAIL(where(source, r, line), ": invalid UTF-8");
      } else if (v.is_number_integer()) {
        cell.kind = UserCell::Kind::integer;
        cell.value = v.get<double>();
        cell.text = v.dump();
      } else if (v.is_number_float()) {
        cell.kind = UserCell::Kind::number;
        cell.value = v.get<double>();
        cell.text = v.dump();
      } else if (v.is_boolean()) {
        cell.kind = UserCell::Kind::string;
        cell.text = v.dump();
      } else {
        ZT_FAIL(where(source, r, line), ": column '", it.key(), "' holds a JSON ", v.type_name(),
                ", expected a string or a number");
      }
    }
    table.rows.push_back(std::move(row));
    table.lines.push_back(line);
  }
  return table;
}

UserTable read_user_table(const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string extension = dot == std::string::npos ? "" : path.substr(dot + 1);
  ZT_CHECK(extension == "csv" || extension == "json" || extension == "jsonl", "data file '", path,
           "': the extension must be .csv, .json or .jsonl (as run_glue takes them)");
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.good(), "cannot open data file '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  return extension == "csv" ? parse_user_csv(text, path) : parse_user_json_lines(text, path);
}

namespace {

ptrdiff_t column_of(const UserTable& table, std::string_view name) {
  const auto it = std::find(table.columns.begin(), table.columns.end(), name);
  return it == table.columns.end() ? -1 : it - table.columns.begin();
}

std::string text_of(const UserTable& table, size_t r, ptrdiff_t column) {
  const UserCell& cell = table.rows[r][static_cast<size_t>(column)];
  // A missing CSV cell is an empty text, as pandas' NaN would be tokenized by nothing.
  return cell.kind == UserCell::Kind::missing ? std::string() : cell.text;
}

bool is_placeholder_label(const std::string& name) {
  if (!name.starts_with("LABEL_") || name.size() == 6) return false;
  return std::all_of(name.begin() + 6, name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// The label problem and the id order from the training file (rules in the header).
UserLabels labels_of_training_file(const UserTable& table, ptrdiff_t label_column) {
  bool any_number = false, any_integer = false, any_string = false;
  size_t first_string = 0, first_number = 0;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const UserCell& cell = table.rows[r][static_cast<size_t>(label_column)];
    switch (cell.kind) {
      case UserCell::Kind::missing:
        ZT_FAIL(where(table.source, r, table.lines[r]), ": the label is missing");
      case UserCell::Kind::string:
        if (!any_string) first_string = r;
        any_string = true;
        break;
      case UserCell::Kind::integer:
        if (!any_integer && !any_number) first_number = r;
        any_integer = true;
        break;
      case UserCell::Kind::number:
        if (!any_integer && !any_number) first_number = r;
        any_number = true;
        break;
    }
  }
  if (any_string && (any_number || any_integer)) {
    const size_t r = std::max(first_string, first_number);
    ZT_FAIL(where(table.source, r, table.lines[r]), ": label ",
            quoted_prefix(table.rows[r][static_cast<size_t>(label_column)].text), " mixes ",
            r == first_string ? "a string with numeric labels" : "a number with string labels", " (row ",
            std::min(first_string, first_number) + 1,
            " is the first of the other kind); use one kind of label");
  }
  UserLabels labels;
  if (any_number) {
    labels.regression = true;
    return labels;
  }
  if (any_integer) {
    std::set<int64_t> values;
    for (const auto& row : table.rows)
      values.insert(static_cast<int64_t>(row[static_cast<size_t>(label_column)].value));
    for (int64_t v : values) labels.names.push_back(std::to_string(v));
  } else {
    std::set<std::string> values;
    for (const auto& row : table.rows) values.insert(row[static_cast<size_t>(label_column)].text);
    labels.names.assign(values.begin(), values.end());
  }
  return labels;
}

void apply_model_label2id(UserLabels& labels, const std::map<std::string, int64_t>& model_label2id) {
  if (labels.regression || model_label2id.empty()) return;
  if (std::all_of(model_label2id.begin(), model_label2id.end(),
                  [](const auto& kv) { return is_placeholder_label(kv.first); })) {
    return;
  }
  std::map<std::string, int64_t> lowered;
  for (const auto& [name, id] : model_label2id) {
    std::string low = name;
    std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
    lowered[low] = id;
  }
  const std::set<std::string> data(labels.names.begin(), labels.names.end());
  std::set<std::string> model;
  for (const auto& kv : lowered) model.insert(kv.first);
  auto join = [](const std::set<std::string>& s) {
    std::string out;
    for (const std::string& x : s) out += str(out.empty() ? "" : ", ", x);
    return out;
  };
  if (model != data) {
    labels.warning = str("the model's labels (", join(model), ") are not the data's (", join(data),
                         "): using the data's order");
    return;
  }
  std::vector<std::string> ordered(labels.names.size());
  for (const auto& [name, id] : lowered) {
    ZT_CHECK(id >= 0 && id < static_cast<int64_t>(ordered.size()), "the model's label2id gives '", name,
             "' id ", id, ", outside [0, ", ordered.size(), ")");
    ZT_CHECK(ordered[static_cast<size_t>(id)].empty(), "the model's label2id gives id ", id, " twice");
    ordered[static_cast<size_t>(id)] = name;
  }
  labels.names = std::move(ordered);
  labels.from_model = true;
}

GlueDataset dataset_from_table(const UserTable& table, const UserDatasets& spec, bool needs_labels) {
  const ptrdiff_t a = column_of(table, spec.text_a_column);
  const ptrdiff_t b = spec.text_b_column.empty() ? -1 : column_of(table, spec.text_b_column);
  ZT_CHECK(a >= 0, table.source, ": no column '", spec.text_a_column,
           "' (the training file's first text column)");
  ZT_CHECK(spec.text_b_column.empty() || b >= 0, table.source, ": no column '", spec.text_b_column,
           "' (the training file's second text column)");
  const ptrdiff_t label = column_of(table, "label");
  ZT_CHECK(
      !needs_labels || label >= 0, table.source, ": no 'label' column (columns: ",
      [&] {
        std::string out;
        for (const std::string& c : table.columns) out += str(out.empty() ? "" : ", ", c);
        return out;
      }(),
      ")");
  GlueDataset dataset;
  dataset.source = table.source;
  dataset.labeled = needs_labels;
  dataset.single_sentence = b < 0;
  dataset.regression = spec.labels.regression;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    SentencePairExample row;
    row.index = static_cast<int64_t>(r);
    row.line = table.lines[r];
    row.sentence1 = text_of(table, r, a);
    if (b >= 0) row.sentence2 = text_of(table, r, b);
    if (needs_labels) {
      const UserCell& cell = table.rows[r][static_cast<size_t>(label)];
      const std::string at = where(table.source, r, table.lines[r]);
      ZT_CHECK(cell.kind != UserCell::Kind::missing, at, ": the label is missing");
      if (spec.labels.regression) {
        ZT_CHECK(cell.kind != UserCell::Kind::string, at, ": label ", quoted_prefix(cell.text),
                 " is not a number (the training file's labels are numbers: regression)");
        row.score = static_cast<float>(cell.value);
      } else {
        const std::string name = cell.kind == UserCell::Kind::string
                                     ? cell.text
                                     : std::to_string(static_cast<int64_t>(cell.value));
        ZT_CHECK(cell.kind != UserCell::Kind::number, at, ": label ", cell.text,
                 " is not an integer (the training file's labels are classes)");
        const auto it = std::find(spec.labels.names.begin(), spec.labels.names.end(), name);
        ZT_CHECK(it != spec.labels.names.end(), at, ": label ", quoted_prefix(name),
                 " is not one of the training file's labels");
        row.label = static_cast<int>(it - spec.labels.names.begin());
      }
    }
    dataset.rows.push_back(std::move(row));
  }
  return dataset;
}

}  // namespace

UserDatasets read_user_datasets(const std::string& train_path, const std::string& validation_path,
                                const std::string& test_path,
                                const std::map<std::string, int64_t>& model_label2id) {
  UserDatasets out;
  const UserTable train = read_user_table(train_path);
  const ptrdiff_t label = column_of(train, "label");
  ZT_CHECK(label >= 0, train_path, ": no 'label' column (run_glue's rule: the label column is 'label')");
  std::vector<std::string> text_columns;
  for (const std::string& c : train.columns) {
    if (c != "label") text_columns.push_back(c);
  }
  ZT_CHECK(!text_columns.empty(), train_path, ": no text column besides 'label'");
  if (column_of(train, "sentence1") >= 0 && column_of(train, "sentence2") >= 0) {
    out.text_a_column = "sentence1";
    out.text_b_column = "sentence2";
  } else if (text_columns.size() >= 2) {
    out.text_a_column = text_columns[0];
    out.text_b_column = text_columns[1];
  } else {
    out.text_a_column = text_columns[0];
  }
  out.labels = labels_of_training_file(train, label);
  apply_model_label2id(out.labels, model_label2id);
  if (!out.labels.regression) {
    ZT_CHECK(out.labels.names.size() >= 2, train_path, ": every row has label ",
             quoted_prefix(out.labels.names[0]), "; classification needs at least 2 classes");
  }
  out.train = dataset_from_table(train, out, true);
  if (!validation_path.empty())
    out.validation = dataset_from_table(read_user_table(validation_path), out, true);
  if (!test_path.empty()) out.test = dataset_from_table(read_user_table(test_path), out, false);
  return out;
}

}  // namespace zt::data
