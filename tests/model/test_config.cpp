// DebertaConfig parsing: real Hub config.json texts (written from the reference table, deberta-v2.md §1.1),
// the fixtures' HF-written configs, derived constants, presets, export round trip, and every error case.
#include "model/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/parameters.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt {
namespace {

// microsoft/deberta-v2-xlarge-mnli config.json as §1.1 describes it (with the label fields of the current
// revision and Microsoft's "pooling" object, which HF ignores).
const char* kXlargeMnliJson = R"({
  "model_type": "deberta-v2",
  "attention_head_size": 64,
  "attention_probs_dropout_prob": 0.1,
  "conv_act": "gelu",
  "conv_kernel_size": 3,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 1536,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "layer_norm_eps": 1e-7,
  "max_position_embeddings": 512,
  "max_relative_positions": -1,
  "norm_rel_ebd": "layer_norm",
  "num_attention_heads": 24,
  "num_hidden_layers": 24,
  "pooling": {"dropout": 0, "hidden_act": "gelu"},
  "pos_att_type": "p2c|c2p",
  "position_biased_input": false,
  "position_buckets": 256,
  "relative_attention": true,
  "share_att_key": true,
  "type_vocab_size": 0,
  "vocab_size": 128100,
  "num_labels": 3,
  "id2label": {"0": "CONTRADICTION", "1": "NEUTRAL", "2": "ENTAILMENT"},
  "label2id": {"CONTRADICTION": 0, "ENTAILMENT": 2, "NEUTRAL": 1}
})";

// microsoft/deberta-v2-xxlarge config.json (§1.1): 48 layers, no labels, no pooling object.
const char* kXxlargeJson = R"({
  "model_type": "deberta-v2",
  "attention_head_size": 64,
  "attention_probs_dropout_prob": 0.1,
  "conv_act": "gelu",
  "conv_kernel_size": 3,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 1536,
  "initializer_range": 0.02,
  "intermediate_size": 6144,
  "layer_norm_eps": 1e-7,
  "max_position_embeddings": 512,
  "max_relative_positions": -1,
  "norm_rel_ebd": "layer_norm",
  "num_attention_heads": 24,
  "num_hidden_layers": 48,
  "pooler_dropout": 0,
  "pooler_hidden_act": "gelu",
  "pooler_hidden_size": 1536,
  "pos_att_type": ["p2c", "c2p"],
  "position_biased_input": false,
  "position_buckets": 256,
  "relative_attention": true,
  "share_att_key": true,
  "type_vocab_size": 0,
  "vocab_size": 128100
})";

// Replaces (or with value "" removes) one top-level key of a JSON text by reparsing through the parser's
// own library would hide bugs, so tests edit text: `with_key(json, "\"hidden_act\": \"gelu\"", "...")`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "test text has no '" << from << "'";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// Expects parse_deberta_config to throw a zt::Error whose message contains `needle`.
void expect_parse_error(const std::string& text, const std::string& needle) {
  try {
    parse_deberta_config(text);
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "error '" << e.what() << "' does not mention '" << needle << "'";
  }
}

TEST(DebertaConfig, ParsesXlargeMnli) {
  const DebertaConfig c = parse_deberta_config(kXlargeMnliJson);
  EXPECT_EQ(c.vocab_size, 128100);
  EXPECT_EQ(c.hidden_size, 1536);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 24);
  EXPECT_EQ(c.head_size(), 64);
  EXPECT_EQ(c.intermediate_size, 6144);
  EXPECT_EQ(c.hidden_act, "gelu");
  EXPECT_DOUBLE_EQ(c.hidden_dropout_prob, 0.1);
  EXPECT_DOUBLE_EQ(c.attention_probs_dropout_prob, 0.1);
  EXPECT_DOUBLE_EQ(c.layer_norm_eps, 1e-7);
  EXPECT_TRUE(c.relative_attention);
  EXPECT_FALSE(c.position_biased_input);
  EXPECT_TRUE(c.share_att_key);
  EXPECT_TRUE(c.c2p);
  EXPECT_TRUE(c.p2c);
  EXPECT_TRUE(c.rel_embeddings_layer_norm);
  EXPECT_EQ(c.conv_kernel_size, 3);
  EXPECT_EQ(c.conv_act, "gelu");
  EXPECT_TRUE(c.has_conv());
  EXPECT_EQ(c.num_labels, 3);
  EXPECT_EQ(c.id2label, (std::vector<std::string>{"CONTRADICTION", "NEUTRAL", "ENTAILMENT"}));
  EXPECT_EQ(c.label2id.at("ENTAILMENT"), 2);
  EXPECT_EQ(c.pooling_json, R"({"dropout":0,"hidden_act":"gelu"})");
  // HF defaults for what the file leaves out.
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.pooler_hidden_size, 1536);
  EXPECT_DOUBLE_EQ(c.pooler_dropout, 0.0);
  EXPECT_EQ(c.pooler_hidden_act, "gelu");
  EXPECT_FALSE(c.cls_dropout.has_value());
  EXPECT_DOUBLE_EQ(c.classifier_dropout(), 0.1);  // cls_dropout absent ⇒ hidden_dropout_prob
  EXPECT_EQ(c.embedding_size, 1536);
  EXPECT_EQ(c.conv_groups, 1);
  EXPECT_FALSE(c.problem_type.has_value());
}

