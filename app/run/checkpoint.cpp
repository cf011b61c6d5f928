#include "app/run/checkpoint.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/h5file.h"

namespace zt::optim {
namespace {

namespace fs = std::filesystem;

// One group of per-tensor datasets and the arena it mirrors.
struct TensorGroup {
  std::string_view group;  // "params", "master", "adam_m", "adam_v"
  const Arena* arena;
  bool must_be_f32;
};

std::vector<TensorGroup> tensor_groups(const CheckpointArenas& arenas, bool master_is_params) {
  std::vector<TensorGroup> groups{{"params", &arenas.params, false}};
  if (!master_is_params) groups.push_back({"master", &arenas.master, true});
  groups.push_back({"adam_m", &arenas.adam_m, true});
  groups.push_back({"adam_v", &arenas.adam_v, true});
  return groups;
}

// Two Arena objects over one buffer are the same storage too (a view handed out twice).
bool master_is_params_arena(const CheckpointArenas& arenas) {
  return &arenas.master == &arenas.params || arenas.master.data() == arenas.params.data();
}

std::string dataset_name(std::string_view group, std::string_view tensor) {
  return str(group, "/", tensor);
}

// Every table tensor must sit in each arena with the table's shape, in the dtype the group requires.
void check_arenas_hold_table(const ParameterTable& table, const std::vector<TensorGroup>& groups) {
  for (const TensorGroup& g : groups) {
    for (const ParameterInfo& entry : table.entries()) {
      const ArenaLayout& layout = g.arena->layout();
      ZT_CHECK(layout.contains(entry.name), "checkpoint ", g.group, ": arena '", g.arena->name(),
               "' has no tensor '", entry.name, "'");
      const ArenaSlot& slot = layout.slot(entry.name);
      ZT_CHECK(slot.shape == entry.shape, "checkpoint ", g.group, ": arena '", g.arena->name(), "' holds '",
               entry.name, "' with shape ", slot.shape.to_string(), ", the parameter table says ",
               entry.shape.to_string());
      ZT_CHECK(!g.must_be_f32 || slot.dtype == DType::f32, "checkpoint ", g.group, ": arena '",
               g.arena->name(), "' holds '", entry.name, "' as ", dtype_name(slot.dtype), ", expected f32");
      ZT_CHECK(is_floating(slot.dtype), "checkpoint ", g.group, ": arena '", g.arena->name(), "' holds '",
               entry.name, "' as ", dtype_name(slot.dtype), ", expected a floating-point dtype");
    }
  }
}

// Device arenas are staged through host memory (copy_tensor: on the thread's current stream, which it then
// synchronizes); host and pinned-host arenas are used in place.
void write_arena_tensor(H5File& file, std::string_view dataset, const Arena& arena, const ArenaSlot& slot) {
  const void* source = static_cast<const char*>(arena.data()) + slot.offset;
  if (arena.kind() != MemoryKind::device) {
    file.write(dataset, source, slot.shape, slot.dtype);
    return;
  }
#ifdef ZT_WITH_CUDA
  std::vector<char> staging(slot.nbytes);
  copy_tensor(Tensor(const_cast<void*>(source), slot.shape, slot.dtype, DeviceKind::cuda),
              Tensor(staging.data(), slot.shape, slot.dtype));
  file.write(dataset, staging.data(), slot.shape, slot.dtype);
#else
  ZT_FAIL("arena '", arena.name(), "' is a device arena, but this build has no CUDA");
#endif
}

// Note [Loaded values are checked]
// Checksums (runtime/h5file.h) catch damage to a file written by this version; files without them, and
// a run that had already diverged when it saved, can still hold NaN or infinity, and Adam's second moment
// can never be negative. Training on from such values ends in NaN losses several steps later with no hint
// of the cause, so every loaded tensor is checked and the first bad element named.
void check_loaded_values(const std::string& path, std::string_view dataset, const void* values,
                         const ArenaSlot& slot, bool non_negative) {
  const int64_t count = slot.shape.numel();
  const int64_t bad = first_invalid_float(values, slot.dtype, count, non_negative);
  if (bad < 0) return;
  const float value = float_value_at(values, slot.dtype, bad);
  ZT_FAIL("checkpoint ", path, ": tensor '", dataset, "' holds ", value, " at element ", bad,
          std::isfinite(value) ? " (Adam's second moment is never negative)" : "",
          "; the file is damaged, or the run had diverged before it was saved");
}

// Reads one tensor and checks its values before it reaches the arena's user.
void read_arena_tensor(const H5File& file, std::string_view dataset, const Arena& arena,
                       const ArenaSlot& slot, bool non_negative) {
  void* target = static_cast<char*>(arena.data()) + slot.offset;
  if (arena.kind() != MemoryKind::device) {
    file.read(dataset, target, slot.shape, slot.dtype);
    check_loaded_values(file.path(), dataset, target, slot, non_negative);
    return;
  }
#ifdef ZT_WITH_CUDA
  std::vector<char> staging(slot.nbytes);
  file.read(dataset, staging.data(), slot.shape, slot.dtype);
  check_loaded_values(file.path(), dataset, staging.data(), slot, non_negative);
  copy_tensor(Tensor(staging.data(), slot.shape, slot.dtype),
              Tensor(target, slot.shape, slot.dtype, DeviceKind::cuda));
#else
  ZT_FAIL("arena '", arena.name(), "' is a device arena, but this build has no CUDA");
#endif
}

void write_state(H5File& file, const TrainingState& state) {
  file.set_attribute("optimizer_step", state.optimizer_step);
  file.set_attribute("micro_step", state.micro_step);
  file.set_attribute("adam_step", state.adam_step);
  file.set_attribute("scheduler_step", state.scheduler_step);
  file.set_attribute("next_batch_epoch", state.next_batch.epoch);
  file.set_attribute("next_batch_index", state.next_batch.batch);
  // HDF5 attributes here are int64; the same 64 bits keep seeds >= 2^63 exact.
  file.set_attribute("seed", std::bit_cast<int64_t>(state.seed));
  file.set_attribute("loss_scale", state.loss_scaler.scale);
  file.set_attribute("loss_scaler_iteration", state.loss_scaler.iteration);
  file.set_attribute("loss_scaler_last_overflow_iteration", state.loss_scaler.last_overflow_iteration);
  file.set_attribute("loss_scaler_hysteresis_left", int64_t{state.loss_scaler.hysteresis_left});
  file.set_attribute("loss_scaler_skipped_steps", state.loss_scaler.skipped_steps);
  file.set_attribute("last_lr", state.last_lr);
  file.set_attribute("epoch_loss_sum", state.epoch_loss_sum);
  file.set_attribute("epoch_optimizer_steps", state.epoch_optimizer_steps);
}

TrainingState read_state(const H5File& file) {
  TrainingState state;
  state.optimizer_step = file.attribute_int("optimizer_step");
  state.micro_step = file.attribute_int("micro_step");
  state.adam_step = file.attribute_int("adam_step");
  state.scheduler_step = file.attribute_int("scheduler_step");
  state.next_batch.epoch = file.attribute_int("next_batch_epoch");
  state.next_batch.batch = file.attribute_int("next_batch_index");
  state.seed = std::bit_cast<uint64_t>(file.attribute_int("seed"));
  state.loss_scaler.scale = file.attribute_double("loss_scale");
  state.loss_scaler.iteration = file.attribute_int("loss_scaler_iteration");
  state.loss_scaler.last_overflow_iteration = file.attribute_int("loss_scaler_last_overflow_iteration");
  state.loss_scaler.hysteresis_left = static_cast<int>(file.attribute_int("loss_scaler_hysteresis_left"));
  state.loss_scaler.skipped_steps = file.attribute_int("loss_scaler_skipped_steps");
  state.last_lr = file.attribute_double("last_lr");
  // Absent in checkpoints written before they were stored: the epoch's train_loss then covers the steps
  // after the resume only.
  if (file.has_attribute("epoch_loss_sum")) state.epoch_loss_sum = file.attribute_double("epoch_loss_sum");
  if (file.has_attribute("epoch_optimizer_steps"))
    state.epoch_optimizer_steps = file.attribute_int("epoch_optimizer_steps");
  return state;
}

// Checks format and version first, so a foreign HDF5 file is reported as such rather than as a missing
// attribute further down.
CheckpointInfo read_info(const H5File& file) {
  const std::string& path = file.path();
  ZT_CHECK(file.has_attribute("format") && file.attribute_string("format") == kCheckpointFormat, "file ",
           path, " is not a zerotrain training checkpoint (no format=\"", kCheckpointFormat, "\" attribute)");
  ZT_CHECK(file.has_attribute("format_version"), "checkpoint ", path, " has no format_version attribute");
  CheckpointInfo info;
  info.format_version = file.attribute_int("format_version");
  ZT_CHECK(info.format_version == kCheckpointFormatVersion, "checkpoint ", path, " has format_version ",
           info.format_version, "; this build reads version ", kCheckpointFormatVersion,
           info.format_version > kCheckpointFormatVersion ? " (written by a newer zerotrain)" : "");
  info.config_json = file.attribute_string("config_json");
  info.training_config = read_training_config(file);
  info.params_dtype = parse_dtype(file.attribute_string("params_dtype"));
  info.master_is_params = file.attribute_int("master_is_params") != 0;
  info.tensor_count = file.attribute_int("tensor_count");
  info.state = read_state(file);
  return info;
}

// Keys of config.json that describe where a model came from, not what it computes.
bool is_bookkeeping_key(const std::string& key) {
  return key == "_name_or_path" || key == "transformers_version" || key == "architectures" ||
         key == "torch_dtype";
}

// Compares the configs as config.json objects so the message can name each differing field.
void check_same_config(const std::string& path, const std::string& stored_json,
                       const DebertaConfig& running) {
  nlohmann::json stored;
  try {
    stored = nlohmann::json::parse(stored_json);
  } catch (const nlohmann::json::exception& e) {
    ZT_FAIL("checkpoint ", path, " has an unreadable config_json attribute (", e.what(), ")");
  }
  ZT_CHECK(stored.is_object(), "checkpoint ", path, ": config_json is not a JSON object");
  const nlohmann::json current = nlohmann::json::parse(running.to_json());
  std::set<std::string> keys;
  for (const auto& [key, value] : stored.items()) keys.insert(key);
  for (const auto& [key, value] : current.items()) keys.insert(key);
  std::string differences;
  for (const std::string& key : keys) {
    if (is_bookkeeping_key(key)) continue;
    const std::string in_file = stored.contains(key) ? stored[key].dump() : "(absent)";
    const std::string in_run = current.contains(key) ? current[key].dump() : "(absent)";
    if (in_file != in_run) differences += str("\n  ", key, ": checkpoint ", in_file, ", this run ", in_run);
  }
  ZT_CHECK(differences.empty(), "checkpoint ", path,
           " was written for a different model config; differing fields:", differences);
}

// Everything that can be checked without reading tensor data, so a mismatch leaves the arenas untouched.
void check_tensors_match(const H5File& file, const ParameterTable& table,
                         const std::vector<TensorGroup>& groups) {
  const std::string& path = file.path();
  for (const TensorGroup& g : groups) {
    ZT_CHECK(file.exists(g.group), "checkpoint ", path, " has no group '", g.group, "'");
    for (const ParameterInfo& entry : table.entries()) {
      const std::string dataset = dataset_name(g.group, entry.name);
      ZT_CHECK(file.exists(dataset), "checkpoint ", path, " has no tensor '", dataset, "'");
      const H5DatasetInfo stored = file.info(dataset);
      const ArenaSlot& slot = g.arena->layout().slot(entry.name);
      ZT_CHECK(!stored.raw_bytes, "checkpoint ", path, ": tensor '", dataset, "' holds raw bytes");
      ZT_CHECK(stored.shape == entry.shape, "checkpoint ", path, ": tensor '", dataset, "' has shape ",
               stored.shape.to_string(), ", the model expects ", entry.shape.to_string());
      ZT_CHECK(stored.dtype == slot.dtype, "checkpoint ", path, ": tensor '", dataset, "' holds ",
               dtype_name(stored.dtype), ", arena '", g.arena->name(), "' holds ", dtype_name(slot.dtype));
    }
    // A tensor the model does not have means the file and the table disagree about the architecture.
    for (const std::string& name : file.list(g.group)) {
      ZT_CHECK(table.contains(name), "checkpoint ", path, " has tensor '", dataset_name(g.group, name),
               "', which the model does not have");
    }
  }
}

// step_<N>.h5 (a file) or step_<N>.zero (a directory of rank files, app/run/sharded_checkpoint.h).
std::optional<int64_t> step_of_checkpoint_name(const std::string& name, bool directory) {
  constexpr std::string_view prefix = "step_";
  const std::string_view suffix = directory ? ".zero" : ".h5";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) {
    return std::nullopt;
  }
  const char* begin = name.data() + prefix.size();
  const char* end = name.data() + name.size() - suffix.size();
  int64_t step = 0;
  auto [stop, error] = std::from_chars(begin, end, step);
  if (error != std::errc() || stop != end || step < 0) return std::nullopt;
  return step;
}

// FNV-1a, 64 bits: the checksum of the stored configuration text (the int64 with the same 64 bits).
int64_t fnv1a64(std::string_view text) {
  uint64_t hash = 1469598103934665603ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return std::bit_cast<int64_t>(hash);
}

constexpr const char* kTrainingConfigChecksum = "training_config_fnv1a64";

}  // namespace

