// Config files a hostile or careless user writes: nesting deep enough to overflow a recursive parser.
#include <gtest/gtest.h>

#include <string>

#include "app/config/train_config.h"
#include "tests/app/config_test_support.h"
#include "tests/support/error_matchers.h"

namespace zt::optim {
namespace {

using config_test::inputs;
using config_test::write_temp;

TEST(ConfigNesting, DeepJsonEndsWithOneLine) {
  // 100k levels: without a bound the message printing the value (and yaml-cpp below) recurse per level.
  const std::string deep =
      R"({"train_batch_size": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  TrainConfig config = TrainConfig::from_args({});
  EXPECT_ERROR_HAS(config.resolve_with_json_text(deep, "deep.json", inputs()), "deep.json",
                   "train_batch_size", "nested more than 64 levels");
  std::string objects = "{";
  for (int i = 0; i < 100000; ++i) objects += R"("b": {)";
  TrainConfig unclosed = TrainConfig::from_args({});
  EXPECT_ERROR_HAS(unclosed.resolve_with_json_text(objects, "objects.json", inputs()), "nested more than");
}

TEST(ConfigNesting, ShallowJsonStillParses) {
  std::string nested = "1";
  for (int i = 0; i < 60; ++i) nested = "[" + nested + "]";
  TrainConfig config = TrainConfig::from_args({});
  // 61 levels with the top object: parsed, then refused as a value of the wrong type, with the value shown.
  EXPECT_ERROR_HAS(
      config.resolve_with_json_text(R"({"train_batch_size": )" + nested + "}", "t.json", inputs()),
      "train_batch_size' must be an integer");
}

TEST(ConfigNesting, DeepYamlEndsWithOneLine) {
  const std::string flow = "distributed_type: " + std::string(100000, '[') + "\n";
  EXPECT_ERROR_HAS(TrainConfig::from_args({"--config_file", write_temp("flow.yaml", flow)}), "flow.yaml",
                   "line 1 nests more than 64 levels");
  std::string dashes = "deepspeed_config:\n  ";
  for (int i = 0; i < 100000; ++i) dashes += "- ";
  dashes += "x\n";
  EXPECT_ERROR_HAS(TrainConfig::from_args({"--config_file", write_temp("dashes.yaml", dashes)}),
                   "line 2 nests more than 64 levels");
  std::string indented = "a:\n";
  for (int i = 1; i < 1000; ++i) indented += std::string(i, ' ') + "b:\n";
  EXPECT_ERROR_HAS(TrainConfig::from_args({"--config_file", write_temp("indented.yaml", indented)}),
                   "nests more than 64 levels");
  // Brackets in quotes and comments are not nesting.
  const std::string quoted = "distributed_type: 'NO'  # " + std::string(100, '[') +
                             "\nmain_training_function: \"" + std::string(100, '{') + "\"\n";
  const std::string message = test::error_of([&] {
    TrainConfig::from_args({"--config_file", write_temp("quoted.yaml", quoted)});
  });
  EXPECT_EQ(message.find("nests"), std::string::npos) << message;
}

}  // namespace
}  // namespace zt::optim
