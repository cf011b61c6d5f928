// convert_hf: HuggingFace DeBERTa-v2 checkpoints in and out of the zerotrain model file.
//
//   convert_hf import DIR OUT.h5 [--num_labels N] [--dtype f32|bf16|f16] [--seed S]
//   convert_hf export MODEL_FILE OUTDIR
//   convert_hf forward MODEL_FILE INPUTS.h5 OUT.h5     (our CPU logits for a batch; for round-trip checks)
//
// See model/hf_checkpoint.h for the formats, name mapping and head re-initialisation.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/deberta.h"
#include "model/hf_checkpoint.h"
#include "model/model_file.h"
#include "model/parameters.h"
#include "runtime/check.h"
#include "runtime/flag_table.h"
#include "runtime/h5file.h"

namespace {

constexpr const char* kUsage = R"(usage:
  convert_hf import DIR OUT [--num_labels N] [--dtype f32|bf16|f16] [--seed S]
      DIR holds config.json and one of model.safetensors, model.safetensors.index.json (+ shards),
      pytorch_model.bin (torch zip format) or pytorch_model.bin.index.json (+ shards); spm.model, if
      present, is copied beside OUT. --num_labels N replaces a classifier of another size with a new one
      initialised as HF does (weight N(0, initializer_range^2) from --seed, default 42; bias 0).
      Writes the zerotrain model file OUT (HDF5; --dtype of the stored parameters, default f32).
  convert_hf export MODEL_FILE OUTDIR
      Writes OUTDIR/model.safetensors (F32) and OUTDIR/config.json for
      DebertaV2ForSequenceClassification.from_pretrained(OUTDIR); copies spm.model if beside MODEL_FILE.
  convert_hf forward MODEL_FILE INPUTS OUT
      Runs the CPU model on INPUTS (HDF5: input_ids, attention_mask [B, L] int64) and writes logits [B, C]
      to OUT (HDF5), to compare with another framework.
)";

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

using V = const std::string&;
using F = std::string_view;

const auto kImportFlags = std::to_array<zt::Flag<zt::HfImportOptions>>({
    {"num_labels", "N", "classifier size; another size than the checkpoint's gets a new head",
     [](zt::HfImportOptions& o, F f, V v) { o.num_labels = zt::parse_integer_flag(f, v, 1); },
     [](const zt::HfImportOptions&) { return std::string("the checkpoint's"); }},
    {"dtype", "f32|bf16|f16", "dtype of the stored parameters",
     [](zt::HfImportOptions& o, F f, V v) {
       o.dtype = zt::parse_dtype(zt::parse_choice_flag(f, v, {"f32", "bf16", "f16"}));
     },
     [](const zt::HfImportOptions& o) { return std::string(zt::dtype_name(o.dtype)); }},
    {"seed", "S", "seed of a new classifier head",
     [](zt::HfImportOptions& o, F f, V v) {
       o.seed = static_cast<uint64_t>(zt::parse_integer_flag(f, v, 0));
     },
     [](const zt::HfImportOptions& o) { return std::to_string(o.seed); }},
});

int run_import(const std::vector<std::string>& args) {
  zt::HfImportOptions options;
  const zt::ParsedFlags parsed = zt::parse_flags<zt::HfImportOptions>(kImportFlags, args, options, true);
  if (parsed.help) {
    std::fputs(zt::flags_help<zt::HfImportOptions>(kImportFlags, zt::HfImportOptions{},
                                                   "usage: convert_hf import DIR OUT [--flag value] ...\n")
                   .c_str(),
               stdout);
    return 0;
  }
  const std::vector<std::string>& positional = parsed.operands;
  ZT_CHECK(positional.size() == 2, "import needs DIR and OUT");
  const auto start = std::chrono::steady_clock::now();
  zt::HfImportReport r = zt::import_hf_checkpoint(positional[0], positional[1], options);
  for (const std::string& s : r.renamed) std::fprintf(stderr, "renamed: %s\n", s.c_str());
  for (const std::string& s : r.skipped) std::fprintf(stderr, "skipped: %s\n", s.c_str());
  for (const std::string& s : r.initialised) std::fprintf(stderr, "initialised: %s\n", s.c_str());
  std::fprintf(
      stderr, "imported %s: %lld tensors, %.1f MB read, %.1f MB written (%s), %d labels, %.1f s -> %s%s\n",
      r.weights.c_str(), static_cast<long long>(r.tensors_written), r.bytes_read / 1e6, r.bytes_written / 1e6,
      std::string(zt::dtype_name(options.dtype)).c_str(), static_cast<int>(r.config.num_labels),
      seconds_since(start), positional[1].c_str(), r.copied_tokenizer ? " (+ spm.model)" : "");
  return 0;
}

int run_export(const std::vector<std::string>& args) {
  ZT_CHECK(args.size() == 2, "export needs MODEL_FILE and OUTDIR");
  const auto start = std::chrono::steady_clock::now();
  zt::HfExportReport r = zt::export_hf_checkpoint(args[0], args[1]);
  std::fprintf(stderr, "exported %lld tensors, %.1f MB, %.1f s -> %s/model.safetensors, config.json%s\n",
               static_cast<long long>(r.tensors), r.bytes / 1e6, seconds_since(start), args[1].c_str(),
               r.copied_tokenizer ? ", spm.model" : "");
  return 0;
}

int run_forward(const std::vector<std::string>& args) {
  ZT_CHECK(args.size() == 3, "forward needs MODEL_FILE, INPUTS and OUT");
  zt::ModelFile model_file(args[0]);
  zt::ParameterTable table(model_file.config());
  zt::Arena params("params", table.layout(zt::DType::f32));
  model_file.load_params(params);
  zt::H5File inputs = zt::H5File::open_read(args[1]);
  zt::Shape shape;
  std::vector<int64_t> ids = inputs.read_vector<int64_t>("input_ids", &shape);
  std::vector<int64_t> mask = inputs.read_vector<int64_t>("attention_mask");
  ZT_CHECK(shape.rank == 2 && static_cast<int64_t>(mask.size()) == shape.numel(), args[1],
           ": input_ids and attention_mask must both be [B, L]");
  zt::DebertaForSequenceClassification model(model_file.config(), shape[0], shape[1]);
  model.forward(
      params,
      {zt::Tensor(ids.data(), shape, zt::DType::i64), zt::Tensor(mask.data(), shape, zt::DType::i64), {}},
      {});
  zt::AtomicH5Writer out(args[2]);
  out.file().write("logits", model.logits());
  out.commit();
  return 0;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "import") return run_import(args);
  if (command == "export") return run_export(args);
  if (command == "forward") return run_forward(args);
  std::fprintf(stderr, "convert_hf: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}

}  // namespace

// Errors are "convert_hf <command>: error: ..." and exit code 2, as in train_mrpc (zt::run_tool_main).
int main(int argc, char** argv) {
  const std::string tool = argc > 1 ? std::string("convert_hf ") + argv[1] : std::string("convert_hf");
  return zt::run_tool_main(tool.c_str(), argc, argv, run);
}