void write_training_config(H5File& file, std::string_view text) {
  file.set_attribute("training_config", text);
  file.set_attribute(kTrainingConfigChecksum, fnv1a64(text));
}

std::string read_training_config(const H5File& file) {
  std::string text = file.attribute_string("training_config");
  // Absent in checkpoints written before it was stored: those are read unverified.
  if (file.has_attribute(kTrainingConfigChecksum)) {
    ZT_CHECK(file.attribute_int(kTrainingConfigChecksum) == fnv1a64(text), "checkpoint ", file.path(),
             " is damaged: its stored training configuration (attribute training_config) fails its checksum");
  }
  return text;
}

void write_training_state(H5File& file, const TrainingState& state) {
  write_state(file, state);
}
TrainingState read_training_state(const H5File& file) {
  return read_state(file);
}
void check_same_model_config(const std::string& path, const std::string& stored_json,
                             const DebertaConfig& running) {
  check_same_config(path, stored_json, running);
}

bool is_sharded_checkpoint(const std::string& path) {
  std::error_code error;
  if (!fs::is_directory(path, error)) return false;
  for (const fs::directory_entry& item : fs::directory_iterator(path, error)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with("rank_0_of_") && name.ends_with(".h5")) return true;
  }
  return false;
}

void save_training_checkpoint(const std::string& path, const DebertaConfig& config,
                              const ParameterTable& table, const CheckpointArenas& arenas,
                              const TrainingState& state, std::string_view resolved_config_text) {
  ZT_CHECK(!table.entries().empty(), "saving checkpoint ", path, ": empty parameter table");
  const bool master_is_params = master_is_params_arena(arenas);
  const std::vector<TensorGroup> groups = tensor_groups(arenas, master_is_params);
  check_arenas_hold_table(table, groups);

  AtomicH5Writer writer(path);
  H5File& file = writer.file();
  file.set_attribute("format", kCheckpointFormat);
  file.set_attribute("format_version", kCheckpointFormatVersion);
  file.set_attribute("config_json", config.to_json());
  write_training_config(file, resolved_config_text);
  const DType params_dtype = arenas.params.layout().slot(table.entries().front().name).dtype;
  file.set_attribute("params_dtype", dtype_name(params_dtype));
  file.set_attribute("master_is_params", int64_t{master_is_params ? 1 : 0});
  file.set_attribute("tensor_count", static_cast<int64_t>(table.size()));
  write_state(file, state);
  for (const TensorGroup& g : groups) {
    file.create_group(g.group);
    for (const ParameterInfo& entry : table.entries()) {
      write_arena_tensor(file, dataset_name(g.group, entry.name), *g.arena,
                         g.arena->layout().slot(entry.name));
    }
  }
  writer.commit();
}

