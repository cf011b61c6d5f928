// GLUE MRPC TSV reader: the shipped files parse to the documented row counts, and every malformed input
// fails with a message naming the file, the line and the problem.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "data/glue_tsv.h"
#include "data/utf8.h"
#include "runtime/check.h"

namespace zt::data {
namespace {

const std::string kLabeledHeader = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n";
const std::string kUnlabeledHeader = "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n";

// Runs `parse` on `text` and returns the zt::Error message (empty when nothing was thrown).
std::string parse_error(const std::string& text, const std::string& source = "in.tsv") {
  try {
    parse_glue_mrpc_tsv(text, source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GlueTsv, ShippedSplitsHaveDocumentedRowCounts) {
  const std::string dir = ZT_DATA_DIR;
  const GlueDataset train = read_glue_mrpc_tsv(mrpc_split_path(dir, "train"));
  const GlueDataset dev = read_glue_mrpc_tsv(mrpc_split_path(dir, "dev"));
  const GlueDataset test = read_glue_mrpc_tsv(mrpc_split_path(dir, "test"));
  const GlueDataset unlabeled = read_glue_mrpc_tsv(mrpc_split_path(dir, "test_glue_unlabeled"));
  EXPECT_EQ(train.rows.size(), 3668u);
  EXPECT_EQ(dev.rows.size(), 408u);
  EXPECT_EQ(test.rows.size(), 1725u);
  EXPECT_EQ(unlabeled.rows.size(), 1725u);
  EXPECT_TRUE(train.labeled);
  EXPECT_FALSE(unlabeled.labeled);
  for (const auto& row : train.rows) ASSERT_TRUE(row.label == 0 || row.label == 1) << "line " << row.line;
  // GLUE's unlabeled test row `index` i is row i of the labeled test.tsv, same pair of sentences.
  for (size_t i = 0; i < unlabeled.rows.size(); ++i) {
    ASSERT_EQ(unlabeled.rows[i].index, static_cast<int64_t>(i));
    ASSERT_EQ(unlabeled.rows[i].label, -1);
    ASSERT_EQ(unlabeled.rows[i].sentence1, test.rows[i].sentence1);
    ASSERT_EQ(unlabeled.rows[i].sentence2, test.rows[i].sentence2);
  }
}

TEST(GlueTsv, FirstTrainRowIsReadFieldByField) {
  const GlueDataset train = read_glue_mrpc_tsv(mrpc_split_path(ZT_DATA_DIR, "train"));
  const SentencePairExample& row = train.rows.front();
  EXPECT_EQ(row.line, 2);
  EXPECT_EQ(row.label, 1);
  EXPECT_EQ(row.id1, "702876");
  EXPECT_EQ(row.id2, "702977");
  EXPECT_TRUE(row.sentence1.starts_with("Amrozi accused his brother"));
  EXPECT_TRUE(row.sentence2.starts_with("Referring to him as only"));
}

TEST(GlueTsv, QuotesAreLiteralAndBomIsOptional) {
  const std::string body = "1\ta\tb\t\" He said\tno \"quote\" here\n0\tc\td\tx\ty\n";
  for (const std::string& prefix : {std::string(), std::string("\xEF\xBB\xBF")}) {
    const GlueDataset d = parse_glue_mrpc_tsv(prefix + kLabeledHeader + body, "q.tsv");
    ASSERT_EQ(d.rows.size(), 2u);
    EXPECT_EQ(d.rows[0].sentence1, "\" He said");
    EXPECT_EQ(d.rows[0].sentence2, "no \"quote\" here");
    EXPECT_EQ(d.rows[1].label, 0);
    EXPECT_EQ(d.rows[1].line, 3);
  }
}

TEST(GlueTsv, CrlfLineEndingsReadLikeLf) {
  const GlueDataset lf = parse_glue_mrpc_tsv(kLabeledHeader + "1\ta\tb\tx y\tz\n", "lf.tsv");
  const GlueDataset crlf =
      parse_glue_mrpc_tsv("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n1\ta\tb\tx y\tz\r\n", "crlf.tsv");
  ASSERT_EQ(crlf.rows.size(), 1u);
  EXPECT_EQ(crlf.rows[0].sentence2, lf.rows[0].sentence2);
  EXPECT_EQ(crlf.rows[0].sentence2, "z");
}

TEST(GlueTsv, MissingFinalNewlineIsAccepted) {
  const GlueDataset d = parse_glue_mrpc_tsv(kLabeledHeader + "1\ta\tb\tx\ty", "nofinal.tsv");
  ASSERT_EQ(d.rows.size(), 1u);
  EXPECT_EQ(d.rows[0].sentence2, "y");
}

TEST(GlueTsv, UnlabeledFileKeepsIndex) {
  const GlueDataset d = parse_glue_mrpc_tsv(kUnlabeledHeader + "7\ta\tb\tx\ty\n", "u.tsv");
  ASSERT_EQ(d.rows.size(), 1u);
  EXPECT_EQ(d.rows[0].index, 7);
  EXPECT_EQ(d.rows[0].label, -1);
  EXPECT_NE(parse_error(kUnlabeledHeader + "x7\ta\tb\tx\ty\n").find("in.tsv:2: index must be"),
            std::string::npos);
  EXPECT_NE(parse_error(kUnlabeledHeader + "-1\ta\tb\tx\ty\n").find("in.tsv:2: index must be"),
            std::string::npos);
}

TEST(GlueTsv, MissingFileIsNamed) {
  const std::string path = "/nonexistent/zt/train.tsv";
  try {
    read_glue_mrpc_tsv(path);
    FAIL() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open GLUE TSV file '" + path + "'"), std::string::npos)
        << e.what();
  }
}

TEST(GlueTsv, EmptyFileAndHeaderOnlyAreErrors) {
  EXPECT_NE(parse_error("", "e.tsv").find("e.tsv: empty file"), std::string::npos);
  EXPECT_NE(parse_error(kLabeledHeader, "h.tsv").find("h.tsv: no data rows"), std::string::npos);
  // An empty file on disk reaches the same check through the file reader.
  const auto path = std::filesystem::temp_directory_path() / "zt_test_empty.tsv";
  { std::ofstream(path.string(), std::ios::binary); }
  try {
    read_glue_mrpc_tsv(path.string());
    FAIL() << "no error for an empty file";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string() + ": empty file"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

TEST(GlueTsv, WrongFieldCountNamesLine) {
  EXPECT_NE(parse_error(kLabeledHeader + "1\ta\tb\tx\ty\n1\ta\tb\tx\n")
                .find("in.tsv:3: expected 5 tab-separated fields, got 4"),
            std::string::npos);
  EXPECT_NE(parse_error(kLabeledHeader + "1\ta\tb\tx\ty\tz\n")
                .find("in.tsv:2: expected 5 tab-separated fields, got 6"),
            std::string::npos);
  EXPECT_NE(parse_error(kLabeledHeader + "1\ta\tb\tx\ty\n\n")
                .find("in.tsv:3: expected 5 tab-separated fields, got 1 (blank line)"),
            std::string::npos);
}

TEST(GlueTsv, BadLabelNamesLine) {
  for (const std::string label : {"2", "", "01", "yes", " 1", "-1"}) {
    const std::string error = parse_error(kLabeledHeader + "1\ta\tb\tx\ty\n" + label + "\ta\tb\tx\ty\n");
    EXPECT_NE(error.find("in.tsv:3: label (Quality) must be 0 or 1, got '" + label + "'"), std::string::npos)
        << "label '" << label << "': " << error;
  }
}

TEST(GlueTsv, BadHeaderIsRejected) {
  EXPECT_NE(parse_error("Label\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\ta\tb\tx\ty\n")
                .find("in.tsv:1: header must start with 'Quality'"),
            std::string::npos);
  EXPECT_NE(parse_error("Quality\t#1 ID\t#2 ID\tsentence1\t#2 String\n1\ta\tb\tx\ty\n")
                .find("in.tsv:1: header field 4 must be '#1 String'"),
            std::string::npos);
}

TEST(GlueTsv, InvalidUtf8NamesLineAndByte) {
  // A Latin-1 "é" (0xE9) followed by ASCII: a 3-byte lead with no continuation bytes.
  const std::string error = parse_error(kLabeledHeader + "1\ta\tb\tcaf\xE9 x\ty\n");
  EXPECT_NE(error.find("in.tsv:2: invalid UTF-8 at byte 10 of the line (byte value 0xe9)"), std::string::npos)
      << error;
}

// Runs read_glue_mrpc_tsv on `path` and returns the zt::Error message (empty when nothing was thrown).
std::string read_error(const std::string& path) {
  try {
    read_glue_mrpc_tsv(path);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

std::filesystem::path scratch_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / str("zt_glue_tsv_", getpid(), "_", name);
}

// A BOM at the start of a data row (two files concatenated) printed as an invisible character.
TEST(GlueTsv, ByteOrderMarkInARowIsShownEscaped) {
  const std::string e = parse_error(kLabeledHeader +
                                    "\xEF\xBB\xBF"
                                    "0\t1\t2\ta\tb\n");
  EXPECT_NE(e.find("in.tsv:2: label (Quality) must be 0 or 1, got '\\xEF\\xBB\\xBF"
                   "0' (a UTF-8 byte order mark)"),
            std::string::npos)
      << e;
  EXPECT_NE(parse_error(kLabeledHeader + "\x01\t1\t2\ta\tb\n").find("got '\\x01'"), std::string::npos);
}

// A directory read as "empty file".
TEST(GlueTsv, ADirectoryIsNamedAsSuch) {
  const auto dir = scratch_path("dir.tsv");
  std::filesystem::create_directories(dir);
  const std::string message = read_error(dir.string());
  EXPECT_NE(message.find(dir.string()), std::string::npos) << message;
  EXPECT_NE(message.find("is a directory, not a file"), std::string::npos) << message;
  std::filesystem::remove_all(dir);
}

// A 50 MB line took 12 GB; /dev/zero (no line end at all) grew until killed. Both stop at the limit.
TEST(GlueTsv, LinesOverTheLimitAreRefusedNamingFileLineAndLimit) {
  EXPECT_NE(read_error("/dev/zero").find("/dev/zero:1: line is longer than the limit of 1 MiB"),
            std::string::npos)
      << read_error("/dev/zero");
  std::string long_row = "1\t1\t2\t";
  long_row.append(kMaxTsvLineBytes, 'a');
  long_row.append("\tb\n");
  EXPECT_NE(parse_error(kLabeledHeader + long_row).find("in.tsv:2: line is longer than the limit of 1 MiB"),
            std::string::npos);
  const auto path = scratch_path("long.tsv");
  std::ofstream(path, std::ios::binary) << kLabeledHeader << "1\t1\t2\ta\tb\n" << long_row;
  EXPECT_NE(read_error(path.string()).find(path.string() + ":3: line is longer than the limit"),
            std::string::npos)
      << read_error(path.string());
  std::filesystem::remove(path);
}

// The reader hands lines across its 64 KiB read blocks: the whole shipped train file (about 1 MB) reads
// the same through the file reader as parsed from memory.
TEST(GlueTsv, StreamedReadEqualsParsingTheText) {
  const std::string path = mrpc_split_path(ZT_DATA_DIR, "train");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const GlueDataset streamed = read_glue_mrpc_tsv(path);
  const GlueDataset parsed = parse_glue_mrpc_tsv(text, path);
  ASSERT_EQ(streamed.rows.size(), parsed.rows.size());
  for (size_t i = 0; i < parsed.rows.size(); ++i) {
    ASSERT_EQ(streamed.rows[i].sentence1, parsed.rows[i].sentence1) << i;
    ASSERT_EQ(streamed.rows[i].sentence2, parsed.rows[i].sentence2) << i;
    ASSERT_EQ(streamed.rows[i].id1, parsed.rows[i].id1) << i;
    ASSERT_EQ(streamed.rows[i].label, parsed.rows[i].label) << i;
    ASSERT_EQ(streamed.rows[i].line, parsed.rows[i].line) << i;
  }
}

// A FIFO can be read only once: the reader opens it once and reads it to its end.
TEST(GlueTsv, AFifoIsReadInOnePass) {
  const auto fifo = scratch_path("train.fifo");
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer(
      [&] { std::ofstream(fifo, std::ios::binary) << kLabeledHeader << "1\t1\t2\ta\tb\n0\t3\t4\tc\td\n"; });
  const GlueDataset dataset = read_glue_mrpc_tsv(fifo.string());
  writer.join();
  EXPECT_EQ(dataset.rows.size(), 2u);
  std::filesystem::remove(fifo);
}

TEST(Utf8, AcceptsWellFormedSequences) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii \t\x7f"));
  EXPECT_TRUE(is_valid_utf8("\xC2\xBD"));          // U+00BD ½
  EXPECT_TRUE(is_valid_utf8("\xE2\x80\xA6"));      // U+2026 …
  EXPECT_TRUE(is_valid_utf8("\xED\x9F\xBF"));      // U+D7FF, last before the surrogates
  EXPECT_TRUE(is_valid_utf8("\xEE\x80\x80"));      // U+E000, first after them
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
}

TEST(Utf8, RejectsIllFormedSequencesAtTheirStart) {
  struct Case {
    const char* bytes;
    size_t bad_offset;
    const char* why;
  };
  const Case cases[] = {
      {"ab\x80", 2, "lone continuation byte"},
      {"\xC0\xAF", 0, "overlong 2-byte form of '/'"},
      {"\xC1\xBF", 0, "overlong 2-byte lead C1"},
      {"\xE0\x80\xAF", 0, "overlong 3-byte form"},
      {"\xF0\x80\x80\xAF", 0, "overlong 4-byte form"},
      {"\xED\xA0\x80", 0, "surrogate U+D800"},
      {"\xF4\x90\x80\x80", 0, "above U+10FFFF"},
      {"\xF5\x80\x80\x80", 0, "lead F5"},
      {"\xFF", 0, "byte FF"},
      {"x\xE2\x80", 1, "3-byte sequence cut short by the end"},
      {"\xE2\x28\xA1", 0, "bad second byte"},
      {"\xE2\x82\x28", 0, "bad third byte"},
      {"\xC2\xBD\xC3", 2, "valid char, then truncated 2-byte sequence"},
  };
  for (const Case& c : cases) {
    const auto bad = find_invalid_utf8(c.bytes);
    ASSERT_TRUE(bad.has_value()) << c.why;
    EXPECT_EQ(*bad, c.bad_offset) << c.why;
  }
}

}  // namespace
}  // namespace zt::data
