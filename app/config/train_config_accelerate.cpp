// Accelerate's config file: train_mrpc --config_file cfg.yaml takes the YAML `accelerate config` writes.
//
// Note [Accelerate config files]
// `accelerate launch --config_file cfg.yaml run_glue_no_trainer.py ...` is how the users we replace start a
// run; train_mrpc --config_file cfg.yaml takes the same file unchanged. Every key is mapped to one of our
// settings, or accepted with the reason it changes nothing, or refused with the reason; describe() lists
// each under "accelerate config" with its effect, and the settings it sets show the origin [accelerate].
//   distributed_type   NO (one rank), MULTI_GPU (data parallel = ZeRO stage 0 over num_processes ranks),
//                      MULTI_CPU (the same on the CPU), DEEPSPEED (deepspeed_config below); others refused
//   num_processes      -> world_size (in-process ranks); must agree with --world_size and with a launcher
//   mixed_precision    no/bf16/fp16 -> dtype f32/bf16/f16; fp8 refused
//   use_cpu            true -> device cpu
//   debug              -> debug_collectives (Accelerate's debug mode checks collectives across ranks too)
//   deepspeed_config   zero_stage, offload_optimizer_device, offload_param_device,
//                      offload_optimizer_nvme_path, offload_param_nvme_path (none: no disk offload),
//                      gradient_accumulation_steps, gradient_clipping, zero3_save_16bit_model become the
//                      DeepSpeed JSON Accelerate builds from them (zero_optimization.stage,
//                      .offload_*.device, .offload_*.nvme_path, gradient_accumulation_steps,
//                      gradient_clipping, .stage3_gather_16bit_weights_on_model_save), resolved by the
//                      DeepSpeed reader like a --deepspeed_config file, so the same checks apply (offload
//                      devices included); deepspeed_config_file -> --deepspeed_config. As in Accelerate, a
//                      config file excludes the other deepspeed_config keys and mixed_precision other than
//                      no.
//   single-node keys   num_machines 1, machine_rank 0, main_process_ip/port null, rdzv_backend, same_network,
//                      main_training_function, deepspeed_multinode_launcher: accepted, explained; a
//                      multi-node value is refused
//   other backends     downcast_bf16 no, tpu_* empty/false, dynamo_backend NO, gpu_ids all, fsdp_config /
//                      megatron_lm_config / ipex_config / mpirun_config empty, enable_cpu_affinity false:
//                      accepted; anything else refused (we have none of them)
// A key that contradicts a flag, or the DeepSpeed JSON, is an error naming both, as for the JSON (Note [Flags
// versus the DeepSpeed JSON]); an unknown key is an error naming it.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <map>
#include <sstream>

#include "app/config/train_config_sections.h"

namespace zt::optim {

using config_detail::show_bool;
using config_detail::suggestion;

namespace {

constexpr size_t kMaxAccelerateConfigBytes = kMaxDeepSpeedConfigBytes;  // read_config_file's bound

class AccelerateReader {
 public:
  AccelerateReader(TrainConfig& config, std::string_view source) : c_(config), source_(source) {}

  std::string where() const { return str("accelerate config '", source_, "': "); }

  void read(std::string_view text) {
    check_nesting(text);
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      ZT_FAIL(where(), "not valid YAML (line ", e.mark.line + 1, ", column ", e.mark.column + 1,
              "): ", e.msg);
    }
    ZT_CHECK(root.IsMap(), where(), "expected a mapping of keys (the file `accelerate config` writes)");
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      ZT_CHECK(!top_.contains(key), where(), "key '", key, "' appears twice");
      top_.emplace(key, entry.second);  // Node's operator= would write through to a shared node
      order_.push_back(key);
    }
    apply();
  }