CheckpointInfo read_checkpoint_info(const std::string& path) {
  return read_info(H5File::open_read(path));
}

void load_training_checkpoint(const std::string& path, const DebertaConfig& config,
                              const ParameterTable& table, const CheckpointArenas& arenas,
                              TrainingState& state) {
  const H5File file = H5File::open_read(path);
  const CheckpointInfo info = read_info(file);
  check_same_config(path, info.config_json, config);
  ZT_CHECK(info.tensor_count == static_cast<int64_t>(table.size()), "checkpoint ", path, " holds ",
           info.tensor_count, " tensors per group, the model has ", table.size());

  const bool master_is_params = master_is_params_arena(arenas);
  ZT_CHECK(info.master_is_params == master_is_params, "checkpoint ", path,
           info.master_is_params
               ? " stores the params as the fp32 master (no separate master copy), but this run"
                 " keeps a separate master arena"
               : " stores a separate fp32 master copy, but this run uses its params as master",
           "; resume with the same precision settings");
  const std::vector<TensorGroup> groups = tensor_groups(arenas, master_is_params);
  check_arenas_hold_table(table, groups);
  check_tensors_match(file, table, groups);

  for (const TensorGroup& g : groups) {
    for (const ParameterInfo& entry : table.entries()) {
      read_arena_tensor(file, dataset_name(g.group, entry.name), *g.arena, g.arena->layout().slot(entry.name),
                        g.group == "adam_v");
    }
  }
  state = info.state;
}

