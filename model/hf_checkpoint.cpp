#include "model/hf_checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <unordered_map>

#include "model/model_file.h"
#include "model/parameters.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/progress.h"
#include "runtime/text_file.h"

namespace zt {
namespace fs = std::filesystem;
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool same_shape(const std::vector<int64_t>& a, const Shape& b) {
  if (static_cast<int>(a.size()) != b.rank) return false;
  for (int i = 0; i < b.rank; ++i) {
    if (a[static_cast<size_t>(i)] != b[i]) return false;
  }
  return true;
}

std::vector<int64_t> dims_of(const Shape& s) {
  return std::vector<int64_t>(s.dims.begin(), s.dims.begin() + s.rank);
}

// Tensors of one weight file of the given format.
std::vector<CheckpointTensor> read_weight_file(const MappedFile& file) {
  return file.path().ends_with(".safetensors") ? read_safetensors(file.bytes(), file.path())
                                               : read_torch_checkpoint(file.bytes(), file.path());
}

// Copies `from` onto `to` so that `to` is never half written (runtime/atomic_file.h).
void copy_file_atomically(const fs::path& from, const fs::path& to) {
  atomic_write_file(to.string(), [&](const std::string& temp) {
    std::error_code error;
    fs::copy_file(from, temp, fs::copy_options::overwrite_existing, error);
    ZT_CHECK(!error, "cannot copy ", from.string(), " to ", temp, " (", error.message(), ")");
  });
}

// Writes a whole file through an ofstream, atomically; `write` fills the stream.
void write_file_atomically(const fs::path& target, const std::function<void(std::ofstream&)>& write) {
  atomic_write_file(target.string(), [&](const std::string& temp) {
    std::ofstream file(temp, std::ios::binary | std::ios::trunc);
    ZT_CHECK(file.good(), "cannot create ", temp);
    write(file);
    file.close();
    ZT_CHECK(!file.fail(), "cannot write ", temp, " (disk full?)");
  });
}

// HF's _init_weights for nn.Linear: N(0, std²) weights, zero bias. Box–Muller over a 64-bit Mersenne Twister
// (both fully specified by the standard), so the values are the same on every platform.
void init_linear_tensor(std::span<float> out, bool is_bias, double std_dev, std::mt19937_64& rng) {
  if (is_bias) {
    std::fill(out.begin(), out.end(), 0.0f);
    return;
  }
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  for (size_t i = 0; i < out.size(); i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double theta = 2.0 * M_PI * uniform();
    out[i] = static_cast<float>(std_dev * r * std::cos(theta));
    if (i + 1 < out.size()) out[i + 1] = static_cast<float>(std_dev * r * std::sin(theta));
  }
}

void store_floats(std::span<const float> values, const Tensor& dst) {
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dst.dtype()) {
      case DType::f32:
        static_cast<float*>(dst.data())[i] = values[i];
        break;
      case DType::bf16:
        static_cast<bf16*>(dst.data())[i] = float_to_bf16(values[i]);
        break;
      case DType::f16:
        static_cast<f16*>(dst.data())[i] = float_to_f16(values[i]);
        break;
      default:
        ZT_FAIL("unsupported model file dtype ", dtype_name(dst.dtype()));
    }
  }
}

ProgressOptions tensor_progress_options() {
  ProgressOptions options;
  options.unit = "tensors";
  return options;
}

}  // namespace

std::string map_hf_name(const std::string& name) {
  if (name.starts_with("bert.")) return "deberta." + name.substr(5);
  if (name.starts_with("embeddings.") || name.starts_with("encoder.")) return "deberta." + name;
  return name;
}

std::string ignored_tensor_reason(const std::string& name) {
  if (name == "deberta.embeddings.position_embeddings.weight") {
    return "absolute position embeddings are unused (position_biased_input is false)";
  }
  if (name == "deberta.embeddings.position_ids") return "position_ids is a buffer, not a parameter";
  if (name.starts_with("lm_predictions.") || name.starts_with("mask_predictions.")) {
    return "masked-LM head, unused by sequence classification";
  }
  return "";
}