 private:
  // yaml-cpp parses nested nodes by recursion, so a deeply nested file ("a: [[[[..." or "- - - - ...")
  // would overflow the stack before any error. Each level of nesting needs an open bracket, a sequence
  // indicator ("- ", "? ") or a column of indentation, so their sum on a line bounds its depth; it is checked
  // before yaml-cpp sees the text. Quotes and comments are skipped; block scalars are not told apart (an
  // Accelerate config has none).
  void check_nesting(std::string_view text) const {
    int flow_depth = 0;
    int line = 1;
    size_t i = 0;
    while (i < text.size()) {
      int columns = 0;
      while (i < text.size() && text[i] == ' ') ++columns, ++i;
      int indicators = 0;
      while (i + 1 < text.size() && (text[i] == '-' || text[i] == '?') && (text[i + 1] == ' ')) {
        ++indicators;
        i += 2;
        while (i < text.size() && text[i] == ' ') ++columns, ++i;
      }
      char quote = 0;
      for (; i < text.size() && text[i] != '\n'; ++i) {
        const char ch = text[i];
        if (quote != 0) {
          if (ch == quote) quote = 0;
          continue;
        }
        if (ch == '\'' || ch == '"') {
          quote = ch;
        } else if (ch == '#' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '\t')) {
          while (i < text.size() && text[i] != '\n') ++i;
          break;
        } else if (ch == '[' || ch == '{') {
          ++flow_depth;
        } else if ((ch == ']' || ch == '}') && flow_depth > 0) {
          --flow_depth;
        }
        ZT_CHECK(flow_depth + indicators + columns <= kMaxConfigNesting, where(), "line ", line,
                 " nests more than ", kMaxConfigNesting,
                 " levels deep (brackets, '- ' and indentation; an Accelerate config nests two)");
      }
      ZT_CHECK(columns + indicators <= kMaxConfigNesting, where(), "line ", line, " nests more than ",
               kMaxConfigNesting,
               " levels deep (brackets, '- ' and indentation; an Accelerate config nests two)");
      ++i;
      ++line;
    }
  }

  // ---- reading values ----
  std::string text_of(const YAML::Node& node) const {
    if (!node.IsDefined() || node.IsNull()) return "null";
    if (node.IsScalar()) return node.Scalar();
    std::ostringstream out;
    out << YAML::Dump(node);
    std::string s = out.str();
    for (char& ch : s)
      if (ch == '\n') ch = ' ';
    return s;
  }
  bool is_null(const YAML::Node& node) const { return !node.IsDefined() || node.IsNull(); }
  bool empty_value(const YAML::Node& node) const {
    return is_null(node) || ((node.IsMap() || node.IsSequence()) && node.size() == 0) ||
           (node.IsScalar() && node.Scalar().empty());
  }
  bool boolean(const std::string& key, const YAML::Node& node) const {
    const std::string v = text_of(node);
    if (v == "true" || v == "True") return true;
    if (v == "false" || v == "False") return false;
    ZT_FAIL(where(), key, " must be true or false, got '", v, "'");
  }
  int64_t integer(const std::string& key, const YAML::Node& node, int64_t minimum) const {
    int64_t v = 0;
    ZT_CHECK(node.IsScalar() && YAML::convert<int64_t>::decode(node, v), where(), key,
             " must be an integer, got '", text_of(node), "'");
    ZT_CHECK(v >= minimum, where(), key, " must be at least ", minimum, ", got ", v);
    return v;
  }
  double number(const std::string& key, const YAML::Node& node) const {
    double v = 0;
    ZT_CHECK(node.IsScalar() && YAML::convert<double>::decode(node, v), where(), key,
             " must be a number, got '", text_of(node), "'");
    return v;
  }
  std::string lower(std::string s) const {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  }

  // ---- recording ----
  void record(const std::string& key, const YAML::Node& node, std::string effect) {
    c_.accelerate_keys.push_back({key, text_of(node), std::move(effect)});
    c_.origins["accelerate." + key] = Origin::accelerate;
  }
  // Sets a flag-backed setting from `key`, unless the flag says otherwise (an error) or agrees.
  template <typename T>
  void set(T& field, const T& value, const std::string& setting, const std::string& key,
           const std::string& shown) {
    if (c_.origin_of(setting) == Origin::flag) {
      ZT_CHECK(field == value, "--", setting, " ", shown_current(setting), " contradicts ", where(), key,
               " (", shown, ")");
      return;
    }
    field = value;
    c_.origins[setting] = Origin::accelerate;
    c_.origin_notes[setting] = key;
  }
  std::string shown_current(const std::string& setting) const {
    if (setting == "dtype") return std::string(compute_dtype_name(c_.dtype));
    if (setting == "device") return std::string(device_choice_name(c_.device));
    if (setting == "world_size") return std::to_string(c_.world_size);
    if (setting == "debug_collectives") return show_bool(c_.debug_collectives);
    return "?";
  }

  // Accepted only at `accepted` (a value meaning "not used"); anything else refused with `why`.
  void only_default(const std::string& key, const YAML::Node& node, bool accepted, std::string_view why,
                    std::string effect) {
    ZT_CHECK(accepted, where(), key, " ", text_of(node), ": ", why);
    record(key, node, std::move(effect));
  }

  void apply();
  void apply_deepspeed(const YAML::Node& ds, const std::string& distributed_type);

  TrainConfig& c_;
  std::string_view source_;
  std::map<std::string, YAML::Node> top_;
  std::vector<std::string> order_;
};

