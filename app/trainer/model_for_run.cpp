// The model, data and dtype a run trains with, from its TrainConfig (app/trainer/trainer.h).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "app/trainer/trainer.h"
#include "app/trainer/trainer_impl.h"
#include "model/model_file.h"
#include "model/model_source.h"
#include "runtime/check.h"

namespace zt::optim {

DType compute_dtype_for_run(const TrainConfig& config) {
  if (config.device != DeviceChoice::cuda) return DType::f32;
  switch (config.dtype) {
    case ComputeDType::bf16:
      return DType::bf16;
    case ComputeDType::f16:
      return DType::f16;
    case ComputeDType::f32:
      return DType::f32;
  }
  ZT_FAIL("unknown --dtype");
}

DebertaConfig model_config_for_run(const TrainConfig& config, int64_t num_labels, const std::string& task) {
  // The embedded default: the full xlarge architecture (random init) on the GPU, a small model on the CPU.
  if (config.model_name_or_path.empty()) {
    return trainer_internal::checkpointed_if_asked(
        config.device == DeviceChoice::cuda ? deberta_v2_xlarge_config() : deberta_small_cpu_config(),
        config);
  }
  DebertaConfig model = trainer_internal::checkpointed_if_asked(
      ModelFile(resolve_model_path(config.model_name_or_path)).config(), config);
  if (model.num_labels != num_labels) {
    ZT_CHECK(
        config.ignore_mismatched_sizes, "--model_name_or_path ", config.model_name_or_path, " has ",
        model.num_labels, " labels but ", task, " has ", num_labels,
        ": pass --ignore_mismatched_sizes to re-initialize the classifier (or convert with convert_hf import "
        "--num_labels ",
        num_labels, ")");
    model.num_labels = num_labels;
    model.id2label.clear();
    model.label2id.clear();
    for (int64_t i = 0; i < num_labels; ++i) {
      model.id2label.push_back(str("LABEL_", i));
      model.label2id[str("LABEL_", i)] = i;
    }
  }
  return model;
}

DebertaConfig model_config_for_calibration(TrainConfig config, bool gpu) {
  if (config.device == DeviceChoice::auto_detect)
    config.device = gpu ? DeviceChoice::cuda : DeviceChoice::cpu;
  if (config.model_name_or_path.empty()) return model_config_for_run(config);
  const int64_t stored = ModelFile(resolve_model_path(config.model_name_or_path)).config().num_labels;
  return model_config_for_run(config, stored, "the checkpoint's own head");
}

data::TaskDataRequest task_data_request(const TrainConfig& config, const DebertaConfig& model) {
  data::TaskDataRequest request;
  request.task_name = config.task_name;
  request.data_dir = config.data_dir;
  request.train_file = config.train_file;
  request.validation_file = config.validation_file;
  request.test_file = config.test_file;
  // The shipped MRPC when nothing else is named (TrainConfig::resolve fills the same paths).
  if (request.task_name == "mrpc" && request.data_dir.empty()) request.data_dir = ZT_DATA_DIR;
  if (!config.model_name_or_path.empty()) request.model_label2id = model.label2id;
  return request;
}

namespace {
// A new head for `task`: its label count, its names as id2label (run_glue sets label2id from the data's
// label list), MSE for regression.
void set_task_head(DebertaConfig& model, const data::TaskData& task) {
  model.num_labels = task.num_labels();
  model.id2label.clear();
  model.label2id.clear();
  for (int64_t i = 0; i < model.num_labels; ++i) {
    const std::string name = task.regression || static_cast<size_t>(i) >= task.label_names.size()
                                 ? str("LABEL_", i)
                                 : task.label_names[static_cast<size_t>(i)];
    model.id2label.push_back(name);
    model.label2id[name] = i;
  }
  if (task.regression) {
    model.problem_type = "regression";
  } else if (model.problem_type == "regression") {
    model.problem_type.reset();
  }
}
}  // namespace

DebertaConfig model_config_for_task(const TrainConfig& config, const data::TaskData& task) {
  DebertaConfig model;
  if (config.model_name_or_path.empty()) {
    model = model_config_for_run(config);
    // The embedded default's head is MRPC's; any other task gets its own.
    if (task.task_name != "mrpc") set_task_head(model, task);
  } else {
    model = model_config_for_run(config, task.num_labels(), task.display_name());
    const int64_t stored = ModelFile(resolve_model_path(config.model_name_or_path)).config().num_labels;
    if (stored != task.num_labels()) set_task_head(model, task);
  }
  ZT_CHECK(model.is_regression() == task.regression, "--model_name_or_path ", config.model_name_or_path,
           " has a ", model.is_regression() ? "regression" : "classification", " head but ",
           task.display_name(), " is ", task.regression ? "regression" : "classification",
           " (pass --ignore_mismatched_sizes with a head of another size, or another checkpoint)");
  return model;
}

std::string hf_conversion_cache(const std::string& hf_dir) {
  // One folder per checkpoint path: HF's own cache convention (~/.cache/...), overridable for CI and tests.
  const char* override_dir = std::getenv("ZT_HF_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root =
      override_dir != nullptr && *override_dir != '\0'
          ? std::filesystem::path(override_dir)
          : std::filesystem::path(home != nullptr ? home : "/tmp") / ".cache" / "zerotrain" / "hf";
  const std::string absolute = std::filesystem::absolute(hf_dir).lexically_normal().string();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a of the absolute path
  for (unsigned char ch : absolute) hash = (hash ^ ch) * 1099511628211ull;
  char name[17];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(hash));
  return (root / (std::filesystem::path(absolute).filename().string() + "-" + name)).string();
}

std::string resolve_model_path(const std::string& file_or_dir) {
  const std::filesystem::path path(file_or_dir);
  if (is_hf_checkpoint_dir(file_or_dir)) {
    return resolve_model_source(file_or_dir, hf_conversion_cache(file_or_dir)).model_file;
  }
  if (std::filesystem::is_directory(path)) {
    const auto file = path / "model.h5";
    ZT_CHECK(std::filesystem::exists(file), "--model_name_or_path ", file_or_dir,
             ": the directory holds no model.h5 (convert a HuggingFace checkpoint with convert_hf import)");
    return file.string();
  }
  ZT_CHECK(std::filesystem::exists(path), "--model_name_or_path ", file_or_dir,
           ": no such file or directory");
  return path.string();
}

}  // namespace zt::optim