std::string checkpoint_path(const std::string& output_dir, int64_t optimizer_step) {
  ZT_CHECK(optimizer_step >= 0, "checkpoint step must be >= 0, got ", optimizer_step);
  return (fs::path(output_dir) / str("step_", optimizer_step, ".h5")).string();
}

std::optional<std::string> find_latest_checkpoint(const std::string& output_dir) {
  std::error_code error;
  ZT_CHECK(fs::is_directory(output_dir, error), "checkpoint directory ", output_dir, " does not exist");
  std::optional<std::string> latest;
  int64_t latest_step = -1;
  for (const fs::directory_entry& item : fs::directory_iterator(output_dir)) {
    const bool directory = item.is_directory();
    if (!item.is_regular_file() && !directory) continue;
    const std::optional<int64_t> step = step_of_checkpoint_name(item.path().filename().string(), directory);
    if (step && *step > latest_step) {
      latest_step = *step;
      latest = item.path().string();
    }
  }
  return latest;
}

std::string resolve_checkpoint_path(const std::string& file_or_dir) {
  std::error_code error;
  ZT_CHECK(fs::exists(file_or_dir, error), "checkpoint ", file_or_dir, " does not exist");
  if (!fs::is_directory(file_or_dir, error) || is_sharded_checkpoint(file_or_dir)) return file_or_dir;
  std::optional<std::string> latest = find_latest_checkpoint(file_or_dir);
  ZT_CHECK(latest.has_value(), "checkpoint directory ", file_or_dir,
           " holds no step_<N>.h5 or step_<N>.zero checkpoint");
  return *latest;
}

}  // namespace zt::optim