void AccelerateReader::apply() {
  static const std::vector<std::string_view> kKnown = {"compute_environment",
                                                       "distributed_type",
                                                       "mixed_precision",
                                                       "num_processes",
                                                       "num_machines",
                                                       "machine_rank",
                                                       "main_process_ip",
                                                       "main_process_port",
                                                       "main_training_function",
                                                       "use_cpu",
                                                       "debug",
                                                       "deepspeed_config",
                                                       "fsdp_config",
                                                       "megatron_lm_config",
                                                       "ipex_config",
                                                       "mpirun_config",
                                                       "downcast_bf16",
                                                       "rdzv_backend",
                                                       "same_network",
                                                       "tpu_env",
                                                       "tpu_use_cluster",
                                                       "tpu_use_sudo",
                                                       "tpu_name",
                                                       "tpu_zone",
                                                       "commands",
                                                       "command_file",
                                                       "gpu_ids",
                                                       "enable_cpu_affinity",
                                                       "dynamo_backend",
                                                       "dynamo_config"};
  for (const std::string& key : order_) {
    ZT_CHECK(std::find(kKnown.begin(), kKnown.end(), key) != kKnown.end(), where(), "unknown key '", key, "'",
             suggestion(key, kKnown), " (keys are those `accelerate config` writes)");
  }
  auto get = [&](const std::string& key) { return top_.contains(key) ? top_.at(key) : YAML::Node(); };

  const std::string type = top_.contains("distributed_type") ? text_of(get("distributed_type")) : "NO";
  const bool single = type == "NO";
  ZT_CHECK(type == "NO" || type == "MULTI_GPU" || type == "MULTI_CPU" || type == "DEEPSPEED", where(),
           "distributed_type ", type,
           " is not supported: zerotrain runs NO, MULTI_GPU, MULTI_CPU (data parallel) and DEEPSPEED (ZeRO)");
  int64_t machines = 1;
  for (const std::string& key : order_) {
    const YAML::Node node = get(key);
    if (key == "compute_environment") {
      only_default(key, node, text_of(node) == "LOCAL_MACHINE", "only LOCAL_MACHINE is supported",
                   "runs on this machine");
    } else if (key == "distributed_type") {
      record(key, node,
             type == "NO"          ? "one rank"
             : type == "DEEPSPEED" ? "ZeRO, as deepspeed_config sets"
                                   : "data parallel over num_processes ranks (ZeRO stage 0)");
    } else if (key == "mixed_precision") {
      const std::string v = lower(text_of(node));
      ZT_CHECK(v == "no" || v == "bf16" || v == "fp16", where(), "mixed_precision ", text_of(node),
               " is not supported: no, bf16 or fp16");
      const bool ds_file = top_.contains("deepspeed_config") && get("deepspeed_config").IsMap() &&
                           get("deepspeed_config")["deepspeed_config_file"].IsDefined();
      if (ds_file || !c_.deepspeed_config.empty()) {
        // Accelerate: with a DeepSpeed config file, precision is the file's fp16/bf16 sections.
        ZT_CHECK(
            v == "no", where(), "mixed_precision ", v,
            " with a DeepSpeed config file: set the precision in its fp16/bf16 section and mixed_precision "
            "to no (Accelerate refuses both too)");
        record(key, node, "precision from the DeepSpeed config file");
        continue;
      }
      const ComputeDType dtype = v == "no"     ? ComputeDType::f32
                                 : v == "bf16" ? ComputeDType::bf16
                                               : ComputeDType::f16;
      set(c_.dtype, dtype, "dtype", key, text_of(node));
      record(key, node, str("dtype ", compute_dtype_name(dtype)));
    } else if (key == "num_processes") {
      const int64_t n = integer(key, node, 1);
      ZT_CHECK(n <= kMaxWorldSize, where(), "num_processes ", n, " is above ", kMaxWorldSize);
      ZT_CHECK(!single || n == 1, where(), "num_processes ", n, " with distributed_type NO (one process)");
      set(c_.world_size, static_cast<int>(n), "world_size", key, std::to_string(n));
      record(key, node, str("world_size ", n, " (in-process ranks)"));
    } else if (key == "num_machines") {
      machines = integer(key, node, 1);
      only_default(key, node, machines == 1, "multi-node runs are not supported (one machine only)",
                   "one machine");
    } else if (key == "machine_rank") {
      only_default(key, node, integer(key, node, 0) == 0, "multi-node runs are not supported (rank 0 only)",
                   "the only machine");
    } else if (key == "main_process_ip" || key == "main_process_port") {
      only_default(key, node, is_null(node), "multi-node rendezvous is not supported (leave it null)",
                   "none; one machine");
    } else if (key == "rdzv_backend" || key == "same_network") {
      record(key, node, "none; one machine needs no rendezvous");
    } else if (key == "main_training_function") {
      record(key, node, "none; train_mrpc is the training program");
    } else if (key == "use_cpu") {
      const bool cpu = boolean(key, node);
      if (cpu) set(c_.device, DeviceChoice::cpu, "device", key, "true");
      record(key, node, cpu ? "device cpu" : "device as --device (auto: the GPU when present)");
    } else if (key == "debug") {
      const bool debug = boolean(key, node);
      set(c_.debug_collectives, debug, "debug_collectives", key, show_bool(debug));
      record(key, node, str("debug_collectives ", show_bool(debug)));
    } else if (key == "deepspeed_config") {
      apply_deepspeed(node, type);
    } else if (key == "fsdp_config" || key == "megatron_lm_config" || key == "ipex_config" ||
               key == "mpirun_config" || key == "tpu_env" || key == "commands" || key == "command_file" ||
               key == "tpu_name" || key == "tpu_zone") {
      only_default(key, node, empty_value(node), "that backend is not supported (leave it empty)", "none");
    } else if (key == "tpu_use_cluster" || key == "tpu_use_sudo" || key == "enable_cpu_affinity") {
      only_default(key, node, !boolean(key, node), "not supported (set it to false)", "none");
    } else if (key == "downcast_bf16") {
      const std::string v = lower(text_of(node));
      only_default(key, node, v == "no" || v == "false", "TPU only (set it to no)", "none; TPU only");
    } else if (key == "gpu_ids") {
      only_default(key, node, text_of(node) == "all" || is_null(node),
                   "choose GPUs with CUDA_VISIBLE_DEVICES (set gpu_ids to all)", "all visible GPUs");
    } else if (key == "dynamo_backend") {
      only_default(key, node, lower(text_of(node)) == "no",
                   "torch.compile has no counterpart here; the kernels are native (set it to NO)", "none");
    } else if (key == "dynamo_config") {
      const bool off = empty_value(node) || (node.IsMap() && node.size() == 1 && node["dynamo_backend"] &&
                                             lower(text_of(node["dynamo_backend"])) == "no");
      only_default(key, node, off, "torch.compile has no counterpart here (leave it empty)", "none");
    }
  }
  if (type == "DEEPSPEED" && !top_.contains("deepspeed_config"))
    apply_deepspeed(YAML::Node(YAML::NodeType::Map), type);
  // MULTI_GPU / MULTI_CPU without num_processes: Accelerate's default is every GPU; we ask instead.
  if (type == "MULTI_CPU") set(c_.device, DeviceChoice::cpu, "device", "distributed_type", "MULTI_CPU");
}