HfWeights HfWeights::open(const std::string& dir) {
  HfWeights w;
  const fs::path root(dir);
  auto add_file = [&](const fs::path& path) {
    w.files_.push_back(std::make_unique<MappedFile>(path.string()));
    std::vector<CheckpointTensor> ts = read_weight_file(*w.files_.back());
    for (CheckpointTensor& t : ts) {
      w.tensors_.push_back(std::move(t));
      w.file_of_.push_back(w.files_.size() - 1);
    }
  };
  auto add_sharded = [&](const fs::path& index_path) {
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(read_text_file(index_path.string(), kMaxConfigFileBytes, "index file"));
    } catch (const nlohmann::json::exception& e) {
      ZT_FAIL(index_path.string(), ": not valid JSON: ", e.what());
    }
    ZT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             index_path.string(), ": no weight_map object");
    std::map<std::string, std::string> weight_map;  // tensor -> shard file
    std::set<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      ZT_CHECK(it->is_string(), index_path.string(), ": weight_map['", it.key(), "'] is not a file name");
      const std::string shard = it->get<std::string>();
      ZT_CHECK(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), index_path.string(),
               ": shard name '", shard, "' must be a file in the same directory");
      weight_map[it.key()] = shard;
      shards.insert(shard);
    }
    for (const std::string& shard : shards) {
      const size_t first = w.tensors_.size();
      add_file(root / shard);
      for (size_t i = first; i < w.tensors_.size(); ++i) {
        auto it = weight_map.find(w.tensors_[i].name);
        ZT_CHECK(it != weight_map.end() && it->second == shard, index_path.string(), ": tensor '",
                 w.tensors_[i].name, "' found in ", shard, " but the weight_map ",
                 it == weight_map.end() ? std::string("does not list it") : "puts it in " + it->second);
        weight_map.erase(it);
      }
    }
    std::string unlisted;
    for (const auto& [name, shard] : weight_map) unlisted += "\n  " + name + " (" + shard + ")";
    ZT_CHECK(unlisted.empty(), index_path.string(),
             ": tensors in weight_map missing from their shard:", unlisted);
    w.description_ = index_path.filename().string() + " (" + std::to_string(shards.size()) + " shards)";
  };

  if (fs::exists(root / "model.safetensors")) {
    add_file(root / "model.safetensors");
    w.description_ = "model.safetensors";
  } else if (fs::exists(root / "model.safetensors.index.json")) {
    add_sharded(root / "model.safetensors.index.json");
  } else if (fs::exists(root / "pytorch_model.bin")) {
    add_file(root / "pytorch_model.bin");
    w.description_ = "pytorch_model.bin (torch zip)";
  } else if (fs::exists(root / "pytorch_model.bin.index.json")) {
    add_sharded(root / "pytorch_model.bin.index.json");
  } else {
    ZT_FAIL(dir,
            " holds no model.safetensors, model.safetensors.index.json, pytorch_model.bin or "
            "pytorch_model.bin.index.json");
  }
  std::set<std::string> names;
  for (const CheckpointTensor& t : w.tensors_) {
    ZT_CHECK(names.insert(t.name).second, dir, ": tensor '", t.name, "' appears twice");
  }
  return w;
}

uint64_t HfWeights::file_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->bytes().size();
  return n;
}

void HfWeights::release(const CheckpointTensor& t) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (&tensors_[i] != &t) continue;
    const MappedFile& file = *files_[file_of_[i]];
    auto [begin, end] = t.byte_range();
    file.release(static_cast<size_t>(t.storage.data() - file.bytes().data()) + begin, end - begin);
  }
}

namespace {

// 1 + the largest N of the tensors named "...encoder.layer.<N>....", 0 when there are none.
int64_t encoder_layers_in(const HfWeights& weights) {
  constexpr std::string_view kLayer = "encoder.layer.";
  int64_t layers = 0;
  for (const CheckpointTensor& t : weights.tensors()) {
    const size_t at = t.name.find(kLayer);
    if (at == std::string::npos) continue;
    const char* begin = t.name.data() + at + kLayer.size();
    int64_t index = 0;
    const auto [end, error] = std::from_chars(begin, t.name.data() + t.name.size(), index);
    if (error == std::errc() && end != begin && index >= 0) layers = std::max(layers, index + 1);
  }
  return layers;
}

// Note [Sizes checked before the model is built]
// The parameter table is built from config.json; a config whose sizes the weights do not have (a typo of
// num_hidden_layers: 1000000) would make a table of millions of tensors and list every one as missing. The
// layer count (the config's at most the weights') and the word embeddings' shape are compared with the
// weights first, cheaply.
void check_config_sizes_against_weights(const std::string& dir, const DebertaConfig& config,
                                        const HfWeights& weights) {
  // More layers in the weights than the config asks for are listed tensor by tensor below (a short list).
  const int64_t layers = encoder_layers_in(weights);
  ZT_CHECK(layers == 0 || layers >= config.num_hidden_layers, dir, ": config.json says num_hidden_layers ",
           config.num_hidden_layers, " but ", weights.description(), " holds ", layers, " encoder layer",
           layers == 1 ? "" : "s", " (encoder.layer.0 to encoder.layer.", layers - 1,
           "): the config is not this checkpoint's");
  for (const CheckpointTensor& t : weights.tensors()) {
    if (map_hf_name(t.name) != "deberta.embeddings.word_embeddings.weight" || t.shape.size() != 2) continue;
    const int64_t width = config.embedding_size > 0 ? config.embedding_size : config.hidden_size;
    ZT_CHECK(t.shape[0] == config.vocab_size && t.shape[1] == width, dir, ": config.json says vocab_size ",
             config.vocab_size, " and embedding width ", width, " but ", t.name, " is ", shape_text(t.shape),
             ": the config is not this checkpoint's");
  }
}

// A list for an error message: the first kShown items, one a line, then how many more there are.
struct CappedList {
  static constexpr size_t kShown = 10;
  size_t count = 0;
  std::string text;
  void add(const std::string& item) {
    if (count++ < kShown) text += "\n  " + item;
  }
  bool empty() const { return count == 0; }
  std::string shown() const {
    return count > kShown ? text + str("\n  and ", count - kShown, " more") : text;
  }
};

}  // namespace

