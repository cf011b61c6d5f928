// HuggingFace checkpoint directories in and out of the zerotrain model file (model/model_file.h).
//
// Import reads DIR/config.json and the weights in whichever form DIR holds them (first found wins):
//   model.safetensors | model.safetensors.index.json (+ shards) | pytorch_model.bin |
//   pytorch_model.bin.index.json (+ shards)
// and maps names onto the ParameterTable of DebertaV2ForSequenceClassification:
//   deberta.* / pooler.* / classifier.*  as they are;  bert.* -> deberta.*;  backbone names without a
//   prefix (a saved DebertaV2Model) -> deberta.*
//   deberta.embeddings.position_embeddings.weight, deberta.embeddings.position_ids, lm_predictions.*,
//   mask_predictions.*: tensors HF ignores for sequence classification; reported and skipped
//   any other unknown tensor, a missing backbone tensor or a wrong shape: an error naming every one
// The head follows HF's from_pretrained(num_labels=N, ignore_mismatched_sizes=True): a classifier whose row
// count differs from N (an MNLI checkpoint imported for MRPC) is dropped and, like a missing pooler or
// classifier, initialised as HF's _init_weights does: weight ~ N(0, initializer_range²) from a seeded RNG,
// bias 0. A changed label count resets id2label/label2id to LABEL_<i>, as HF's config does.
//
// Conversion streams: input files are memory-mapped, each tensor is converted into a buffer of its own size,
// written, and its input pages released, so peak memory is about one tensor (input + output), not the model.
//
// Export writes OUTDIR/model.safetensors (F32, HF names, table order, __metadata__ {"format": "pt"}) and
// OUTDIR/config.json, so DebertaV2ForSequenceClassification.from_pretrained(OUTDIR) loads it with no missing
// or unexpected keys. spm.model beside the input is copied along in both directions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/hf_readers.h"
#include "runtime/dtype.h"

namespace zt {

// The weights of one checkpoint directory, mapped, with tensors as the files store them.
class HfWeights {
 public:
  static HfWeights open(const std::string& dir);  // throws when DIR holds no supported weight file
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  const std::string& description() const { return description_; }  // e.g. "pytorch_model.bin (torch zip)"
  uint64_t file_bytes() const;
  void release(const CheckpointTensor& t) const;  // drops the tensor's input pages from memory

 private:
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<size_t> file_of_;  // tensors_[i] lives in files_[file_of_[i]]
  std::vector<CheckpointTensor> tensors_;
  std::string description_;
};

struct HfImportOptions {
  std::optional<int64_t> num_labels;  // unset: config.json's
  DType dtype = DType::f32;           // storage dtype of the model file
  uint64_t seed = 42;                 // RNG of re-initialised head tensors
  bool show_progress = true;          // progress bar on stderr
};

struct HfImportReport {
  DebertaConfig config;                  // as written into the model file
  std::string weights;                   // HfWeights::description()
  std::vector<std::string> skipped;      // "name [shape] DTYPE: reason"
  std::vector<std::string> renamed;      // "old -> new"
  std::vector<std::string> initialised;  // "name [shape]: reason"
  int64_t tensors_written = 0;
  uint64_t bytes_read = 0;     // checkpoint tensor bytes converted
  uint64_t bytes_written = 0;  // parameter bytes written
  bool copied_tokenizer = false;
};

HfImportReport import_hf_checkpoint(const std::string& dir, const std::string& model_file,
                                    const HfImportOptions& options = {});

struct HfExportReport {
  int64_t tensors = 0;
  uint64_t bytes = 0;
  bool copied_tokenizer = false;
};

HfExportReport export_hf_checkpoint(const std::string& model_file, const std::string& out_dir,
                                    bool show_progress = true);

// Maps a checkpoint name onto an HF DebertaV2ForSequenceClassification name (see the header comment); returns
// the name unchanged when no rule applies.
std::string map_hf_name(const std::string& name);
// Why HF ignores `name` for sequence classification, or "" when it does not.
std::string ignored_tensor_reason(const std::string& mapped_name);

}  // namespace zt
