// The DeepSpeed JSON's keys, declared once: what zerotrain does with each (Note [DeepSpeed keys]).
//
// Note [DeepSpeed keys]
// Every key DeepSpeed reads that a stock config carries is in kDeepSpeedKeys with its rule:
//   honoured     a section's resolve reads it and it sets a setting (train_config_<section>.cpp); present but
//                left unread (e.g. total_num_steps under WarmupLR) it does not apply and is refused
//   section      an object no section reads, whose keys have rows of their own
//   explained    accepted whatever its value, with the reason it changes nothing here
//   inert_at     accepted at the value given (DeepSpeed's default, or "off"; a JSON list: any of its
//                values), with the reason; any other value is refused with the reason
//   off_section  a section with an "enabled" switch (DeepSpeed's default off): disabled or without the
//                switch it is accepted, every key under it explained; enabled it is refused with the reason
//   all_off      a section whose every value is false, 0 or null (its default) is accepted; else refused
//   refused      DeepSpeed has it, zerotrain does not: refused with the reason
// After the sections have resolved, check_deepspeed_keys walks the whole document: each key gets its verdict
// in TrainConfig::deepspeed_keys.verdicts (describe() prints them), or the first key refused ends resolve()
// naming it. A key in no row is unknown, with the closest name of its section as a suggestion.
#include <algorithm>
#include <array>

#include "app/config/train_config_sections.h"

