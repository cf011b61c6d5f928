#include "data/user_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/check.h"

namespace zt::data {
namespace {

namespace fs = std::filesystem;

template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "expected a zt::Error containing '" << part << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(part), std::string::npos) << "missing '" << part << "' in: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
  }
}

class UserFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / str("zt_user_files_", getpid(), "_",
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  fs::path dir_;
};

TEST(UserCsv, Rfc4180QuotingAndTyping) {
  const UserTable t = parse_user_csv(
      "text,label\r\n\"a, b\",1\r\n\"say \"\"hi\"\"\nthen\",2\r\n\r\nplain \"quote\",3.5\r\n", "f.csv");
  ASSERT_EQ(t.columns, (std::vector<std::string>{"text", "label"}));
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0][0].text, "a, b");
  EXPECT_EQ(t.rows[1][0].text, "say \"hi\"\nthen");
  EXPECT_EQ(t.rows[2][0].text, "plain \"quote\"");  // an unquoted field is taken as written
  EXPECT_EQ(t.rows[0][1].kind, UserCell::Kind::integer);
  EXPECT_EQ(t.rows[2][1].kind, UserCell::Kind::number);
  EXPECT_EQ(t.rows[2][1].value, 3.5);
  EXPECT_EQ(t.lines, (std::vector<int64_t>{2, 3, 6}));  // the quoted line break moves the next row down
  expect_error([] { parse_user_csv("a,b\n\"x\"y,1\n", "f.csv"); },
               "f.csv: line 2: text after a closing quote");
  expect_error([] { parse_user_csv("a,b\n\"x,1\n", "f.csv"); },
               "f.csv: line 2: a quoted field is not closed");
  expect_error([] { parse_user_csv("a,b\n1,2,3\n", "f.csv"); },
               "f.csv: row 1 (line 2): 3 fields, the header has 2");
  expect_error([] { parse_user_csv("", "f.csv"); }, "f.csv: empty file");
  expect_error([] { parse_user_csv("a,label\n", "f.csv"); }, "f.csv: no data rows after the header");
}

TEST(UserJson, LinesArraysAndTypes) {
  const UserTable t = parse_user_json_lines(
      "{\"sentence\": \"good\", \"label\": \"pos\"}\n\n{\"label\": \"neg\", \"sentence\": \"bad\", \"id\": "
      "7}\n",
      "f.jsonl");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"sentence", "label", "id"}));
  EXPECT_EQ(t.rows[1][0].text, "bad");
  EXPECT_EQ(t.rows[0][2].kind, UserCell::Kind::missing);
  EXPECT_EQ(t.rows[1][2].kind, UserCell::Kind::integer);
  EXPECT_EQ(t.lines, (std::vector<int64_t>{1, 3}));
  const UserTable array = parse_user_json_lines("[{\"a\": 1.5}, {\"a\": 2}]", "f.json");
  EXPECT_EQ(array.rows.size(), 2u);
  EXPECT_EQ(array.rows[0][0].kind, UserCell::Kind::number);
  expect_error([] { parse_user_json_lines("{\"a\": 1}\n{\"a\": \n", "f.jsonl"); },
               "f.jsonl: line 2: not a JSON object");
  expect_error([] { parse_user_json_lines("{\"a\": [1]}\n", "f.jsonl"); },
               "f.jsonl: row 1 (line 1): column 'a' holds a JSON array");
  expect_error([] { parse_user_json_lines("\n\n", "f.jsonl"); }, "f.jsonl: empty file");
}

TEST_F(UserFilesTest, StringLabelsAreSortedIntoIdsAndTextColumnsFollowRunGlue) {
  const std::string train = write("train.csv",
                                  "id,review,label\n1,fine,neutral\n2,great,positive\n3,awful,negative\n"
                                  "4,ok,neutral\n");
  const std::string dev = write("dev.csv", "id,review,label\n5,meh,neutral\n6,bad,negative\n");
  const std::string test = write("test.csv", "id,review\n7,good\n");
  const UserDatasets d = read_user_datasets(train, dev, test);
  EXPECT_EQ(d.labels.names, (std::vector<std::string>{"negative", "neutral", "positive"}));
  EXPECT_FALSE(d.labels.regression);
  // No sentence1/sentence2: the first two non-label columns, even an id (run_glue's rule).
  EXPECT_EQ(d.text_a_column, "id");
  EXPECT_EQ(d.text_b_column, "review");
  EXPECT_EQ(d.train.rows[1].label, 2);
  EXPECT_EQ(d.train.rows[1].sentence2, "great");
  EXPECT_EQ(d.validation.rows[1].label, 0);
  ASSERT_TRUE(d.test.has_value());
  EXPECT_FALSE(d.test->labeled);
  EXPECT_EQ(d.test->rows[0].sentence2, "good");
}