TEST(DebertaConfig, DerivedAttentionConstants) {
  const DebertaConfig c = parse_deberta_config(kXlargeMnliJson);
  EXPECT_EQ(c.max_relative_positions, -1);
  EXPECT_EQ(c.resolved_max_relative_positions(), 512);  // < 1 ⇒ max_position_embeddings
  EXPECT_EQ(c.att_span(), 256);                         // position_buckets
  EXPECT_EQ(c.rel_embedding_rows(), 512);
  EXPECT_EQ(c.scale_factor(), 3);
  EXPECT_EQ(c.attention_scale(), 13.856406211853027f);  // sqrt(192) in fp32 (§1.1)

  // Without buckets the span is the resolved maximum; one attention type gives scale factor 2.
  const DebertaConfig no_buckets = parse_deberta_config(
      replaced(replaced(kXlargeMnliJson, "\"position_buckets\": 256", "\"position_buckets\": -1"),
               "\"pos_att_type\": \"p2c|c2p\"", "\"pos_att_type\": \" C2P \""));
  EXPECT_EQ(no_buckets.att_span(), 512);
  EXPECT_EQ(no_buckets.rel_embedding_rows(), 1024);
  EXPECT_TRUE(no_buckets.c2p);
  EXPECT_FALSE(no_buckets.p2c);
  EXPECT_EQ(no_buckets.scale_factor(), 2);
  const DebertaConfig explicit_max = parse_deberta_config(
      replaced(replaced(kXlargeMnliJson, "\"position_buckets\": 256", "\"position_buckets\": 0"),
               "\"max_relative_positions\": -1", "\"max_relative_positions\": 128"));
  EXPECT_EQ(explicit_max.att_span(), 128);
}

TEST(DebertaConfig, ParsesXxlargeWithListPosAttTypeAndDefaultLabels) {
  const DebertaConfig c = parse_deberta_config(kXxlargeJson);
  EXPECT_EQ(c.num_hidden_layers, 48);
  EXPECT_TRUE(c.c2p && c.p2c);
  EXPECT_EQ(c.num_labels, 2);  // HF default
  EXPECT_EQ(c.id2label, (std::vector<std::string>{"LABEL_0", "LABEL_1"}));
  EXPECT_EQ(c.label2id.at("LABEL_1"), 1);
  EXPECT_FALSE(c.pooling_json.has_value());
}

TEST(DebertaConfig, AcceptsGenericHfKeysAndBookkeeping) {
  const std::string text =
      replaced(kXxlargeJson, "\"model_type\": \"deberta-v2\",", R"("model_type": "deberta-v2",
  "_name_or_path": "microsoft/deberta-v2-xxlarge", "architectures": ["DebertaV2ForMaskedLM"],
  "torch_dtype": "float16", "transformers_version": "4.57.1", "return_dict": true, "output_hidden_states": false,
  "chunk_size_feed_forward": 0, "tie_word_embeddings": true, "legacy": true, "bos_token_id": 1,
  "eos_token_id": [2, 3], "pad_token_id": 0, "problem_type": "single_label_classification",
  "pruned_heads": {}, "cls_dropout": 0.2,)");
  const DebertaConfig c = parse_deberta_config(text);
  EXPECT_EQ(c.name_or_path, "microsoft/deberta-v2-xxlarge");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"DebertaV2ForMaskedLM"});
  EXPECT_EQ(c.dtype, "float16");
  EXPECT_EQ(c.transformers_version, "4.57.1");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c.problem_type, "single_label_classification");
  EXPECT_DOUBLE_EQ(c.classifier_dropout(), 0.2);
  // v5 writes "dtype"; a null pad_token_id means no padding row.
  const DebertaConfig v5 =
      parse_deberta_config(replaced(text, "\"torch_dtype\": \"float16\"", "\"dtype\": \"bfloat16\""));
  EXPECT_EQ(v5.dtype, "bfloat16");
  const DebertaConfig no_pad =
      parse_deberta_config(replaced(text, "\"pad_token_id\": 0", "\"pad_token_id\": null"));
  EXPECT_FALSE(no_pad.pad_token_id.has_value());
}

