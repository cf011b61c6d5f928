#include "data/glue_tsv.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <memory>

#include "data/utf8.h"
#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt::data {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr std::array<std::string_view, 4> kSharedHeader = {"#1 ID", "#2 ID", "#1 String", "#2 String"};

}  // namespace

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) {
      fields.push_back(line.substr(start));
      return fields;
    }
    fields.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

std::string quoted_prefix(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out(1, '\'');
  bool has_bom = false;
  for (size_t i = 0; i < std::min(s.size(), kMax); ++i) {
    const auto byte = static_cast<unsigned char>(s[i]);
    if (s.substr(i).starts_with(kBom)) {
      out += "\\xEF\\xBB\\xBF";
      has_bom = true;
      i += kBom.size() - 1;
    } else if (byte < 0x20 || byte == 0x7F) {
      out += str("\\x", std::uppercase, std::hex, std::setw(2), std::setfill('0'), static_cast<int>(byte));
    } else {
      out.push_back(s[i]);
    }
  }
  out.append(s.size() > kMax ? "...'" : "'");
  if (has_bom) out.append(" (a UTF-8 byte order mark)");
  return out;
}

namespace {

// Parses the file line by line, so a reader can stream a file through it.
class RowParser {
 public:
  explicit RowParser(const std::string& source) { dataset_.source = source; }

  // One line without its LF (a trailing CR is removed here).
  void add_line(std::string_view line);
  GlueDataset finish();

 private:
  void parse_header(const std::vector<std::string_view>& fields);

  GlueDataset dataset_;
  int64_t line_number_ = 0;
};

void RowParser::add_line(std::string_view line) {
  const std::string& source = dataset_.source;
  ++line_number_;
  if (line_number_ == 1 && line.starts_with(kBom)) line.remove_prefix(kBom.size());
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (auto bad = find_invalid_utf8(line)) {
    ZT_FAIL(source, ":", line_number_, ": invalid UTF-8 at byte ", *bad + 1, " of the line (byte value 0x",
            std::hex, static_cast<int>(static_cast<uint8_t>(line[*bad])), ")");
  }
  const std::vector<std::string_view> fields = split_tabs(line);
  if (fields.size() != 5) {
    ZT_FAIL(source, ":", line_number_, ": expected 5 tab-separated fields, got ", fields.size(),
            line.empty() ? " (blank line)" : "");
  }
  if (line_number_ == 1) {
    parse_header(fields);
    return;
  }

  SentencePairExample row;
  row.line = line_number_;
  if (dataset_.labeled) {
    if (fields[0] == "0" || fields[0] == "1") {
      row.label = fields[0][0] - '0';
    } else {
      ZT_FAIL(source, ":", line_number_, ": label (Quality) must be 0 or 1, got ", quoted_prefix(fields[0]));
    }
    row.index = static_cast<int64_t>(dataset_.rows.size());
  } else {
    const std::string_view f = fields[0];
    auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), row.index);
    if (f.empty() || ec != std::errc() || ptr != f.data() + f.size() || row.index < 0) {
      ZT_FAIL(source, ":", line_number_, ": index must be a non-negative integer, got ", quoted_prefix(f));
    }
    row.label = -1;
  }
  row.id1 = fields[1];
  row.id2 = fields[2];
  row.sentence1 = fields[3];
  row.sentence2 = fields[4];
  dataset_.rows.push_back(std::move(row));
}

void RowParser::parse_header(const std::vector<std::string_view>& fields) {
  const std::string& source = dataset_.source;
  if (fields[0] == "Quality") {
    dataset_.labeled = true;
  } else if (fields[0] == "index") {
    dataset_.labeled = false;
  } else {
    ZT_FAIL(source, ":1: header must start with 'Quality' (labeled) or 'index' (unlabeled), got ",
            quoted_prefix(fields[0]));
  }
  for (size_t k = 0; k < kSharedHeader.size(); ++k) {
    ZT_CHECK(fields[k + 1] == kSharedHeader[k], source, ":1: header field ", k + 2, " must be '",
             kSharedHeader[k], "', got ", quoted_prefix(fields[k + 1]));
  }
}

