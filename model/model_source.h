// --model_name_or_path as run_glue users pass it. Three forms:
//   a zerotrain model file (model.h5 of a run, or convert_hf import's output)
//   a directory holding model.h5 (a run's --output_dir)
//   an HF checkpoint directory (config.json + model.safetensors / pytorch_model.bin, sharded or not, and
//   usually spm.model) — converted on the fly with convert_hf's reader (model/hf_checkpoint.h) into
//   <cache_dir>/model.h5 (+ spm.model), reused on the next run while the checkpoint's files are unchanged
//   (same names, sizes and modification times, recorded in <cache_dir>/source.json).
// The tokenizer belongs to the model: spm.model beside the resolved model file, if there is one.
#pragma once

#include <string>

namespace zt {

struct ModelSource {
  std::string model_file;   // the zerotrain model file to load
  std::string tokenizer;    // spm.model beside it, or "" when it has none
  bool converted = false;   // an HF checkpoint was converted by this call
  bool from_cache = false;  // an HF checkpoint's earlier conversion was reused
};

// True when `dir` is an HF checkpoint directory: config.json and a weight file, no model.h5.
bool is_hf_checkpoint_dir(const std::string& dir);

// Resolves `file_or_dir` (above); an HF directory is converted into `cache_dir` (created when needed).
// Throws naming what is missing.
ModelSource resolve_model_source(const std::string& file_or_dir, const std::string& cache_dir);

}  // namespace zt
