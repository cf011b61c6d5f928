// The zerotrain model file: save → open → load is bit-identical, 16-bit storage converts, and every mismatch
// between file and model (missing, extra, mis-shaped tensors; wrong format or version) is an error naming it.
#include "model/model_file.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>

#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "model/golden_init.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

DebertaConfig tiny_config() {
  return parse_deberta_config(test::Fixture("deberta_tiny.h5").attr_str("config_json"));
}

fs::path temp_dir() {
  fs::path dir =
      fs::temp_directory_path() / ("zt_model_file_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void fill_golden(const ParameterTable& table, const Arena& params) {
  for (const ParameterInfo& p : table.entries()) {
    Tensor t = params.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), t.numel()));
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ModelFile, SaveOpenLoadIsBitIdentical) {
  fs::path dir = temp_dir();
  DebertaConfig config = tiny_config();
  ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  fill_golden(table, params);
  save_model_file((dir / "m.h5").string(), config, table, params);

  ModelFile file = open_model_file((dir / "m.h5").string());
  EXPECT_EQ(file.config(), config);
  EXPECT_EQ(file.h5().attribute_string("format"), "zerotrain-model");
  EXPECT_EQ(file.h5().attribute_int("format_version"), 1);
  Arena loaded("loaded", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true});
  file.load_params(loaded);
  EXPECT_EQ(std::memcmp(loaded.data(), params.data(), params.bytes()), 0);
  fs::remove_all(dir);
}

TEST(ModelFile, Bf16StorageLoadsIntoAnyFloatArena) {
  fs::path dir = temp_dir();
  DebertaConfig config = tiny_config();
  ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  fill_golden(table, params);
  {
    ModelFileWriter writer((dir / "m.h5").string(), config);
    for (const ParameterInfo& p : table.entries()) {
      std::vector<bf16> values(static_cast<size_t>(p.numel()));
      const float* src = params.tensor(p.name).data_as<float>();
      for (size_t i = 0; i < values.size(); ++i) values[i] = float_to_bf16(src[i]);
      writer.write(p.name, Tensor(values.data(), p.shape, DType::bf16));
    }
    writer.commit();
  }
  ModelFile file((dir / "m.h5").string());
  Arena as_f32("f32", table.layout(DType::f32));
  Arena as_bf16("bf16", table.layout(DType::bf16));
  file.load_params(as_f32);
  file.load_params(as_bf16);
  for (const ParameterInfo& p : table.entries()) {
    const float* ref = params.tensor(p.name).data_as<float>();
    const float* got = as_f32.tensor(p.name).data_as<float>();
    const bf16* got16 = as_bf16.tensor(p.name).data_as<bf16>();
    for (int64_t i = 0; i < p.numel(); ++i) {
      ASSERT_EQ(got[i], bf16_to_float(float_to_bf16(ref[i]))) << p.name << "[" << i << "]";
      ASSERT_EQ(got16[i].bits, float_to_bf16(ref[i]).bits) << p.name << "[" << i << "]";
    }
  }
  fs::remove_all(dir);
}

TEST(ModelFile, WriterRejectsUnknownMisshapedAndIncompleteWrites) {
  fs::path dir = temp_dir();
  DebertaConfig config = tiny_config();
  const std::string path = (dir / "m.h5").string();
  {
    ModelFileWriter writer(path, config);
    std::vector<float> v(32 * 32);
    EXPECT_NE(error_of([&] {
                writer.write("pooler.dense.weght", Tensor(v.data(), {32, 32}, DType::f32));
              }).find("'pooler.dense.weght' is not a parameter"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                writer.write("pooler.dense.weight", Tensor(v.data(), {32, 31}, DType::f32));
              }).find("needs [32, 32]"),
              std::string::npos);
    writer.write("pooler.dense.weight", Tensor(v.data(), {32, 32}, DType::f32));
    EXPECT_NE(error_of([&] { writer.commit(); }).find("deberta.embeddings.word_embeddings.weight"),
              std::string::npos);
  }
  EXPECT_FALSE(fs::exists(path)) << "an uncommitted writer must leave no file";
  fs::remove_all(dir);
}

