// TrainConfig's core: names, resolve() running the sections in order, the run-level keys, and describe().
// Each section lives in its own train_config_<section>.cpp (see train_config_sections.h).
#include "app/config/train_config.h"

#include <iomanip>
#include <sstream>

#include "app/config/train_config_sections.h"
#include "runtime/memory_size.h"

namespace zt::optim {

using nlohmann::json;

namespace config_detail {

std::string show_double(double value) {
  std::ostringstream out;
  out << std::setprecision(10) << value;
  return out.str();
}

std::string show_bool(bool value) {
  return value ? "true" : "false";
}

std::string show_checkpointing(const CheckpointingSteps& steps) {
  switch (steps.kind) {
    case CheckpointingSteps::Kind::none:
      return "none";
    case CheckpointingSteps::Kind::epoch:
      return "epoch";
    case CheckpointingSteps::Kind::steps:
      return std::to_string(steps.every);
  }
  return "?";
}

void set_json_origin(TrainConfig& config, const std::string& key, const std::string& path) {
  config.origins[key] = Origin::json;
  config.origin_notes[key] = path;
}

int64_t checked_product(int64_t a, int64_t b, std::string_view what) {
  int64_t product = 0;
  ZT_CHECK(!__builtin_mul_overflow(a, b, &product), what, " overflows: ", a, " x ", b);
  return product;
}

void resolve_world_size(ResolveContext& context) {
  TrainConfig& config = context.config;
  const int launched = context.inputs.world_size;
  ZT_CHECK(launched >= 1, "world size must be at least 1, got ", launched);
  if (config.origin_of("world_size") == Origin::flag) {
    ZT_CHECK(launched == 1 || launched == config.world_size, "--world_size ", config.world_size,
             " contradicts the ", launched, " ranks this run was started with");
  } else if (config.origin_of("world_size") == Origin::accelerate) {
    ZT_CHECK(launched == 1 || launched == config.world_size, "accelerate config '", config.config_file,
             "' num_processes ", config.world_size, " contradicts the ", launched,
             " ranks this run was started with");
  } else if (launched != 1) {
    config.world_size = launched;
    config.origins["world_size"] = Origin::derived;
    config.origin_notes["world_size"] = "ranks the run was started with";
  }
}

void resolve_run_keys(ResolveContext& context) {
  const TrainConfig& c = context.config;
  // As run_glue_no_trainer.py, --report_to only says where --with_tracking goes; alone it would do nothing.
  ZT_CHECK(c.with_tracking || c.origin_of("report_to") == Origin::default_value, "--report_to ", c.report_to,
           " needs --with_tracking (run_glue_no_trainer.py ignores --report_to without it)");
  ZT_CHECK(!c.with_tracking || !c.output_dir.empty(),
           "--with_tracking writes TensorBoard event files under <output_dir>/runs/: give --output_dir");
  if (context.top == nullptr) return;
  JsonSection& top = *context.top;
  // steps_per_print (DeepSpeed's console interval) and zero_allow_untested_optimizer are explained by the key
  // table (train_config_keys.cpp): neither changes what is logged or run.
  reconcile(context, context.config.wall_clock_breakdown, "wall_clock_breakdown",
            top.boolean("wall_clock_breakdown"));
}

// ---------------------------------------------------------------------------------------------------------
// DescribeWriter

void DescribeWriter::group(std::string_view name) {
  out_ << name << "\n";
}

void DescribeWriter::line(const std::string& key, const std::string& value, std::string_view effective) {
  const Origin origin = config_.origin_of(key);
  const auto note = config_.origin_notes.find(key);
  std::string where(origin_name(origin));
  if (note != config_.origin_notes.end()) where += (origin == Origin::json ? " " : ", ") + note->second;
  // JSON keys are described by their path already; "json <same path>" would repeat it.
  if (origin == Origin::json && note != config_.origin_notes.end() && note->second == key) where = "json";
  out_ << "  " << std::left << std::setw(60) << key << " " << std::setw(24)
       << (value.empty() ? "(none)" : value) << " [" << where << "]";
  if (!effective.empty()) out_ << "  effective: " << effective;
  out_ << "\n";
}

void DescribeWriter::notice(std::string_view text) {
  out_ << "  note: " << text << "\n";
}

}  // namespace config_detail

using namespace config_detail;

std::string_view origin_name(Origin origin) {
  switch (origin) {
    case Origin::default_value:
      return "default";
    case Origin::flag:
      return "flag";
    case Origin::json:
      return "json";
    case Origin::json_auto:
      return "json auto";
    case Origin::derived:
      return "derived";
    case Origin::accelerate:
      return "accelerate";
  }
  return "?";
}

std::string_view compute_dtype_name(ComputeDType dtype) {
  switch (dtype) {
    case ComputeDType::f32:
      return "f32";
    case ComputeDType::bf16:
      return "bf16";
    case ComputeDType::f16:
      return "f16";
  }
  return "?";
}

std::string_view device_choice_name(DeviceChoice device) {
  switch (device) {
    case DeviceChoice::auto_detect:
      return "auto";
    case DeviceChoice::cpu:
      return "cpu";
    case DeviceChoice::cuda:
      return "cuda";
  }
  return "?";
}

Origin TrainConfig::origin_of(std::string_view key) const {
  const auto it = origins.find(key);
  return it == origins.end() ? Origin::default_value : it->second;
}

// ---------------------------------------------------------------------------------------------------------
// Resolution

void TrainConfig::resolve(const ResolveInputs& inputs) {
  if (deepspeed_config.empty() && !accelerate_deepspeed_json.empty()) {
    try {
      resolve_with_json_text(accelerate_deepspeed_json, "built from deepspeed_config", inputs);
    } catch (const Error& e) {
      throw with_accelerate_key(*this, e);
    }
    mark_accelerate_origins(*this);
    return;
  }
  if (deepspeed_config.empty()) {
    resolve_impl(nullptr, "", inputs);
    return;
  }
  resolve_with_json_text(read_config_file(deepspeed_config), deepspeed_config, inputs);
}

void TrainConfig::resolve_with_json_text(std::string_view json_text, std::string_view source,
                                         const ResolveInputs& inputs) {
  ZT_CHECK(json_text.size() <= kMaxDeepSpeedConfigBytes, "DeepSpeed config '", source, "' is larger than ",
           kMaxDeepSpeedConfigBytes >> 20, " MiB, the limit for a config file (is it the right file?)");
  const json document = parse_config_json(json_text, source);
  resolve_impl(&document, source, inputs);
}

void TrainConfig::resolve_impl(const json* ds, std::string_view source, const ResolveInputs& inputs) {
  ZT_CHECK(!resolved, "TrainConfig::resolve called twice");
  ResolveContext context{.config = *this, .top = nullptr, .source = std::string(source), .inputs = inputs};
  std::optional<JsonSection> top;
  if (ds != nullptr) {
    top.emplace(*ds, "", context.source);
    context.top = &*top;
  }
  resolve_data_paths(context);
  resolve_world_size(context);
  resolve_batch_sizes(context);
  resolve_run_keys(context);
  resolve_optimizer(context);
  resolve_steps(context);
  resolve_schedule(context);
  resolve_precision(context);
  resolve_zero(context);
  resolve_disk_tier(context);
  resolve_offload_ratio();
  ZT_CHECK(!(offload_overlap_update && no_offload_overlap_update),
           "--offload_overlap_update and --no_offload_overlap_update contradict each other: give one");
  ZT_CHECK(
      !offload_overlap_update || offload_overlap_update_applies(),
      "--offload_overlap_update needs zero_optimization.offload_optimizer.device cpu, world size 1 and no "
      "--offload_delayed_update (which overlaps the update already); got offload_optimizer ",
      zero.offload_optimizer.nvme.enabled ? "nvme"
      : zero.offload_optimizer.enabled    ? "cpu"
                                          : "none",
      zero.offload_param.nvme.enabled ? ", offload_param nvme" : "", ", world size ", world_size,
      offload_delayed_update ? ", --offload_delayed_update" : "");
  ZT_CHECK(
      !overlap_optimizer || (device != DeviceChoice::cpu && !zero.offload_optimizer.enabled &&
                             zero.stage != 1 && (zero.stage == 0 || world_size == 1)),
      "--overlap_optimizer overlaps the GPU AdamW with the next forward: it needs a GPU run, the optimizer "
      "on the device (no offload_optimizer; --offload_overlap_update is the offload's) and stage 0, or "
      "stage 2/3 at world size 1; got stage ",
      zero.stage, ", world size ", world_size, zero.offload_optimizer.enabled ? ", offload_optimizer" : "",
      device == DeviceChoice::cpu ? ", device cpu (the CPU backend has no streams)" : "");
  ZT_CHECK(!offload_delayed_update || zero.offload_optimizer.enabled,
           "--offload_delayed_update needs zero_optimization.offload_optimizer.device cpu (or nvme) in the "
           "DeepSpeed config (it delays the CPU optimizer update)");
  if (top) check_deepspeed_keys(*this, *ds, top->read_paths(), source);
  resolved = true;
}

// ---------------------------------------------------------------------------------------------------------
// describe()

// --offload_ratio into zero_optimization.offload_optimizer.ratio, and a partial offload's conditions: the
// state in host memory (cpu) at stages 1-3, the update inside step() (optim/zero/engine_options.h).
void TrainConfig::resolve_offload_ratio() {
  OffloadSettings& optimizer = zero.offload_optimizer;
  const std::string key = "zero_optimization.offload_optimizer.ratio";
  if (offload_ratio > 0.0) {
    ZT_CHECK(origin_of(key) != Origin::json || optimizer.ratio == offload_ratio, "--offload_ratio ",
             offload_ratio, " contradicts ", key, " ", optimizer.ratio, " in the DeepSpeed config: give one");
    optimizer.ratio = offload_ratio;
    origins[key] = Origin::flag;
    origin_notes[key] = "--offload_ratio";
  }
  if (optimizer.ratio >= 1.0) return;
  const double r = optimizer.ratio;
  ZT_CHECK(
      optimizer.enabled && zero.stage >= 1, "offload_optimizer.ratio ", r,
      " (a partial optimizer offload) needs zero_optimization.offload_optimizer.device cpu at ZeRO stage "
      "1, 2 or 3; got device ",
      optimizer.enabled ? "cpu" : "none", " at stage ", zero.stage);
  ZT_CHECK(!optimizer.nvme.enabled, "offload_optimizer.ratio ", r,
           ": a partial offload keeps its host part in host memory; device nvme (the disk tier) is not built "
           "for it");
  ZT_CHECK(!zero.offload_param.enabled, "offload_optimizer.ratio ", r,
           ": not with offload_param (the device part's AdamW writes the parameters on the device)");
  ZT_CHECK(!offload_delayed_update, "offload_optimizer.ratio ", r,
           ": not with --offload_delayed_update (a partial offload updates both parts inside the step)");
  ZT_CHECK(!offload_overlap_update, "offload_optimizer.ratio ", r,
           ": not with --offload_overlap_update (a partial offload updates both parts inside the step)");
}

bool TrainConfig::offload_overlap_update_applies() const {
  return zero.offload_optimizer.enabled && zero.offload_optimizer.ratio >= 1.0 &&
         !zero.offload_optimizer.nvme.enabled && !zero.offload_param.nvme.enabled &&
         !offload_delayed_update && world_size == 1;
}

std::string TrainConfig::describe() const {
  std::ostringstream text;
  text << "zerotrain configuration (world_size " << world_size;
  if (!deepspeed_config.empty()) text << ", DeepSpeed config " << deepspeed_config;
  if (!config_file.empty()) text << ", accelerate config " << config_file;
  text << ")\n";
  DescribeWriter out(*this, text);
  describe_accelerate(*this, out);
  describe_data(*this, out);

  out.group("model");
  out.line("model_name_or_path", model_name_or_path.empty() ? "(embedded default)" : model_name_or_path);
  out.line("ignore_mismatched_sizes", show_bool(ignore_mismatched_sizes));
  out.line("gradient_checkpointing", show_bool(gradient_checkpointing),
           gradient_checkpointing
               ? "each layer's forward recomputed in the backward; one layer's activations kept"
               : "");

  describe_optimizer(*this, out);
  describe_schedule(*this, out);
  describe_precision(*this, out);
  describe_zero(*this, out);
  describe_aio(*this, out);

  out.group("run");
  out.line("device", std::string(device_choice_name(device)));
  out.line("gpu_memory_limit", gpu_memory_limit == 0 ? "" : format_memory_size(gpu_memory_limit));
  out.line("host_memory_limit", host_memory_limit == 0 ? "" : format_memory_size(host_memory_limit));
  out.line("world_size", std::to_string(world_size));
  out.line("collective_timeout",
           collective_timeout_seconds == 0 ? "0 (none)" : str(collective_timeout_seconds, " s"));
  out.line("debug_collectives", show_bool(debug_collectives));
  out.line("seed", std::to_string(seed));
  out.line("output_dir", output_dir);
  out.line("overwrite_output_dir", show_bool(overwrite_output_dir));
  out.line("checkpointing_steps", show_checkpointing(checkpointing_steps));
  out.line("resume_from_checkpoint", resume_from_checkpoint);
  out.line("log_every", std::to_string(log_every));
  out.line("with_tracking", show_bool(with_tracking),
           with_tracking ? str("TensorBoard: ", output_dir, "/runs/glue_no_trainer") : std::string());
  out.line("report_to", report_to);
  out.line("wall_clock_breakdown", show_bool(wall_clock_breakdown));
  out.line("estimate_memory", show_bool(estimate_memory));
  out.line("auto_plan", show_bool(auto_plan));
  describe_deepspeed_keys(*this, text);
  return text.str();
}

}  // namespace zt::optim