namespace zt::optim::config_detail {

namespace {

using nlohmann::json;

enum class Rule { honoured, section, explained, inert_at, off_section, all_off, refused };

struct DeepSpeedKey {
  std::string_view path;  // dotted, from the top of the document
  Rule rule;
  std::string_view reason;      // explained, inert_at, off_section, all_off, refused: why
  std::string_view inert_json;  // inert_at: the JSON value that changes nothing
  // honoured: what the section's read converts (JsonSection checks it), whether "auto" is accepted (the keys
  // HF's DeepSpeed integration fills), and DeepSpeed's default as describe() prints it.
  JsonType type = JsonType::any;
  bool auto_allowed = false;
  std::string_view deepspeed_default;
};

constexpr std::string_view kLayerUnits =
    "zerotrain reduces, gathers and offloads whole layers, so there is nothing for it to tune";
constexpr std::string_view kMonitors =
    "DeepSpeed's monitors; zerotrain's tracking is --with_tracking (TensorBoard)";

// clang-format off
constexpr auto kDeepSpeedKeys = std::to_array<DeepSpeedKey>({
    // ---- top level ----
    {"train_batch_size", Rule::honoured, {}, {}, JsonType::integer, true, "micro x accumulation x world size"},
    {"train_micro_batch_size_per_gpu", Rule::honoured, {}, {}, JsonType::integer, true, "train_batch_size / (accumulation x world size)"},
    {"gradient_accumulation_steps", Rule::honoured, {}, {}, JsonType::integer, true, "1"},
    {"gradient_clipping", Rule::honoured, {}, {}, JsonType::number, true, "0 (none)"},
    {"wall_clock_breakdown", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"optimizer", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"scheduler", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"fp16", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"bf16", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"bfloat16", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"zero_optimization", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"aio", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"steps_per_print", Rule::explained,
     "DeepSpeed's console print interval; zerotrain's console shows a progress line every step, and "
     "metrics.jsonl/TensorBoard take --log_every (HF's logging steps)", {}, JsonType::any, false, {}},
    {"zero_allow_untested_optimizer", Rule::explained,
     "the optimizer is always zerotrain's own AdamW, so there is no untested optimizer to allow", {}, JsonType::any, false, {}},
    {"zero_force_ds_cpu_optimizer", Rule::explained,
     "the offloaded update is always zerotrain's own CPU AdamW", {}, JsonType::any, false, {}},
    {"prescale_gradients", Rule::inert_at,
     "true (scaling gradients before the reduction) is not implemented; gradients are averaged after it",
     "false", JsonType::any, false, {}},
    {"gradient_predivide_factor", Rule::inert_at,
     "a factor other than 1 is not implemented; gradients are averaged after the reduction", "1", JsonType::any, false, {}},
    {"communication_data_type", Rule::inert_at,
     "reductions run in the gradients' own dtype; another one is not implemented", "null", JsonType::any, false, {}},
    {"fp32_allreduce", Rule::inert_at, "true is not implemented; reductions run in the gradients' dtype",
     "false", JsonType::any, false, {}},
    {"sparse_gradients", Rule::inert_at, "true is not implemented (the model has no sparse gradients)",
     "false", JsonType::any, false, {}},
    {"memory_breakdown", Rule::inert_at,
     "true is not implemented; --estimate_memory and the memory/ metrics say where memory goes", "false", JsonType::any, false, {}},
    {"dump_state", Rule::inert_at, "true is not implemented", "false", JsonType::any, false, {}},
    {"disable_allgather", Rule::inert_at, "true is not implemented", "false", JsonType::any, false, {}},
    {"tensorboard", Rule::off_section, kMonitors, {}, JsonType::any, false, {}},
    {"wandb", Rule::off_section, kMonitors, {}, JsonType::any, false, {}},
    {"csv_monitor", Rule::off_section, kMonitors, {}, JsonType::any, false, {}},
    {"comet", Rule::off_section, kMonitors, {}, JsonType::any, false, {}},
    {"monitor_config", Rule::explained,
     "DeepSpeed reads its monitors from the top-level tensorboard/wandb/csv_monitor/comet keys, not from "
     "here; zerotrain's tracking is --with_tracking", {}, JsonType::any, false, {}},
    {"comms_logger", Rule::off_section, "zerotrain does not log its collectives", {}, JsonType::any, false, {}},
    {"comms_config", Rule::all_off, "zerotrain does not log its collectives", {}, JsonType::any, false, {}},
    {"flops_profiler", Rule::off_section, "not implemented; --wall_clock_breakdown times each part of a step",
     {}, JsonType::any, false, {}},
    {"autotuning", Rule::off_section, "not implemented", {}, JsonType::any, false, {}},
    {"elasticity", Rule::off_section, "not implemented", {}, JsonType::any, false, {}},
    {"hybrid_engine", Rule::off_section,
     "DeepSpeed-Chat's generation engine for RLHF; zerotrain trains a classifier and generates nothing", {}, JsonType::any, false, {}},
    {"data_efficiency", Rule::off_section, "not implemented", {}, JsonType::any, false, {}},
    {"curriculum_learning", Rule::off_section, "not implemented", {}, JsonType::any, false, {}},
    {"nebula", Rule::off_section, "not implemented (checkpoints: --checkpointing_steps)", {}, JsonType::any, false, {}},
    {"amp", Rule::off_section, "not implemented (precision: fp16/bf16 sections or --dtype)", {}, JsonType::any, false, {}},
    {"torch_autocast", Rule::off_section, "not implemented (precision: fp16/bf16 sections or --dtype)", {}, JsonType::any, false, {}},
    {"activation_checkpointing", Rule::all_off,
     "DeepSpeed's checkpointing module (partitioned or CPU-held activations) is not implemented; pass "
     "--gradient_checkpointing (HF's flag) to recompute each encoder layer in the backward", {}, JsonType::any, false, {}},
    {"data_types", Rule::section, {}, {}, JsonType::any, false, {}},
    {"data_types.grad_accum_dtype", Rule::inert_at,
     "gradients always accumulate in f32 here (fp32, or null for DeepSpeed's default, is accepted)",
     R"([null, "fp32"])", JsonType::any, false, {}},
    {"compression_training", Rule::refused, "not implemented", {}, JsonType::any, false, {}},
    {"sparse_attention", Rule::refused, "not implemented", {}, JsonType::any, false, {}},
    {"pipeline", Rule::refused, "pipeline parallelism is not implemented", {}, JsonType::any, false, {}},
    {"checkpoint", Rule::refused, "DeepSpeed's checkpoint options; zerotrain's: --checkpointing_steps", {}, JsonType::any, false, {}},

    // ---- optimizer, scheduler ----
    {"optimizer.type", Rule::honoured, {}, {}, JsonType::string, false, ""},
    {"optimizer.params", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"optimizer.params.lr", Rule::honoured, {}, {}, JsonType::number, true, "0.001"},
    {"optimizer.params.betas", Rule::honoured, {}, {}, JsonType::pair, true, "[0.9, 0.999]"},
    {"optimizer.params.eps", Rule::honoured, {}, {}, JsonType::number, true, "1e-8"},
    {"optimizer.params.weight_decay", Rule::honoured, {}, {}, JsonType::number, true, "0"},
    {"optimizer.params.adam_w_mode", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"optimizer.params.torch_adam", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"optimizer.params.bias_correction", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"optimizer.params.amsgrad", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"optimizer.params.max_grad_norm", Rule::refused,
     "an optimizer-side clipping of old FusedAdam; use the top-level gradient_clipping", {}, JsonType::any, false, {}},
    {"scheduler.type", Rule::honoured, {}, {}, JsonType::string, false, ""},
    {"scheduler.params", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"scheduler.params.warmup_min_lr", Rule::honoured, {}, {}, JsonType::number, true, "0"},
    {"scheduler.params.warmup_max_lr", Rule::honoured, {}, {}, JsonType::number, true, "0.001"},
    {"scheduler.params.warmup_num_steps", Rule::honoured, {}, {}, JsonType::integer, true, "1000"},
    {"scheduler.params.warmup_type", Rule::honoured, {}, {}, JsonType::string, false, "log"},
    {"scheduler.params.total_num_steps", Rule::honoured, {}, {}, JsonType::integer, true, "(required)"},
    {"scheduler.params.warmup_min_ratio", Rule::honoured, {}, {}, JsonType::number, false, "0"},
    {"scheduler.params.cos_min_ratio", Rule::honoured, {}, {}, JsonType::number, false, "0.0001"},
    {"scheduler.params.last_batch_iteration", Rule::honoured, {}, {}, JsonType::integer, false, "-1"},

    // ---- precision ----
    {"fp16.enabled", Rule::honoured, {}, {}, JsonType::boolean, true, "false"},
    {"fp16.loss_scale", Rule::honoured, {}, {}, JsonType::number, false, "0 (dynamic)"},
    {"fp16.initial_scale_power", Rule::honoured, {}, {}, JsonType::integer, false, "16"},
    {"fp16.loss_scale_window", Rule::honoured, {}, {}, JsonType::integer, false, "1000"},
    {"fp16.hysteresis", Rule::honoured, {}, {}, JsonType::integer, false, "2"},
    {"fp16.consecutive_hysteresis", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"fp16.min_loss_scale", Rule::honoured, {}, {}, JsonType::number, false, "1"},
    {"fp16.auto_cast", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"fp16.fp16_master_weights_and_grads", Rule::refused,
     "fp16 master weights are not implemented (the master copy is always f32)", {}, JsonType::any, false, {}},
    {"bf16.enabled", Rule::honoured, {}, {}, JsonType::boolean, true, "false"},
    {"bfloat16.enabled", Rule::honoured, {}, {}, JsonType::boolean, true, "false"},
    {"bf16.immediate_grad_update", Rule::explained,
     "an ordering of DeepSpeed's bf16 optimizer; zerotrain's gradients are reduced once final", {}, JsonType::any, false, {}},
    {"bfloat16.immediate_grad_update", Rule::explained,
     "an ordering of DeepSpeed's bf16 optimizer; zerotrain's gradients are reduced once final", {}, JsonType::any, false, {}},

    // ---- zero_optimization ----
    {"zero_optimization.stage", Rule::honoured, {}, {}, JsonType::integer, true, "0"},
    {"zero_optimization.allgather_partitions", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"zero_optimization.allgather_bucket_size", Rule::honoured, {}, {}, JsonType::integer, false, "5e8"},
    {"zero_optimization.overlap_comm", Rule::honoured, {}, {}, JsonType::boolean, false, "false (true at stage 3)"},
    {"zero_optimization.reduce_scatter", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"zero_optimization.reduce_bucket_size", Rule::honoured, {}, {}, JsonType::integer, true, "5e8"},
    {"zero_optimization.contiguous_gradients", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"zero_optimization.offload_optimizer", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"zero_optimization.offload_param", Rule::honoured, {}, {}, JsonType::object, false, ""},
    {"zero_optimization.sub_group_size", Rule::honoured, {}, {}, JsonType::integer, false, "1e9"},
    {"zero_optimization.stage3_prefetch_bucket_size", Rule::honoured, {}, {}, JsonType::integer, true, "5e7"},
    {"zero_optimization.stage3_param_persistence_threshold", Rule::honoured, {}, {}, JsonType::integer, true, "1e5"},
    {"zero_optimization.stage3_max_live_parameters", Rule::honoured, {}, {}, JsonType::integer, false, "1e9"},
    {"zero_optimization.stage3_max_reuse_distance", Rule::honoured, {}, {}, JsonType::integer, false, "1e9"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", Rule::honoured, {}, {}, JsonType::boolean, true, "false"},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", Rule::honoured, {}, {}, JsonType::boolean, true, "false"},
    {"zero_optimization.cpu_offload", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.cpu_offload_params", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.cpu_offload_use_pin_memory", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.round_robin_gradients", Rule::explained,
     "an ordering of DeepSpeed's offloaded gradient copies; zerotrain copies them layer by layer", {}, JsonType::any, false, {}},
    {"zero_optimization.stage3_model_persistence_threshold", Rule::explained, kLayerUnits, {}, JsonType::any, false, {}},
    {"zero_optimization.memory_efficient_linear", Rule::explained,
     "DeepSpeed's stage-3 linear layer implementation; zerotrain's layers are its own", {}, JsonType::any, false, {}},
    {"zero_optimization.ignore_unused_parameters", Rule::explained,
     "the model has no unused parameters", {}, JsonType::any, false, {}},
    {"zero_optimization.log_trace_cache_warnings", Rule::explained, "zerotrain has no trace cache", {}, JsonType::any, false, {}},
    {"zero_optimization.elastic_checkpoint", Rule::inert_at, "elastic checkpoints are not implemented",
     "false", JsonType::any, false, {}},
    {"zero_optimization.load_from_fp32_weights", Rule::inert_at,
     "resuming always loads the f32 master weights", "true", JsonType::any, false, {}},
    {"zero_optimization.legacy_stage1", Rule::inert_at, "DeepSpeed's old stage 1 is not implemented",
     "false", JsonType::any, false, {}},
    {"zero_optimization.stage3_module_granularity_threshold", Rule::inert_at, kLayerUnits, "0", JsonType::any, false, {}},
    {"zero_optimization.stage3_use_all_reduce_for_fetch_params", Rule::inert_at, "not implemented", "false", JsonType::any, false, {}},
    {"zero_optimization.zero_hpz_partition_size", Rule::inert_at,
     "ZeRO++ hierarchical partitioning is not implemented", "1", JsonType::any, false, {}},
    {"zero_optimization.zero_quantized_weights", Rule::inert_at, "ZeRO++ quantization is not implemented",
     "false", JsonType::any, false, {}},
    {"zero_optimization.zero_quantized_nontrainable_weights", Rule::inert_at,
     "ZeRO++ quantization is not implemented", "false", JsonType::any, false, {}},
    {"zero_optimization.zero_quantized_gradients", Rule::inert_at, "ZeRO++ quantization is not implemented",
     "false", JsonType::any, false, {}},
    {"zero_optimization.mics_shard_size", Rule::inert_at, "MiCS is not implemented", "-1", JsonType::any, false, {}},
    {"zero_optimization.mics_hierarchical_params_gather", Rule::inert_at, "MiCS is not implemented", "false", JsonType::any, false, {}},
    {"zero_optimization.pipeline_loading_checkpoint", Rule::inert_at, "not implemented", "false", JsonType::any, false, {}},
    {"zero_optimization.override_module_apply", Rule::inert_at, "zerotrain patches no module", "true", JsonType::any, false, {}},
    {"zero_optimization.enable_sanity_checks", Rule::inert_at, "not implemented", "false", JsonType::any, false, {}},
    {"zero_optimization.use_multi_rank_bucket_allreduce", Rule::inert_at, kLayerUnits, "true", JsonType::any, false, {}},
    {"zero_optimization.cpu_offload_param", Rule::refused,
     "not a DeepSpeed name (its legacy key is cpu_offload_params)", {}, JsonType::any, false, {}},
    {"zero_optimization.stage3_allgather_sequential", Rule::refused, "not implemented", {}, JsonType::any, false, {}},
    {"zero_optimization.stage3_partition_stream_chunk_size", Rule::refused, "not implemented", {}, JsonType::any, false, {}},
    {"zero_optimization.zeropp_loco_param", Rule::refused, "ZeRO++ LoCo is not implemented", {}, JsonType::any, false, {}},
    {"zero_optimization.leaf_module", Rule::refused, "not implemented", {}, JsonType::any, false, {}},
    {"zero_optimization.zenflow", Rule::refused, "ZenFlow is not implemented", {}, JsonType::any, false, {}},

    // ---- offload sections ----
    {"zero_optimization.offload_optimizer.device", Rule::honoured, {}, {}, JsonType::string, true, "none"},
    {"zero_optimization.offload_optimizer.pin_memory", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.offload_optimizer.nvme_path", Rule::honoured, {}, {}, JsonType::string, false, ""},
    {"zero_optimization.offload_optimizer.buffer_count", Rule::honoured, {}, {}, JsonType::integer, false, "4"},
    {"zero_optimization.offload_optimizer.pipeline_read", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.offload_optimizer.pipeline_write", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.offload_optimizer.fast_init", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.offload_optimizer.ratio", Rule::honoured, {}, {}, JsonType::number, false, "1"},
    {"zero_optimization.offload_param.device", Rule::honoured, {}, {}, JsonType::string, true, "none"},
    {"zero_optimization.offload_param.pin_memory", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"zero_optimization.offload_param.nvme_path", Rule::honoured, {}, {}, JsonType::string, false, ""},
    {"zero_optimization.offload_param.buffer_count", Rule::honoured, {}, {}, JsonType::integer, false, "5"},
    {"zero_optimization.offload_param.buffer_size", Rule::honoured, {}, {}, JsonType::integer, false, "1e8"},
    {"zero_optimization.offload_param.max_in_cpu", Rule::honoured, {}, {}, JsonType::integer, false, "1e9"},
    {"zero_optimization.offload_param.fast_init", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},

    // ---- aio ----
    {"aio.block_size", Rule::honoured, {}, {}, JsonType::integer, false, "1048576"},
    {"aio.queue_depth", Rule::honoured, {}, {}, JsonType::integer, false, "8"},
    {"aio.thread_count", Rule::honoured, {}, {}, JsonType::integer, false, "1"},
    {"aio.intra_op_parallelism", Rule::honoured, {}, {}, JsonType::integer, false, "1"},
    {"aio.single_submit", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
    {"aio.overlap_events", Rule::honoured, {}, {}, JsonType::boolean, false, "true"},
    {"aio.use_gds", Rule::honoured, {}, {}, JsonType::boolean, false, "false"},
});
// clang-format on

const DeepSpeedKey* find_key(std::string_view path) {
  const auto it = std::find_if(kDeepSpeedKeys.begin(), kDeepSpeedKeys.end(),
                               [&](const DeepSpeedKey& k) { return k.path == path; });
  return it == kDeepSpeedKeys.end() ? nullptr : &*it;
}

std::string child_path(std::string_view parent, std::string_view key) {
  return parent.empty() ? std::string(key) : str(parent, ".", key);
}

// The names the table declares directly under `parent`, for "did you mean".
std::vector<std::string_view> names_under(std::string_view parent) {
  std::vector<std::string_view> names;
  for (const DeepSpeedKey& k : kDeepSpeedKeys) {
    const std::string_view p = k.path;
    if (parent.empty()) {
      if (p.find('.') == std::string_view::npos) names.push_back(p);
    } else if (p.size() > parent.size() + 1 && p.starts_with(parent) && p[parent.size()] == '.' &&
               p.find('.', parent.size() + 1) == std::string_view::npos) {
      names.push_back(p.substr(parent.size() + 1));
    }
  }
  return names;
}

// Whether a value is "off": false, 0, null, or an object/array of such values.
bool all_off(const json& value) {
  if (value.is_object() || value.is_array()) {
    return std::all_of(value.begin(), value.end(), [](const json& v) { return all_off(v); });
  }
  return value.is_null() || (value.is_boolean() && !value.get<bool>()) ||
         (value.is_number() && value.get<double>() == 0.0);
}

class KeyChecker {
 public:
  KeyChecker(TrainConfig& config, const std::set<std::string, std::less<>>& read, std::string_view source)
      : c_(config), read_(read), source_(source) {}

  void check_object(const json& object, const std::string& parent) {
    for (const auto& [key, value] : object.items()) check_key(child_path(parent, key), key, value, parent);
  }

 private:
  std::string where() const { return str("DeepSpeed config '", source_, "': "); }

  void record(const std::string& path, JsonKeyVerdict::Use use, std::string note) {
    c_.deepspeed_keys.verdicts.push_back({path, use, std::move(note)});
  }
  // Every leaf under `value` (or `path` itself for a leaf), explained by `reason`.
  void explain_all(const std::string& path, const json& value, std::string_view reason) {
    if (value.is_object() && !value.empty()) {
      for (const auto& [key, v] : value.items()) explain_all(child_path(path, key), v, reason);
      return;
    }
    record(path, JsonKeyVerdict::Use::explained, std::string(reason));
  }

  void check_key(const std::string& path, std::string_view key, const json& value,
                 const std::string& parent) {
    const DeepSpeedKey* entry = find_key(path);
    if (read_.contains(path)) {
      if (value.is_object()) {
        check_object(value, path);
        return;
      }
      if (const auto why = c_.deepspeed_keys.explained.find(path); why != c_.deepspeed_keys.explained.end()) {
        record(path, JsonKeyVerdict::Use::explained, why->second);
      } else {
        const auto honoured_note = c_.deepspeed_keys.notes.find(path);
        std::string note = honoured_note == c_.deepspeed_keys.notes.end() ? "" : honoured_note->second;
        if (entry != nullptr && !entry->deepspeed_default.empty())
          note += str(note.empty() ? "" : "; ", "DeepSpeed's default ", entry->deepspeed_default);
        record(path, JsonKeyVerdict::Use::honoured, std::move(note));
      }
      return;
    }
    ZT_CHECK(entry != nullptr, where(), "unknown key '", path, "'", suggestion(key, names_under(parent)));
    switch (entry->rule) {
      case Rule::honoured:
        ZT_FAIL(where(), "key '", path, "' does not apply to this configuration (",
                path.starts_with("scheduler.params.") ? "it is not a parameter of this scheduler type"
                                                      : "its section did not read it",
                "); remove it");
      case Rule::explained:
        explain_all(path, value, entry->reason);
        return;
      case Rule::section:
        ZT_CHECK(value.is_object(), where(), "key '", path, "' must be a JSON object, got ",
                 value.type_name());
        check_object(value, path);
        return;
      case Rule::inert_at: {
        const json inert = json::parse(entry->inert_json);
        const bool accepted =
            inert.is_array() ? std::find(inert.begin(), inert.end(), value) != inert.end() : value == inert;
        ZT_CHECK(accepted, where(), "key '", path, "' is ", value.dump(), ": ", entry->reason,
                 inert.is_array() ? "" : str(" (set it to ", inert.dump(), " or remove it)"));
        record(
            path, JsonKeyVerdict::Use::explained,
            inert.is_array()
                ? str(value.dump(), " changes nothing: ", entry->reason)
                : str(inert.dump(), " (DeepSpeed's default) changes nothing; other values: ", entry->reason));
        return;
      }
      case Rule::off_section: {
        ZT_CHECK(value.is_object(), where(), "key '", path, "' must be a JSON object, got ",
                 value.type_name());
        const auto enabled = value.find("enabled");
        const bool on = enabled != value.end() && !(enabled->is_boolean() && !enabled->get<bool>());
        ZT_CHECK(!on, where(), "key '", path, ".enabled' is ", on ? enabled->dump() : "", ": ", entry->reason,
                 " (set it to false or remove the section)");
        explain_all(path, value, str(path, " is disabled: nothing to do (enabled: ", entry->reason, ")"));
        return;
      }
      case Rule::all_off:
        ZT_CHECK(all_off(value), where(), "key '", path, "' is ", value.dump(), ": ", entry->reason,
                 " (off, at its defaults, it is accepted)");
        explain_all(path, value, str(path, " is off: nothing to do (on: ", entry->reason, ")"));
        return;
      case Rule::refused:
        ZT_FAIL(where(), "key '", path,
                "' is a DeepSpeed setting that zerotrain does not implement: ", entry->reason, "; remove it");
    }
  }

  TrainConfig& c_;
  const std::set<std::string, std::less<>>& read_;
  std::string_view source_;
};

}  // namespace

bool declared_auto_allowed(std::string_view path, JsonType type) {
  const DeepSpeedKey* row = find_key(path);
  ZT_CHECK(row != nullptr && row->rule == Rule::honoured && row->type == type,
           "internal: the DeepSpeed key '", path,
           "' is read but not declared honoured with that type in kDeepSpeedKeys (train_config_keys.cpp)");
  return row->auto_allowed;
}

void check_deepspeed_keys(TrainConfig& config, const json& document,
                          const std::set<std::string, std::less<>>& read, std::string_view source) {
  config.deepspeed_keys.verdicts.clear();
  KeyChecker(config, read, source).check_object(document, "");
}

void describe_deepspeed_keys(const TrainConfig& config, std::ostream& out) {
  if (config.deepspeed_keys.verdicts.empty()) return;
  out << "deepspeed config keys\n";
  for (const JsonKeyVerdict& key : config.deepspeed_keys.verdicts) {
    out << "  " << key.path << "  " << (key.use == JsonKeyVerdict::Use::honoured ? "honoured" : "explained");
    if (!key.note.empty()) out << ": " << key.note;
    out << "\n";
  }
}

}  // namespace zt::optim::config_detail
