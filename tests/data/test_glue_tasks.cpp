#include "data/glue_tasks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/batcher.h"
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
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "missing '" << part << "' in: " << e.what();
  }
}

GlueDataset parse(std::string_view task, std::string_view text, GlueFileRole role = GlueFileRole::labeled) {
  return parse_glue_task_tsv(text, str(task, ".tsv"), glue_task(task), role);
}

TEST(GlueTasks, TableHasTheNineTasksInGlueOrder) {
  std::string names;
  for (const GlueTaskSpec& t : glue_tasks()) names += str(t.name, " ");
  EXPECT_EQ(names, "cola sst2 mrpc qqp stsb mnli qnli rte wnli ");
  EXPECT_EQ(glue_task("stsb").num_labels(), 1);
  EXPECT_TRUE(glue_task("stsb").regression());
  EXPECT_EQ(glue_task("mnli").num_labels(), 3);
  EXPECT_EQ(glue_task("mnli").dev.size(), 2u);
  EXPECT_EQ(glue_task("mnli").test[1].submission, "MNLI-mm.tsv");
  EXPECT_EQ(glue_task("cola").metrics, std::vector<GlueMetric>{GlueMetric::matthews_correlation});
  EXPECT_TRUE(glue_task("sst2").single_sentence());
  expect_error([] { glue_task("squad"); }, "unknown --task_name 'squad' (GLUE tasks: cola, sst2, mrpc");
}

TEST(GlueTasks, ColaTrainHasNoHeaderAndItsTestHasOne) {
  const GlueDataset train =
      parse("cola", "gj04\t1\t\tOur friends won't buy this analysis.\nclc95\t0\t*\tThe more.\n");
  ASSERT_EQ(train.rows.size(), 2u);
  EXPECT_TRUE(train.single_sentence);
  EXPECT_EQ(train.rows[0].sentence1, "Our friends won't buy this analysis.");
  EXPECT_EQ(train.rows[0].label, 1);
  EXPECT_EQ(train.rows[1].label, 0);
  EXPECT_EQ(train.rows[1].line, 2);
  const GlueDataset test =
      parse("cola", "index\tsentence\n0\tBill whistled.\n7\tHe left.\n", GlueFileRole::test);
  ASSERT_EQ(test.rows.size(), 2u);
  EXPECT_FALSE(test.labeled);
  EXPECT_EQ(test.rows[1].index, 7);
  EXPECT_EQ(test.rows[1].sentence1, "He left.");
  expect_error([] { parse("cola", "gj04\t1\tOur friends.\n"); },
               "cola.tsv:1: expected 4 tab-separated fields");
  expect_error([] { parse("cola", "gj04\t2\t\tx\n"); },
               "cola.tsv:1: cola label must be one of 0, 1, got '2'");
}