TEST(DebertaConfig, ParsesTheConfigsHfWroteForTheFixtures) {
  for (const char* file : {"deberta_tiny.h5", "deberta_xlarge_layout.h5"}) {
    test::Fixture f(file);
    for (const char* attr : {"config_json", "config_json_full"}) {
      SCOPED_TRACE(std::string(file) + " " + attr);
      const DebertaConfig c = parse_deberta_config(f.attr_str(attr));
      EXPECT_TRUE(c.relative_attention && c.share_att_key && c.c2p && c.p2c && c.rel_embeddings_layer_norm);
      EXPECT_EQ(c.num_hidden_layers, 2);
      EXPECT_DOUBLE_EQ(c.hidden_dropout_prob, 0.0);
      EXPECT_DOUBLE_EQ(c.classifier_dropout(), 0.0);
      EXPECT_EQ(c.transformers_version.has_value(), true);
    }
  }
  const DebertaConfig tiny = parse_deberta_config(test::Fixture("deberta_tiny.h5").attr_str("config_json"));
  EXPECT_EQ(tiny.hidden_size, 32);
  EXPECT_EQ(tiny.head_size(), 16);
  EXPECT_EQ(tiny.att_span(), 8);
  EXPECT_EQ(tiny.rel_embedding_rows(), 16);
  EXPECT_EQ(tiny.attention_scale(), std::sqrt(48.0f));
}

TEST(DebertaConfig, PresetsAreValidAndRoundTripThroughJson) {
  for (const DebertaConfig& c : {deberta_v2_xlarge_config(), deberta_small_cpu_config()}) {
    const std::string text = c.to_json();
    const DebertaConfig back = parse_deberta_config(text);
    EXPECT_EQ(back, c) << text;
    EXPECT_EQ(back.num_labels, 2);
    EXPECT_EQ(back.id2label, (std::vector<std::string>{"not_equivalent", "equivalent"}));
  }
  const DebertaConfig xl = deberta_v2_xlarge_config();
  DebertaConfig mnli_as_mrpc = parse_deberta_config(kXlargeMnliJson);
  mnli_as_mrpc.num_labels = 2;
  mnli_as_mrpc.id2label = {"not_equivalent", "equivalent"};
  mnli_as_mrpc.label2id = {{"not_equivalent", 0}, {"equivalent", 1}};
  mnli_as_mrpc.pooling_json.reset();
  mnli_as_mrpc.architectures = {"DebertaV2ForSequenceClassification"};
  mnli_as_mrpc.name_or_path = "microsoft/deberta-v2-xlarge-mnli";
  EXPECT_EQ(xl, mnli_as_mrpc);
  const DebertaConfig small = deberta_small_cpu_config();
  EXPECT_EQ(small.vocab_size, 8000);
  EXPECT_EQ(small.head_size(), 64);
  EXPECT_EQ(small.att_span(), 64);
  // A config with every optional field set survives export too.
  DebertaConfig full = parse_deberta_config(kXlargeMnliJson);
  full.cls_dropout = 0.2;
  full.eos_token_ids = {2};
  full.bos_token_id = 1;
  full.dtype = "float16";
  full.problem_type = "regression";
  EXPECT_EQ(parse_deberta_config(full.to_json()), full);
}

TEST(DebertaConfig, UnknownKeyIsAnErrorNamingIt) {
  expect_parse_error(
      replaced(kXxlargeJson, "\"vocab_size\": 128100", "\"vocab_size\": 128100, \"hiden_size\": 3"),
      "unknown key 'hiden_size'");
}

