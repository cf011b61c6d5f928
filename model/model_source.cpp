#include "model/model_source.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/hf_checkpoint.h"
#include "runtime/check.h"

namespace zt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeightFiles[] = {"model.safetensors", "model.safetensors.index.json",
                                        "pytorch_model.bin", "pytorch_model.bin.index.json"};

// Names, sizes and modification times of the checkpoint's files: what a cached conversion depends on.
nlohmann::json source_stamp(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    const bool relevant = name == "config.json" || name == "spm.model" || name.ends_with(".safetensors") ||
                          name.ends_with(".bin") || name.ends_with(".index.json");
    if (!relevant) continue;
    const auto mtime = entry.last_write_time().time_since_epoch();
    files[name] = {{"bytes", entry.file_size()},
                   {"mtime_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(mtime).count()}};
  }
  return {{"source", fs::absolute(dir).lexically_normal().string()}, {"files", files}};
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ModelSource beside(const fs::path& model_file) {
  ModelSource out;
  out.model_file = model_file.string();
  const fs::path spm = model_file.parent_path() / "spm.model";
  if (fs::exists(spm)) out.tokenizer = spm.string();
  return out;
}

}  // namespace

bool is_hf_checkpoint_dir(const std::string& dir) {
  const fs::path path(dir);
  if (!fs::is_directory(path) || fs::exists(path / "model.h5") || !fs::exists(path / "config.json"))
    return false;
  for (const char* name : kWeightFiles) {
    if (fs::exists(path / name)) return true;
  }
  return false;
}

ModelSource resolve_model_source(const std::string& file_or_dir, const std::string& cache_dir) {
  const fs::path path(file_or_dir);
  if (!fs::is_directory(path)) {
    ZT_CHECK(fs::exists(path), "--model_name_or_path ", file_or_dir, ": no such file or directory");
    return beside(path);
  }
  if (fs::exists(path / "model.h5")) return beside(path / "model.h5");
  ZT_CHECK(fs::exists(path / "config.json"), "--model_name_or_path ", file_or_dir,
           ": the directory holds neither model.h5 (a zerotrain model) nor config.json (an HF checkpoint)");
  ZT_CHECK(is_hf_checkpoint_dir(file_or_dir), "--model_name_or_path ", file_or_dir,
           ": config.json but no weights (model.safetensors, model.safetensors.index.json, pytorch_model.bin "
           "or pytorch_model.bin.index.json)");
  const fs::path cache(cache_dir);
  const fs::path model_file = cache / "model.h5", stamp_file = cache / "source.json";
  const nlohmann::json stamp = source_stamp(path);
  if (fs::exists(model_file) && fs::exists(stamp_file)) {
    nlohmann::json cached;
    try {
      cached = nlohmann::json::parse(read_text(stamp_file));
    } catch (const nlohmann::json::exception&) {
      cached = nullptr;  // a damaged stamp: convert again
    }
    if (cached == stamp) {
      ModelSource out = beside(model_file);
      out.from_cache = true;
      return out;
    }
  }
  std::error_code error;
  fs::create_directories(cache, error);
  ZT_CHECK(!error, "cannot create ", cache.string(), " for the converted checkpoint: ", error.message());
  fs::remove(stamp_file, error);  // the stamp is written after the model: no stamp, no trust
  HfImportOptions options;
  options.show_progress = false;
  import_hf_checkpoint(file_or_dir, model_file.string(), options);
  {
    const fs::path temp = cache / "source.json.tmp";
    std::ofstream(temp) << stamp.dump(2) << "\n";
    fs::rename(temp, stamp_file);
  }
  ModelSource out = beside(model_file);
  out.converted = true;
  return out;
}

}  // namespace zt