HfImportReport import_hf_checkpoint(const std::string& dir, const std::string& model_file,
                                    const HfImportOptions& options) {
  HfImportReport report;
  const fs::path root(dir);
  ZT_CHECK(fs::is_directory(root), "'", dir, "' is not a directory");
  DebertaConfig config = load_deberta_config((root / "config.json").string());
  if (options.num_labels.has_value() && *options.num_labels != config.num_labels) {
    ZT_CHECK(*options.num_labels >= 1, "--num_labels must be at least 1, got ", *options.num_labels);
    // HF's PretrainedConfig.num_labels setter: a new count means new default label names.
    config.num_labels = *options.num_labels;
    config.id2label.clear();
    config.label2id.clear();
    for (int64_t i = 0; i < config.num_labels; ++i) {
      config.id2label.push_back("LABEL_" + std::to_string(i));
      config.label2id["LABEL_" + std::to_string(i)] = i;
    }
  }
  HfWeights weights = HfWeights::open(dir);
  check_config_sizes_against_weights(dir, config, weights);
  ParameterTable table(config);
  report.weights = weights.description();
  std::unordered_map<std::string, const CheckpointTensor*> by_name;
  CappedList unknown, misshaped, missing, bad_dtype;
  auto append = [](CappedList& list, const std::string& item) { list.add(item); };
  for (const CheckpointTensor& t : weights.tensors()) {
    const std::string mapped = map_hf_name(t.name);
    const std::string described =
        t.name + " " + shape_text(t.shape) + " " + std::string(stored_dtype_name(t.dtype));
    if (std::string reason = ignored_tensor_reason(mapped); !reason.empty()) {
      report.skipped.push_back(described + ": " + reason);
      continue;
    }
    if (!table.contains(mapped)) {
      append(unknown, described);
      continue;
    }
    if (mapped != t.name) report.renamed.push_back(t.name + " -> " + mapped);
    ZT_CHECK(by_name.emplace(mapped, &t).second, dir, ": two checkpoint tensors map onto '", mapped, "'");
  }

  // Head: a classifier of another label count is dropped (HF: ignore_mismatched_sizes=True).
  std::map<std::string, std::string> to_initialise;  // name -> reason
  for (const ParameterInfo& p : table.entries()) {
    const bool head = p.name.starts_with("classifier.") || p.name.starts_with("pooler.");
    auto it = by_name.find(p.name);
    if (it == by_name.end()) {
      if (head) {
        to_initialise[p.name] = "not in the checkpoint";
      } else {
        append(missing, p.name + " " + p.shape.to_string());
      }
      continue;
    }
    const CheckpointTensor& t = *it->second;
    if (!same_shape(t.shape, p.shape)) {
      if (p.name.starts_with("classifier.")) {
        to_initialise[p.name] = "checkpoint has " + shape_text(t.shape) + " (another label count)";
        report.skipped.push_back(t.name + " " + shape_text(t.shape) + ": replaced by a new " +
                                 std::to_string(config.num_labels) + "-label classifier");
        by_name.erase(it);
      } else {
        append(misshaped,
               p.name + ": checkpoint " + shape_text(t.shape) + ", config needs " + p.shape.to_string());
      }
      continue;
    }
    if (!stored_dtype_is_parameter(t.dtype)) {
      append(bad_dtype, p.name + " is " + std::string(stored_dtype_name(t.dtype)));
    }
  }
  ZT_CHECK(unknown.empty() && misshaped.empty() && missing.empty() && bad_dtype.empty(), dir,
           ": checkpoint does not match config.json (", weights.description(),
           "):", missing.empty() ? "" : "\nmissing tensors:" + missing.shown(),
           misshaped.empty() ? "" : "\nwrong shapes:" + misshaped.shown(),
           unknown.empty() ? "" : "\nunexpected tensors:" + unknown.shown(),
           bad_dtype.empty() ? "" : "\nunsupported dtypes (need F32, F16 or BF16):" + bad_dtype.shown());

  // Stream tensor by tensor into the model file, in table order.
  std::mt19937_64 rng(options.seed);
  ModelFileWriter writer(model_file, config);
  std::unique_ptr<Progress> progress;
  if (options.show_progress) {
    progress = std::make_unique<Progress>("import " + fs::path(dir).filename().string(),
                                          static_cast<int64_t>(table.size()), tensor_progress_options());
  }
  std::vector<uint8_t> buffer;
  std::vector<float> init_values;
  for (const ParameterInfo& p : table.entries()) {
    buffer.resize(static_cast<size_t>(p.numel()) * dtype_size(options.dtype));
    Tensor out(buffer.data(), p.shape, options.dtype);
    if (auto reason = to_initialise.find(p.name); reason != to_initialise.end()) {
      init_values.resize(static_cast<size_t>(p.numel()));
      init_linear_tensor(init_values, p.kind == ParamKind::bias, config.initializer_range, rng);
      store_floats(init_values, out);
      report.initialised.push_back(p.name + " " + p.shape.to_string() + ": " + reason->second +
                                   (p.kind == ParamKind::bias ? "; zeros" : "; N(0, initializer_range^2)"));
    } else {
      const CheckpointTensor& t = *by_name.at(p.name);
      convert_to(t, out);
      weights.release(t);
      report.bytes_read += static_cast<uint64_t>(t.numel()) * stored_dtype_size(t.dtype);
    }
    writer.write(p.name, out);
    report.bytes_written += buffer.size();
    ++report.tensors_written;
    if (progress) progress->update(1);
  }
  if (progress) progress->finish();
  writer.commit();

  if (fs::exists(root / "spm.model")) {
    copy_file_atomically(root / "spm.model", fs::absolute(model_file).parent_path() / "spm.model");
    report.copied_tokenizer = true;
  }
  report.config = config;
  return report;
}