TEST(DebertaConfig, WrongTypesAndBadJsonAreErrors) {
  expect_parse_error(replaced(kXxlargeJson, "\"hidden_size\": 1536", "\"hidden_size\": \"1536\""),
                     "'hidden_size' must be an integer");
  expect_parse_error(replaced(kXxlargeJson, "\"share_att_key\": true", "\"share_att_key\": 1"),
                     "'share_att_key' must be true or false");
  expect_parse_error(replaced(kXxlargeJson, "\"layer_norm_eps\": 1e-7", "\"layer_norm_eps\": \"1e-7\""),
                     "'layer_norm_eps' must be a number");
  expect_parse_error("{\"vocab_size\": 1,", "not valid JSON");
  expect_parse_error("[1, 2]", "must be a JSON object");
  EXPECT_THROW(load_deberta_config("/nonexistent/config.json"), Error);
}

TEST(DebertaConfig, ContradictoryValuesAreErrors) {
  expect_parse_error(replaced(kXxlargeJson, "\"num_attention_heads\": 24", "\"num_attention_heads\": 25"),
                     "not a multiple of num_attention_heads 25");
  expect_parse_error(replaced(kXxlargeJson, "\"attention_head_size\": 64", "\"attention_head_size\": 32"),
                     "attention_head_size 32");
  expect_parse_error(replaced(kXlargeMnliJson, "\"num_labels\": 3", "\"num_labels\": 2"),
                     "num_labels 2 contradicts id2label");
  expect_parse_error(replaced(kXlargeMnliJson, "\"ENTAILMENT\": 2", "\"ENTAILMENT\": 0"),
                     "label2id maps 'ENTAILMENT'");
  expect_parse_error(replaced(kXlargeMnliJson, "\"2\": \"ENTAILMENT\"", "\"5\": \"ENTAILMENT\""),
                     "id2label' key '5'");
  expect_parse_error(replaced(kXxlargeJson, "\"hidden_dropout_prob\": 0.1", "\"hidden_dropout_prob\": 1.0"),
                     "hidden_dropout_prob = 1");
  expect_parse_error(replaced(kXxlargeJson, "\"pooler_hidden_size\": 1536", "\"pooler_hidden_size\": 1024"),
                     "pooler_hidden_size 1024");
  expect_parse_error(replaced(kXxlargeJson, "\"model_type\": \"deberta-v2\"", "\"model_type\": \"deberta\""),
                     "model_type 'deberta'");
  expect_parse_error(
      replaced(kXxlargeJson, "\"vocab_size\": 128100", "\"vocab_size\": 128100, \"pad_token_id\": 200000"),
      "pad_token_id 200000");
  expect_parse_error(replaced(kXxlargeJson, "\"vocab_size\": 128100",
                              "\"vocab_size\": 128100, \"problem_type\": \"ranking\""),
                     "problem_type 'ranking'");
}

TEST(DebertaConfig, UnsupportedModelVariantsSayWhat) {
  expect_parse_error(replaced(kXxlargeJson, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\""),
                     "hidden_act 'relu' is not supported");
  expect_parse_error(replaced(kXxlargeJson, "\"conv_act\": \"gelu\"", "\"conv_act\": \"tanh\""),
                     "conv_act 'tanh' is not supported");
  expect_parse_error(replaced(kXxlargeJson, "\"relative_attention\": true", "\"relative_attention\": false"),
                     "relative_attention = false is not supported");
  expect_parse_error(
      replaced(kXxlargeJson, "\"position_biased_input\": false", "\"position_biased_input\": true"),
      "position_biased_input = true is not supported");
  expect_parse_error(replaced(kXxlargeJson, "\"share_att_key\": true", "\"share_att_key\": false"),
                     "share_att_key = false is not supported");
  expect_parse_error(replaced(kXxlargeJson, "\"type_vocab_size\": 0", "\"type_vocab_size\": 2"),
                     "type_vocab_size 2 is not supported");
  expect_parse_error(
      replaced(kXxlargeJson, "\"pos_att_type\": [\"p2c\", \"c2p\"]", "\"pos_att_type\": \"p2p|c2p\""),
      "unsupported entry 'p2p'");
  expect_parse_error(
      replaced(kXxlargeJson, "\"norm_rel_ebd\": \"layer_norm\"", "\"norm_rel_ebd\": \"batch_norm\""),
      "unsupported entry 'batch_norm'");
  expect_parse_error(replaced(kXxlargeJson, "\"conv_kernel_size\": 3", "\"conv_kernel_size\": 4"),
                     "conv_kernel_size 4 is not supported");
  expect_parse_error(
      replaced(kXxlargeJson, "\"vocab_size\": 128100", "\"vocab_size\": 128100, \"embedding_size\": 512"),
      "embed_proj");
  expect_parse_error(replaced(kXxlargeJson, "\"vocab_size\": 128100",
                              "\"vocab_size\": 128100, \"pruned_heads\": {\"0\": [1]}"),
                     "pruned attention heads are not supported");
  // DebertaV2Config's own defaults describe an absolute-position model, so an empty config is rejected.
  expect_parse_error("{}", "relative_attention = false is not supported");
}

