// --model_name_or_path forms: a model file, a directory with model.h5, an HF checkpoint directory converted
// on the fly into a cache that is reused until the checkpoint's files change.
#include "model/model_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "model/model_file.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

TEST(ModelSource, HfDirectoryIsConvertedOnceAndReusedUntilItChanges) {
  const fs::path dir = fs::temp_directory_path() / ("zt_model_source_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path hf = dir / "deberta-v3-tiny";
  fs::copy(test::fixture_path("hf_tiny_v3"), hf);
  EXPECT_TRUE(is_hf_checkpoint_dir(hf.string()));

  const ModelSource first = resolve_model_source(hf.string(), (dir / "cache").string());
  EXPECT_TRUE(first.converted);
  EXPECT_EQ(first.model_file, (dir / "cache" / "model.h5").string());
  EXPECT_EQ(first.tokenizer, (dir / "cache" / "spm.model").string());
  EXPECT_EQ(ModelFile(first.model_file).config().num_labels, 3);

  const ModelSource again = resolve_model_source(hf.string(), (dir / "cache").string());
  EXPECT_FALSE(again.converted);
  EXPECT_TRUE(again.from_cache);

  std::ofstream(hf / "config.json", std::ios::app) << "\n";  // a changed file: converted again
  EXPECT_TRUE(resolve_model_source(hf.string(), (dir / "cache").string()).converted);

  // A run directory (model.h5) and a model file resolve to themselves.
  EXPECT_EQ(resolve_model_source((dir / "cache").string(), "unused").model_file, first.model_file);
  EXPECT_EQ(resolve_model_source(first.model_file, "unused").model_file, first.model_file);
  fs::create_directories(dir / "empty");
  EXPECT_THROW(resolve_model_source((dir / "empty").string(), "unused"), Error);
  std::ofstream(dir / "empty" / "config.json") << "{}";
  try {
    resolve_model_source((dir / "empty").string(), "unused");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json but no weights"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zt