TEST_F(UserFilesTest, SentencePairColumnsAndSingleSentence) {
  const std::string pair =
      write("p.jsonl",
            "{\"x\": \"q\", \"sentence2\": \"b\", \"sentence1\": \"a\", \"label\": 1}\n"
            "{\"x\": \"q\", \"sentence2\": \"d\", \"sentence1\": \"c\", \"label\": 0}\n");
  const UserDatasets p = read_user_datasets(pair, "", "");
  EXPECT_EQ(p.text_a_column, "sentence1");
  EXPECT_EQ(p.text_b_column, "sentence2");
  EXPECT_EQ(p.labels.names, (std::vector<std::string>{"0", "1"}));
  const std::string single = write("s.csv", "label,text\n10,a\n2,b\n");
  const UserDatasets s = read_user_datasets(single, "", "");
  EXPECT_TRUE(s.train.single_sentence);
  EXPECT_EQ(s.labels.names, (std::vector<std::string>{"2", "10"}));  // integers sort as numbers
  EXPECT_EQ(s.train.rows[0].label, 1);
}

TEST_F(UserFilesTest, FloatLabelsMeanRegression) {
  const std::string train =
      write("t.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": 2.5}\n");
  const UserDatasets d = read_user_datasets(train, train, "");
  EXPECT_TRUE(d.labels.regression);
  EXPECT_EQ(d.labels.num_labels(), 1);
  EXPECT_TRUE(d.train.regression);
  EXPECT_FLOAT_EQ(d.train.rows[0].score, 1.0f);
  EXPECT_FLOAT_EQ(d.validation.rows[1].score, 2.5f);
}

TEST_F(UserFilesTest, ModelLabel2IdIsUsedWhenTheNamesMatch) {
  const std::string train =
      write("t.csv", "premise,hypothesis,label\na,b,entailment\nc,d,neutral\ne,f,contradiction\n");
  const UserDatasets matched =
      read_user_datasets(train, "", "", {{"CONTRADICTION", 0}, {"NEUTRAL", 1}, {"ENTAILMENT", 2}});
  EXPECT_TRUE(matched.labels.from_model);
  EXPECT_EQ(matched.labels.names, (std::vector<std::string>{"contradiction", "neutral", "entailment"}));
  EXPECT_EQ(matched.train.rows[0].label, 2);
  const UserDatasets other = read_user_datasets(train, "", "", {{"yes", 0}, {"no", 1}});
  EXPECT_FALSE(other.labels.from_model);
  EXPECT_NE(other.labels.warning.find("not the data's"), std::string::npos);
  EXPECT_EQ(other.labels.names, (std::vector<std::string>{"contradiction", "entailment", "neutral"}));
  const UserDatasets placeholder = read_user_datasets(train, "", "", {{"LABEL_0", 0}, {"LABEL_1", 1}});
  EXPECT_TRUE(placeholder.labels.warning.empty());
}

TEST_F(UserFilesTest, BadFilesEndWithOneLineNamingFileRowAndProblem) {
  const std::string no_label = write("nolabel.csv", "text,target\na,1\n");
  expect_error([&] { read_user_datasets(no_label, "", ""); }, no_label + ": no 'label' column");
  const std::string train = write("train.csv", "text,label\na,x\nb,y\n");
  const std::string dev = write("dev.csv", "text,label\na,x\nb,z\n");
  expect_error([&] { read_user_datasets(train, dev, ""); },
               dev + ": row 2 (line 3): label 'z' is not one of the training file's labels");
  const std::string dev_no_label = write("dev2.csv", "text\na\n");
  expect_error([&] { read_user_datasets(train, dev_no_label, ""); }, dev_no_label + ": no 'label' column");
  const std::string empty = write("empty.csv", "");
  expect_error([&] { read_user_datasets(empty, "", ""); }, empty + ": empty file");
  const std::string empty_json = write("empty.jsonl", "");
  expect_error([&] { read_user_datasets(empty_json, "", ""); }, empty_json + ": empty file");
  const std::string mixed =
      write("mixed.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": \"two\"}\n");
  expect_error([&] { read_user_datasets(mixed, "", ""); },
               mixed + ": row 2 (line 2): label 'two' mixes a string with numeric labels");
  const std::string mixed_csv = write("mixed.csv", "text,label\na,good\nb,3\n");
  expect_error([&] { read_user_datasets(mixed_csv, "", ""); },
               mixed_csv + ": row 2 (line 3): label '3' mixes a number");
  const std::string missing = write("missing.csv", "text,label\na,\n");
  expect_error([&] { read_user_datasets(missing, "", ""); },
               missing + ": row 1 (line 2): the label is missing");
  const std::string one_class = write("one.csv", "text,label\na,x\nb,x\n");
  expect_error([&] { read_user_datasets(one_class, "", ""); }, "classification needs at least 2 classes");
  const std::string tsv = write("data.tsv", "a\tb\n");
  expect_error([&] { read_user_datasets(tsv, "", ""); }, "the extension must be .csv, .json or .jsonl");
  const std::string other_columns = write("other.csv", "words,label\na,x\n");
  expect_error([&] { read_user_datasets(train, other_columns, ""); }, other_columns + ": no column 'text'");
}

}  // namespace
}  // namespace zt::data