TEST(DebertaConfig, ImpliedParameterCountIsTheTablesTotal) {
  DebertaConfig no_conv = deberta_small_cpu_config();
  no_conv.conv_kernel_size = 0;
  no_conv.rel_embeddings_layer_norm = false;
  no_conv.num_labels = 3;
  no_conv.id2label = {"a", "b", "c"};
  no_conv.label2id = {{"a", 0}, {"b", 1}, {"c", 2}};
  for (const DebertaConfig& c : {deberta_v2_xlarge_config(), deberta_small_cpu_config(), no_conv}) {
    EXPECT_EQ(c.implied_parameter_count(), static_cast<double>(ParameterTable(c).total_numel()))
        << c.name_or_path.value_or("");
  }
}

// num_hidden_layers 1e6 ran for a minute and 6.5 GB before std::bad_alloc: now the parse refuses it at
// once, naming the keys and the memory the parameters would take.
TEST(DebertaConfig, AbsurdDimensionsAreRefusedBeforeAnythingIsBuilt) {
  const auto start = std::chrono::steady_clock::now();
  expect_parse_error(replaced(kXxlargeJson, "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 1000000"),
                     "num_hidden_layers 1000000 x (hidden_size 1536, intermediate_size 6144) alone is");
  expect_parse_error(replaced(kXxlargeJson, "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 1000000"),
                     "TiB as f32), over the limit of 1 TiB");
  expect_parse_error(
      replaced(replaced(replaced(kXxlargeJson, "\"hidden_size\": 1536", "\"hidden_size\": 10000000"),
                        "\"pooler_hidden_size\": 1536", "\"pooler_hidden_size\": 10000000"),
               "\"num_hidden_layers\": 48", "\"num_hidden_layers\": 1"),
      "hidden_size 10000000");
  expect_parse_error(replaced(kXxlargeJson, "\"vocab_size\": 128100", "\"vocab_size\": 9223372036854775807"),
                     "vocab_size 9223372036854775807 x hidden_size 1536 alone is");
  expect_parse_error(
      replaced(kXxlargeJson, "\"position_buckets\": 256", "\"position_buckets\": 4611686018427387904"),
      "the relative position table");
  expect_parse_error(
      replaced(kXxlargeJson, "\"vocab_size\": 128100", "\"vocab_size\": 128100, \"num_labels\": 100000000"),
      "num_labels 100000000 is over the limit");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           str("zt_config_", getpid(), "_", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static std::string error_message(const std::string& path) {
    try {
      load_deberta_config(path);
    } catch (const Error& e) {
      return e.message();
    }
    return "(no error)";
  }
  std::filesystem::path dir_;
};

// /dev/zero as config.json grew memory until killed; a directory read as empty.
TEST_F(ConfigFileTest, OversizedFilesAndDirectoriesAreRefusedNamingThem) {
  EXPECT_NE(error_message("/dev/zero").find("config file /dev/zero is larger than the limit of 16 MiB"),
            std::string::npos)
      << error_message("/dev/zero");
  EXPECT_NE(error_message(dir_.string()).find(dir_.string() + " is a directory"), std::string::npos)
      << error_message(dir_.string());
  EXPECT_NE(error_message((dir_ / "absent.json").string()).find("No such file"), std::string::npos);
}

// An error inside the config is reported with the file's name and the parser's message only; the failed
// check and source location are in what() (ZT_VERBOSE_ERRORS), not in the message a user sees.
TEST_F(ConfigFileTest, ErrorsNameTheFileWithoutInternals) {
  const std::string path = (dir_ / "config.json").string();
  std::ofstream(path) << replaced(kXxlargeJson, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"relu\"");
  const std::string message = error_message(path);
  EXPECT_NE(message.find("in " + path + ": config hidden_act 'relu' is not supported"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("check failed"), std::string::npos) << message;
  EXPECT_EQ(message.find(".cpp:"), std::string::npos) << message;
}

}  // namespace
}  // namespace zt