void AccelerateReader::apply_deepspeed(const YAML::Node& ds, const std::string& distributed_type) {
  const std::string k = "deepspeed_config";
  ZT_CHECK(ds.IsMap() || empty_value(ds), where(), k, " must be a mapping of keys");
  if (distributed_type != "DEEPSPEED") {
    ZT_CHECK(empty_value(ds), where(), k, " is set but distributed_type is ", distributed_type,
             " (use DEEPSPEED, or remove deepspeed_config)");
    record(k, ds, "none; distributed_type is not DEEPSPEED");
    return;
  }
  static const std::vector<std::string_view> kKnown = {"deepspeed_config_file",
                                                       "zero_stage",
                                                       "offload_optimizer_device",
                                                       "offload_param_device",
                                                       "offload_optimizer_nvme_path",
                                                       "offload_param_nvme_path",
                                                       "gradient_accumulation_steps",
                                                       "gradient_clipping",
                                                       "zero3_init_flag",
                                                       "zero3_save_16bit_model",
                                                       "deepspeed_multinode_launcher",
                                                       "deepspeed_hostfile",
                                                       "deepspeed_moe_layer_cls_names"};
  std::vector<std::string> keys;
  for (const auto& entry : ds) keys.push_back(entry.first.as<std::string>());
  for (const std::string& key : keys) {
    ZT_CHECK(std::find(kKnown.begin(), kKnown.end(), key) != kKnown.end(), where(), "unknown key '", k, ".",
             key, "'", suggestion(key, kKnown));
  }
  // Accelerate: a DeepSpeed config file carries everything; the inline keys are then an error.
  if (ds["deepspeed_config_file"]) {
    const std::string file = text_of(ds["deepspeed_config_file"]);
    for (const std::string& key : keys) {
      ZT_CHECK(
          key == "deepspeed_config_file" || key == "deepspeed_multinode_launcher" || key == "zero3_init_flag",
          where(), k, ".", key, " together with ", k,
          ".deepspeed_config_file: set it in the DeepSpeed config file (Accelerate refuses both too)");
    }
    if (c_.origin_of("deepspeed_config") == Origin::flag) {
      ZT_CHECK(c_.deepspeed_config == file, "--deepspeed_config ", c_.deepspeed_config, " contradicts ",
               where(), k, ".deepspeed_config_file (", file, ")");
    } else {
      c_.deepspeed_config = file;
      c_.origins["deepspeed_config"] = Origin::accelerate;
      c_.origin_notes["deepspeed_config"] = k + ".deepspeed_config_file";
    }
  } else {
    ZT_CHECK(c_.deepspeed_config.empty(), where(), k, " has its settings inline, and --deepspeed_config ",
             c_.deepspeed_config,
             " gives another DeepSpeed config: keep one (or name the JSON in deepspeed_config_file)");
  }
  // The DeepSpeed JSON Accelerate builds from the inline keys (accelerate/utils/dataclasses.py,
  // DeepSpeedPlugin.__post_init__); keys left out take the flags (Note [Flags versus the DeepSpeed JSON]).
  nlohmann::json json = nlohmann::json::object();
  for (const std::string& key : keys) {
    const YAML::Node node = ds[key];
    const std::string full = k + "." + key;
    if (key == "deepspeed_config_file") {
      record(full, node, "--deepspeed_config");
    } else if (key == "zero_stage") {
      json["zero_optimization"]["stage"] = integer(full, node, std::numeric_limits<int64_t>::min());
      record(full, node, "zero_optimization.stage");
    } else if (key == "offload_optimizer_device" || key == "offload_param_device") {
      const std::string section = key == "offload_optimizer_device" ? "offload_optimizer" : "offload_param";
      json["zero_optimization"][section]["device"] = text_of(node);
      record(full, node, str("zero_optimization.", section, ".device"));
    } else if (key == "offload_optimizer_nvme_path" || key == "offload_param_nvme_path") {
      // Accelerate writes "none" where there is no disk offload; a directory is the section's nvme_path
      // (used with device nvme, ignored otherwise, as in DeepSpeed).
      if (is_null(node) || lower(text_of(node)) == "none") {
        record(full, node, "none");
      } else {
        const std::string section =
            key == "offload_optimizer_nvme_path" ? "offload_optimizer" : "offload_param";
        json["zero_optimization"][section]["nvme_path"] = text_of(node);
        record(full, node, str("zero_optimization.", section, ".nvme_path"));
      }
    } else if (key == "gradient_accumulation_steps") {
      json["gradient_accumulation_steps"] = integer(full, node, 1);
      record(full, node, "gradient_accumulation_steps");
    } else if (key == "gradient_clipping") {
      json["gradient_clipping"] = number(full, node);
      record(full, node, "gradient_clipping (max_grad_norm)");
    } else if (key == "zero3_save_16bit_model") {
      json["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = boolean(full, node);
      record(full, node, "zero_optimization.stage3_gather_16bit_weights_on_model_save");
    } else if (key == "zero3_init_flag") {
      boolean(full, node);
      record(full, node, "none; stage 3 partitions the parameters as the engine is built");
    } else if (key == "deepspeed_multinode_launcher") {
      record(full, node, "none; one machine needs no multi-node launcher");
    } else if (key == "deepspeed_hostfile") {
      only_default(full, node, is_null(node), "multi-node runs are not supported (leave it null)", "none");
    } else if (key == "deepspeed_moe_layer_cls_names") {
      only_default(full, node, empty_value(node), "DeBERTa has no mixture-of-experts layers", "none");
    }
  }
  if (!json.empty()) c_.accelerate_deepspeed_json = json.dump();
}

}  // namespace

