#include "data/glue_tsv.h"

#include <array>
#include <charconv>
#include <fstream>
#include <sstream>

#include "data/utf8.h"
#include "runtime/check.h"

namespace zt::data {

namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr std::array<std::string_view, 4> kSharedHeader = {"#1 ID", "#2 ID", "#1 String", "#2 String"};

// Splits on every tab; an empty field between two tabs is kept so field counts are exact.
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
  out.append(s.substr(0, kMax));
  out.append(s.size() > kMax ? "...'" : "'");
  return out;
}

}  // namespace

GlueDataset parse_glue_mrpc_tsv(std::string_view text, const std::string& source) {
  GlueDataset out;
  out.source = source;
  ZT_CHECK(!text.empty(), source, ": empty file (expected a header line and data rows)");
  if (text.starts_with(kBom)) text.remove_prefix(kBom.size());

  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    ++line_number;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.ends_with('\r')) line.remove_suffix(1);

    if (auto bad = find_invalid_utf8(line)) {
      ZT_FAIL(source, ":", line_number, ": invalid UTF-8 at byte ", *bad + 1, " of the line (byte value 0x",
              std::hex, static_cast<int>(static_cast<uint8_t>(line[*bad])), ")");
    }
    const std::vector<std::string_view> fields = split_tabs(line);
    if (fields.size() != 5) {
      ZT_FAIL(source, ":", line_number, ": expected 5 tab-separated fields, got ", fields.size(),
              line.empty() ? " (blank line)" : "");
    }

    if (line_number == 1) {
      if (fields[0] == "Quality") {
        out.labeled = true;
      } else if (fields[0] == "index") {
        out.labeled = false;
      } else {
        ZT_FAIL(source, ":1: header must start with 'Quality' (labeled) or 'index' (unlabeled), got ",
                quoted_prefix(fields[0]));
      }
      for (size_t k = 0; k < kSharedHeader.size(); ++k) {
        ZT_CHECK(fields[k + 1] == kSharedHeader[k], source, ":1: header field ", k + 2, " must be '",
                 kSharedHeader[k], "', got ", quoted_prefix(fields[k + 1]));
      }
      continue;
    }

    SentencePairExample row;
    row.line = line_number;
    if (out.labeled) {
      if (fields[0] == "0" || fields[0] == "1") {
        row.label = fields[0][0] - '0';
      } else {
        ZT_FAIL(source, ":", line_number, ": label (Quality) must be 0 or 1, got ", quoted_prefix(fields[0]));
      }
      row.index = static_cast<int64_t>(out.rows.size());
    } else {
      const std::string_view f = fields[0];
      auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), row.index);
      if (f.empty() || ec != std::errc() || ptr != f.data() + f.size() || row.index < 0) {
        ZT_FAIL(source, ":", line_number, ": index must be a non-negative integer, got ", quoted_prefix(f));
      }
      row.label = -1;
    }
    row.id1 = fields[1];
    row.id2 = fields[2];
    row.sentence1 = fields[3];
    row.sentence2 = fields[4];
    out.rows.push_back(std::move(row));
  }
  ZT_CHECK(!out.rows.empty(), source, ": no data rows after the header");
  return out;
}

GlueDataset read_glue_mrpc_tsv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in.is_open(), "cannot open GLUE TSV file '", path, "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ZT_CHECK(!in.bad(), "error while reading '", path, "'");
  return parse_glue_mrpc_tsv(buffer.str(), path);
}

std::string mrpc_split_path(const std::string& data_dir, const std::string& split) {
  ZT_CHECK(split == "train" || split == "dev" || split == "test" || split == "test_glue_unlabeled",
           "unknown MRPC split '", split, "' (expected train, dev, test or test_glue_unlabeled)");
  return data_dir + "/" + split + ".tsv";
}

}  // namespace zt::data