HfExportReport export_hf_checkpoint(const std::string& model_file, const std::string& out_dir,
                                    bool show_progress) {
  HfExportReport report;
  ModelFile model(model_file);
  ParameterTable table(model.config());
  fs::create_directories(out_dir);
  const fs::path out(out_dir);

  // Header: F32 tensors back to back in table order; padded with spaces so the data starts 8-byte aligned.
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const ParameterInfo& p : table.entries()) {
    const uint64_t nbytes = static_cast<uint64_t>(p.numel()) * 4;
    header[p.name] = {
        {"dtype", "F32"}, {"shape", dims_of(p.shape)}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  write_file_atomically(out / "model.safetensors", [&](std::ofstream& file) {
    uint8_t size_le[8];
    for (int i = 0; i < 8; ++i)
      size_le[i] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * i));
    file.write(reinterpret_cast<const char*>(size_le), 8);
    file.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    std::unique_ptr<Progress> progress;
    if (show_progress) {
      progress =
          std::make_unique<Progress>("export", static_cast<int64_t>(table.size()), tensor_progress_options());
    }
    std::vector<float> values;
    for (const ParameterInfo& p : table.entries()) {
      values.resize(static_cast<size_t>(p.numel()));
      model.read_param(p.name, Tensor(values.data(), p.shape, DType::f32));
      static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
      file.write(reinterpret_cast<const char*>(values.data()),
                 static_cast<std::streamsize>(values.size() * 4));
      // A full disk shows here, not only at close: stop instead of formatting the remaining tensors.
      ZT_CHECK(file.good(), "cannot write ", (out / "model.safetensors").string(), " (disk full?)");
      report.bytes += values.size() * 4;
      ++report.tensors;
      if (progress) progress->update(1);
    }
    if (progress) progress->finish();
  });
  write_file_atomically(out / "config.json",
                        [&](std::ofstream& config) { config << model.config().to_json(); });

  const fs::path spm = fs::absolute(model_file).parent_path() / "spm.model";
  if (fs::exists(spm)) {
    copy_file_atomically(spm, out / "spm.model");
    report.copied_tokenizer = true;
  }
  return report;
}

}  // namespace zt