void TrainConfig::apply_accelerate_config(std::string_view yaml_text, std::string_view source) {
  ZT_CHECK(yaml_text.size() <= kMaxAccelerateConfigBytes, "accelerate config '", source, "' is larger than ",
           kMaxAccelerateConfigBytes >> 20, " MiB (is it the right file?)");
  if (config_file.empty()) config_file = std::string(source);
  accelerate_keys.clear();
  accelerate_deepspeed_json.clear();
  AccelerateReader(*this, source).read(yaml_text);
}

namespace config_detail {

namespace {

// DeepSpeed JSON path -> the deepspeed_config key of the YAML it was built from.
constexpr std::array<std::pair<std::string_view, std::string_view>, 8> kYamlKey = {{
    {"zero_optimization.stage", "deepspeed_config.zero_stage"},
    {"zero_optimization.offload_optimizer.nvme_path", "deepspeed_config.offload_optimizer_nvme_path"},
    {"zero_optimization.offload_param.nvme_path", "deepspeed_config.offload_param_nvme_path"},
    {"zero_optimization.offload_optimizer.device", "deepspeed_config.offload_optimizer_device"},
    {"zero_optimization.offload_param.device", "deepspeed_config.offload_param_device"},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
     "deepspeed_config.zero3_save_16bit_model"},
    {"gradient_accumulation_steps", "deepspeed_config.gradient_accumulation_steps"},
    {"gradient_clipping", "deepspeed_config.gradient_clipping"},
}};

}  // namespace

Error with_accelerate_key(const TrainConfig& config, const Error& e) {
  std::string context = str("accelerate config '", config.config_file, "'");
  for (const auto& [json_path, yaml_key] : kYamlKey) {
    if (e.message().find(json_path) != std::string::npos) {
      context += str(" ", yaml_key);
      break;
    }
  }
  return with_context(context + ": ", e);
}

// The JSON built from deepspeed_config holds only the YAML's values: each JSON origin becomes the YAML key.
void mark_accelerate_origins(TrainConfig& config) {
  for (auto& [key, origin] : config.origins) {
    if (origin != Origin::json) continue;
    origin = Origin::accelerate;
    std::string& note = config.origin_notes[key];
    for (const auto& [json_path, yaml_key] : kYamlKey) {
      if (note == json_path) note = std::string(yaml_key);
    }
  }
}

void describe_accelerate(const TrainConfig& c, DescribeWriter& out) {
  if (c.accelerate_keys.empty()) return;
  out.group(str("accelerate config (", c.config_file, ")"));
  for (const TrainConfig::AccelerateKey& key : c.accelerate_keys)
    out.line("accelerate." + key.key, key.value, key.effect);
}

}  // namespace config_detail
}  // namespace zt::optim