GlueDataset RowParser::finish() {
  ZT_CHECK(line_number_ > 0, dataset_.source, ": empty file (expected a header line and data rows)");
  ZT_CHECK(!dataset_.rows.empty(), dataset_.source, ": no data rows after the header");
  return std::move(dataset_);
}

[[noreturn]] void fail_long_line(const std::string& source, int64_t line_number) {
  ZT_FAIL(source, ":", line_number, ": line is longer than the limit of ",
          format_memory_size(kMaxTsvLineBytes), " (not a GLUE TSV file?)");
}

}  // namespace

void for_each_line(std::string_view text, const std::string& source,
                   const std::function<void(std::string_view)>& on_line) {
  size_t pos = 0;
  for (int64_t line_number = 1; pos < text.size(); ++line_number) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (end - pos > kMaxTsvLineBytes) fail_long_line(source, line_number);
    on_line(text.substr(pos, end - pos));
    pos = end + 1;
  }
}

void for_each_file_line(const std::string& path, const std::function<void(std::string_view)>& on_line) {
  std::error_code ignored;
  // Opening a directory succeeds on Linux and reads nothing, which said "empty file".
  ZT_CHECK(!std::filesystem::is_directory(path, ignored), "GLUE TSV file '", path,
           "' is a directory, not a file");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
  ZT_CHECK(file != nullptr, "cannot open GLUE TSV file '", path, "' (", std::strerror(errno), ")");
  // Read in blocks and hand over complete lines, so memory is bounded by the line limit whatever the input
  // (/dev/zero has no line end at all); the file is opened once, so a FIFO works.
  std::string line;
  char buffer[1 << 16];
  int64_t lines = 0;
  while (true) {
    const size_t got = std::fread(buffer, 1, sizeof(buffer), file.get());
    std::string_view block(buffer, got);
    while (!block.empty()) {
      const size_t end = block.find('\n');
      const std::string_view piece = block.substr(0, end);
      if (line.size() + piece.size() > kMaxTsvLineBytes) fail_long_line(path, lines + 1);
      line.append(piece);
      if (end == std::string_view::npos) break;
      on_line(line);
      ++lines;
      line.clear();
      block.remove_prefix(end + 1);
    }
    if (got < sizeof(buffer)) break;
  }
  ZT_CHECK(!std::ferror(file.get()), "error while reading '", path, "' (", std::strerror(errno), ")");
  if (!line.empty()) on_line(line);
}

GlueDataset parse_glue_mrpc_tsv(std::string_view text, const std::string& source) {
  RowParser parser(source);
  for_each_line(text, source, [&](std::string_view line) { parser.add_line(line); });
  return parser.finish();
}

GlueDataset read_glue_mrpc_tsv(const std::string& path) {
  RowParser parser(path);
  for_each_file_line(path, [&](std::string_view line) { parser.add_line(line); });
  return parser.finish();
}

void require_labels(const GlueDataset& dataset, std::string_view role) {
  ZT_CHECK(
      dataset.labeled, role, " ", dataset.source,
      " has no labels (it is in GLUE's unlabeled test format: index, #1 ID, #2 ID, #1 String, #2 String); ",
      role, " needs the labeled format with the Quality column, as train.tsv and dev.tsv have");
}

std::string mrpc_split_path(const std::string& data_dir, const std::string& split) {
  ZT_CHECK(split == "train" || split == "dev" || split == "test" || split == "test_glue_unlabeled",
           "unknown MRPC split '", split, "' (expected train, dev, test or test_glue_unlabeled)");
  return data_dir + "/" + split + ".tsv";
}

}  // namespace zt::data