// A hand-written file whose tensors differ from the table: one missing, one extra, one mis-shaped.
TEST(ModelFile, LoadNamesMissingExtraAndMisshapedTensors) {
  fs::path dir = temp_dir();
  DebertaConfig config = tiny_config();
  ParameterTable table(config);
  const std::string path = (dir / "m.h5").string();
  {
    AtomicH5Writer w(path);
    w.file().set_attribute("format", "zerotrain-model");
    w.file().set_attribute("format_version", int64_t{1});
    w.file().set_attribute("config_json", config.to_json());
    for (const ParameterInfo& p : table.entries()) {
      if (p.name == "classifier.bias") continue;  // missing
      Shape shape = p.name == "pooler.dense.bias" ? Shape{31} : p.shape;
      std::vector<float> v(static_cast<size_t>(shape.numel()), 0.5f);
      w.file().write("params/" + p.name, Tensor(v.data(), shape, DType::f32));
    }
    std::vector<float> extra(4);
    w.file().write("params/lm_predictions.lm_head.bias", Tensor(extra.data(), {4}, DType::f32));
    w.commit();
  }
  Arena params("params", table.layout(DType::f32));
  const std::string e = error_of([&] { open_model_file(path).load_params(params); });
  EXPECT_NE(e.find("missing: classifier.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected: lm_predictions.lm_head.bias"), std::string::npos) << e;
  EXPECT_NE(e.find("wrong shape: pooler.dense.bias (file [31], model [32])"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(ModelFile, RejectsOtherFilesAndVersions) {
  fs::path dir = temp_dir();
  const std::string path = (dir / "x.h5").string();
  {
    AtomicH5Writer w(path);
    w.file().set_attribute("format", "zerotrain-model");
    w.file().set_attribute("format_version", int64_t{2});
    w.file().set_attribute("config_json", tiny_config().to_json());
    w.commit();
  }
  EXPECT_NE(error_of([&] { open_model_file(path); }).find("format_version 2 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              open_model_file(test::fixture_path("deberta_tiny.h5"));
            }).find("is not a zerotrain model file"),
            std::string::npos);
  EXPECT_THROW(open_model_file((dir / "absent.h5").string()), Error);
  fs::remove_all(dir);
}

// A model file whose weights hold NaN (a diverged run, or a file without checksums that was damaged) is
// refused naming the tensor, rather than training or predicting on NaN.
TEST(ModelFile, NonFiniteWeightsAreRefusedNamingTheTensor) {
  fs::path dir = temp_dir();
  DebertaConfig config = tiny_config();
  ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  fill_golden(table, params);
  params.tensor("pooler.dense.bias").data_as<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  const std::string path = (dir / "nan.h5").string();
  save_model_file(path, config, table, params);
  Arena loaded("loaded", table.layout(DType::f32), {.kind = MemoryKind::host, .zero_fill = true});
  const std::string e = error_of([&] { open_model_file(path).load_params(loaded); });
  EXPECT_NE(e.find(path + ": tensor 'pooler.dense.bias' holds nan at element 3"), std::string::npos) << e;
  fs::remove_all(dir);
}

// A bad config_json inside a model file is reported with the model file's name and the config's own
// message, not with the inner check's statement and source location (those need ZT_VERBOSE_ERRORS).
TEST(ModelFile, BadStoredConfigIsReportedWithoutInternals) {
  fs::path dir = temp_dir();
  const std::string path = (dir / "bad_config.h5").string();
  {
    AtomicH5Writer w(path);
    w.file().set_attribute("format", "zerotrain-model");
    w.file().set_attribute("format_version", int64_t{1});
    w.file().set_attribute("config_json", "{\"model_type\": \"deberta-v2\", \"hidden_size\": -4}");
    w.commit();
  }
  try {
    open_model_file(path);
    ADD_FAILURE() << "a bad config_json was accepted";
  } catch (const Error& e) {
    const std::string message = e.message();
    EXPECT_NE(message.find(path + ": config_json: config sizes must be positive"), std::string::npos)
        << message;
    EXPECT_EQ(message.find("check failed"), std::string::npos) << message;
    EXPECT_EQ(message.find(".cpp:"), std::string::npos) << message;
    EXPECT_NE(std::string(e.what()).find("check failed"), std::string::npos)
        << "the report keeps the details";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