TEST(GlueTasks, Sst2AndQnliAndRteAndWnli) {
  const GlueDataset sst = parse("sst2", "sentence\tlabel\nhide new secretions \t0\nwarm , funny \t1\n");
  EXPECT_EQ(sst.rows.size(), 2u);
  EXPECT_EQ(sst.rows[1].label, 1);
  EXPECT_TRUE(sst.single_sentence);
  const GlueDataset qnli =
      parse("qnli", "index\tquestion\tsentence\tlabel\n0\tWhen?\tThen.\tnot_entailment\n");
  EXPECT_EQ(qnli.rows[0].label, 1);
  EXPECT_EQ(qnli.rows[0].sentence2, "Then.");
  const GlueDataset rte = parse("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n");
  EXPECT_EQ(rte.rows[0].label, 0);
  const GlueDataset wnli = parse("wnli", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\t1\n");
  EXPECT_EQ(wnli.rows[0].label, 1);
  // A file of another task names the layout expected.
  expect_error([] { parse("sst2", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\t1\n"); },
               "sst2.tsv:1: header column 1 must be 'sentence', got 'index'; sst2 files have a header with "
               "'sentence' in column 1, 'label' in column 2");
  expect_error([] { parse("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tmaybe\n"); },
               "rte.tsv:2: rte label must be one of entailment, not_entailment, got 'maybe'");
}

TEST(GlueTasks, MnliLabelIsTheLastColumnInTrainAndDev) {
  const std::string head =
      "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\tlabel1\t";
  const GlueDataset train =
      parse("mnli", head + "gold_label\n0\t1\t2\tg\t.\t.\t.\t.\tA.\tB.\tneutral\tneutral\n");
  EXPECT_EQ(train.rows[0].label, 1);
  EXPECT_EQ(train.rows[0].sentence1, "A.");
  const GlueDataset dev = parse("mnli", head + "label2\tlabel3\tlabel4\tlabel5\tgold_label\n" +
                                            "0\t1\t2\tg\t.\t.\t.\t.\tA.\tB.\tx\tx\tx\tx\tx\tcontradiction\n");
  EXPECT_EQ(dev.rows[0].label, 2);
  const GlueDataset test = parse("mnli",
                                 "index\tpromptID\tpairID\tgenre\ts1b\ts2b\ts1p\ts2p\tsentence1\tsentence2\n4"
                                 "\t1\t2\tg\t.\t.\t.\t.\tA.\tB.\n",
                                 GlueFileRole::test);
  EXPECT_EQ(test.rows[0].index, 4);
  EXPECT_EQ(test.rows[0].sentence2, "B.");
}

TEST(GlueTasks, StsbScoresAreRegressionTargets) {
  const std::string head =
      "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n";
  const GlueDataset d =
      parse("stsb", head + "0\tg\tf\t2012\t1\tnone\tnone\tA plane.\tAn air plane.\t5.000\n" +
                        "1\tg\tf\t2012\t4\tnone\tnone\tA man.\tA cat.\t0.5\n");
  EXPECT_TRUE(d.regression);
  EXPECT_FLOAT_EQ(d.rows[0].score, 5.0f);
  EXPECT_FLOAT_EQ(d.rows[1].score, 0.5f);
  EXPECT_EQ(d.rows[1].label, -1);
  expect_error([&] { parse("stsb", head + "0\tg\tf\t2012\t1\tnone\tnone\tA.\tB.\thigh\n"); },
               "stsb.tsv:2: stsb score must be a number, got 'high'");
}

TEST(GlueTasks, QqpSkipsRowsWithMissingFieldsAndCountsThem) {
  const std::string text =
      "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
      "0\t1\t2\tHow?\tWhy?\t0\n"
      "1\t3\t4\tWhat is it?\n"  // missing question2 and the label: HF's processor skipped this row
      "2\t5\t6\tWho?\tWhom?\t1\n"
      "3\t7\n";
  const GlueDataset d = parse("qqp", text);
  ASSERT_EQ(d.rows.size(), 2u);
  EXPECT_EQ(d.skipped_rows, 2);
  EXPECT_EQ(d.first_skipped_line, 3);
  EXPECT_EQ(d.rows[1].sentence1, "Who?");
  EXPECT_EQ(d.rows[1].label, 1);
  const GlueDataset test = parse("qqp", "id\tquestion1\tquestion2\n9\tA?\tB?\n", GlueFileRole::test);
  EXPECT_EQ(test.rows[0].index, 9);
  // Other tasks still refuse a short row.
  expect_error([] { parse("rte", "index\tsentence1\tsentence2\tlabel\n0\tA.\tentailment\n"); },
               "rte.tsv:2: expected 4 tab-separated fields (as the header), got 3");
}

TEST(GlueTasks, MrpcGoesThroughTheMrpcReader) {
  const GlueDataset d = parse("mrpc", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA.\tB.\n");
  EXPECT_EQ(d.rows[0].label, 1);
  EXPECT_FALSE(d.single_sentence);
}

TEST(GlueTasks, EmptyAndMissingFilesAreErrors) {
  expect_error([] { parse("sst2", ""); },
               "sst2.tsv: empty file (expected sst2 rows: a header with 'sentence'");
  expect_error([] { parse("sst2", "sentence\tlabel\n"); }, "sst2.tsv: no data rows");
  expect_error([] { read_glue_task_tsv("/nonexistent/dev.tsv", glue_task("sst2"), GlueFileRole::labeled); },
               "cannot open GLUE TSV file '/nonexistent/dev.tsv'");
}

TEST(GlueTasks, SingleSentenceRowsEncodeAsClsASep) {
  const Tokenizer tok(std::string(ZT_DATA_DIR) + "/spm8k.model");
  const GlueDataset sst = parse("sst2", "sentence\tlabel\ngood movie\t1\n");
  const EncodedDataset encoded(sst, tok, 32);
  const auto pieces = tok.encode("good movie");
  std::vector<int32_t> expected{tok.cls_id()};
  expected.insert(expected.end(), pieces.begin(), pieces.end());
  expected.push_back(tok.sep_id());
  const auto ids = encoded.ids(0);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end()), expected);
}

}  // namespace
}  // namespace zt::data
