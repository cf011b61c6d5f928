// The zerotrain model file: a DeBERTa-v2 configuration plus every parameter, by HF state-dict name, in one
// HDF5 file. This is what tools/convert_hf writes and train_mrpc --model_name_or_path loads.
//
//   attributes on "/":  format = "zerotrain-model", format_version = 1,
//                       config_json = HF config.json text (DebertaConfig::to_json())
//   datasets:           params/<HF name>  shape as ParameterTable, f32 by default (bf16/f16 allowed; the
//                                         runtime/h5file.h "dtype" attribute says which)
//
//   save_model_file("model.h5", config, table, params);        // atomic: temp file + rename
//   ModelFile f = open_model_file("model.h5");
//   ParameterTable table(f.config());
//   Arena params("params", table.layout(DType::f32));
//   f.load_params(params);                                      // checks names and shapes, converts dtypes
//
// Large conversions write tensor by tensor through ModelFileWriter, so no whole-model buffer is needed.
#pragma once

#include <memory>
#include <string>
#include <unordered_set>

#include "model/config.h"
#include "model/parameters.h"
#include "runtime/arena.h"
#include "runtime/h5file.h"

namespace zt {

constexpr const char* kModelFileFormat = "zerotrain-model";
constexpr int64_t kModelFileVersion = 1;

// Writes a model file one tensor at a time: every tensor of the parameter table must be written exactly
// once (any name or shape outside the table is an error), then commit() renames the temp file onto `path`.
class ModelFileWriter {
 public:
  ModelFileWriter(const std::string& path, const DebertaConfig& config);
  ~ModelFileWriter();

  // Stores `tensor` (contiguous host; f32, bf16 or f16) as params/<name>.
  void write(const std::string& name, const Tensor& tensor);
  void commit();  // throws naming the tensors not written
  const ParameterTable& table() const { return table_; }

 private:
  AtomicH5Writer writer_;
  ParameterTable table_;
  std::unordered_set<std::string> written_;
};

void save_model_file(const std::string& path, const DebertaConfig& config, const ParameterTable& table,
                     const Arena& params);

class ModelFile {
 public:
  explicit ModelFile(const std::string& path);  // checks format / version and parses config_json

  const DebertaConfig& config() const { return config_; }
  const std::string& path() const { return file_.path(); }
  const H5File& h5() const { return file_; }

  // Fills every tensor of `params` (host arena laid out from a ParameterTable, any float dtype) from
  // params/<name>, converting dtypes. Missing, extra and mis-shaped tensors are errors that list every one.
  void load_params(const Arena& params) const;
  // Reads one tensor into a contiguous host tensor of the stored shape (any float dtype).
  void read_param(const std::string& name, const Tensor& into) const;

 private:
  H5File file_;
  DebertaConfig config_;
};

ModelFile open_model_file(const std::string& path);

}  // namespace zt
