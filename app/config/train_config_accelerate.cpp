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

struct AccelerateKeyRow;

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
  void apply_deepspeed(const YAML::Node& ds);

 public:
  // The handlers of the key tables below: each applies one key (`row` gives its reason and effect).
  using Handler = void (AccelerateReader::*)(const AccelerateKeyRow& row, const std::string& key,
                                             const YAML::Node& node);
  void accept(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void accept_if_empty(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void accept_if_false(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void accept_if_null(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void compute_environment(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void distributed_type(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void mixed_precision(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void num_processes(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void num_machines(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void machine_rank(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void use_cpu(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void debug(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void deepspeed_config(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void downcast_bf16(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void gpu_ids(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void dynamo_backend(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void dynamo_config(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  // deepspeed_config's keys that become a key of the DeepSpeed JSON (row.json_path).
  void ds_integer(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_count(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_number(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_boolean(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_text(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_nvme_path(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_config_file(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);
  void ds_boolean_unused(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node);

 private:
  TrainConfig& c_;
  std::string_view source_;
  std::map<std::string, YAML::Node> top_;
  std::vector<std::string> order_;
  std::string type_ = "NO";                            // distributed_type
  nlohmann::json ds_json_ = nlohmann::json::object();  // the DeepSpeed JSON deepspeed_config stands for
};

// One key of the Accelerate YAML (top level, or under deepspeed_config): what it becomes, or why only its
// "not used" value is accepted. Every key is in one of the two tables; a key in neither is unknown.
struct AccelerateKeyRow {
  std::string_view name;
  AccelerateReader::Handler apply;
  std::string_view effect;     // what the key does here, as describe() prints it
  std::string_view why;        // accept_if_*: why another value is refused
  std::string_view json_path;  // deepspeed_config keys: the DeepSpeed JSON key it becomes ("" for none)
};

using R = AccelerateReader;

// clang-format off
constexpr auto kTopKeys = std::to_array<AccelerateKeyRow>({
    {"compute_environment", &R::compute_environment, "runs on this machine", "only LOCAL_MACHINE is supported", {}},
    {"distributed_type", &R::distributed_type, {}, {}, {}},
    {"mixed_precision", &R::mixed_precision, {}, {}, {}},
    {"num_processes", &R::num_processes, {}, {}, {}},
    {"num_machines", &R::num_machines, "one machine", "multi-node runs are not supported (one machine only)", {}},
    {"machine_rank", &R::machine_rank, "the only machine", "multi-node runs are not supported (rank 0 only)", {}},
    {"main_process_ip", &R::accept_if_null, "none; one machine",
     "multi-node rendezvous is not supported (leave it null)", {}},
    {"main_process_port", &R::accept_if_null, "none; one machine",
     "multi-node rendezvous is not supported (leave it null)", {}},
    {"rdzv_backend", &R::accept, "none; one machine needs no rendezvous", {}, {}},
    {"same_network", &R::accept, "none; one machine needs no rendezvous", {}, {}},
    {"main_training_function", &R::accept, "none; train_mrpc is the training program", {}, {}},
    {"use_cpu", &R::use_cpu, {}, {}, {}},
    {"debug", &R::debug, {}, {}, {}},
    {"deepspeed_config", &R::deepspeed_config, {}, {}, {}},
    {"fsdp_config", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"megatron_lm_config", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"ipex_config", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"mpirun_config", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"tpu_env", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"commands", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"command_file", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"tpu_name", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"tpu_zone", &R::accept_if_empty, "none", "that backend is not supported (leave it empty)", {}},
    {"tpu_use_cluster", &R::accept_if_false, "none", "not supported (set it to false)", {}},
    {"tpu_use_sudo", &R::accept_if_false, "none", "not supported (set it to false)", {}},
    {"enable_cpu_affinity", &R::accept_if_false, "none", "not supported (set it to false)", {}},
    {"downcast_bf16", &R::downcast_bf16, "none; TPU only", "TPU only (set it to no)", {}},
    {"gpu_ids", &R::gpu_ids, "all visible GPUs", "choose GPUs with CUDA_VISIBLE_DEVICES (set gpu_ids to all)", {}},
    {"dynamo_backend", &R::dynamo_backend, "none",
     "torch.compile has no counterpart here; the kernels are native (set it to NO)", {}},
    {"dynamo_config", &R::dynamo_config, "none", "torch.compile has no counterpart here (leave it empty)", {}},
});

// deepspeed_config: the keys Accelerate's DeepSpeedPlugin builds its DeepSpeed JSON from
// (accelerate/utils/dataclasses.py, DeepSpeedPlugin.__post_init__).
constexpr auto kDeepSpeedConfigKeys = std::to_array<AccelerateKeyRow>({
    {"deepspeed_config_file", &R::ds_config_file, "--deepspeed_config", {}, {}},
    {"zero_stage", &R::ds_integer, {}, {}, "zero_optimization.stage"},
    {"offload_optimizer_device", &R::ds_text, {}, {}, "zero_optimization.offload_optimizer.device"},
    {"offload_param_device", &R::ds_text, {}, {}, "zero_optimization.offload_param.device"},
    {"offload_optimizer_nvme_path", &R::ds_nvme_path, {}, {}, "zero_optimization.offload_optimizer.nvme_path"},
    {"offload_param_nvme_path", &R::ds_nvme_path, {}, {}, "zero_optimization.offload_param.nvme_path"},
    {"gradient_accumulation_steps", &R::ds_count, {}, {}, "gradient_accumulation_steps"},
    {"gradient_clipping", &R::ds_number, "gradient_clipping (max_grad_norm)", {}, "gradient_clipping"},
    {"zero3_save_16bit_model", &R::ds_boolean, {}, {}, "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
    {"zero3_init_flag", &R::ds_boolean_unused, "none; stage 3 partitions the parameters as the engine is built",
     {}, {}},
    {"deepspeed_multinode_launcher", &R::accept, "none; one machine needs no multi-node launcher", {}, {}},
    {"deepspeed_hostfile", &R::accept_if_null, "none", "multi-node runs are not supported (leave it null)", {}},
    {"deepspeed_moe_layer_cls_names", &R::accept_if_empty, "none", "DeBERTa has no mixture-of-experts layers", {}},
});
// clang-format on

const AccelerateKeyRow* find_row(std::span<const AccelerateKeyRow> rows, std::string_view name) {
  for (const AccelerateKeyRow& row : rows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

std::vector<std::string_view> row_names(std::span<const AccelerateKeyRow> rows) {
  std::vector<std::string_view> names;
  for (const AccelerateKeyRow& row : rows) names.push_back(row.name);
  return names;
}

void AccelerateReader::apply() {
  for (const std::string& key : order_) {
    ZT_CHECK(find_row(kTopKeys, key) != nullptr, where(), "unknown key '", key, "'",
             suggestion(key, row_names(kTopKeys)), " (keys are those `accelerate config` writes)");
  }
  if (top_.contains("distributed_type")) type_ = text_of(top_.at("distributed_type"));
  ZT_CHECK(type_ == "NO" || type_ == "MULTI_GPU" || type_ == "MULTI_CPU" || type_ == "DEEPSPEED", where(),
           "distributed_type ", type_,
           " is not supported: zerotrain runs NO, MULTI_GPU, MULTI_CPU (data parallel) and DEEPSPEED (ZeRO)");
  for (const std::string& key : order_) {
    const AccelerateKeyRow& row = *find_row(kTopKeys, key);
    (this->*row.apply)(row, key, top_.at(key));
  }
  if (type_ == "DEEPSPEED" && !top_.contains("deepspeed_config"))
    apply_deepspeed(YAML::Node(YAML::NodeType::Map));
  // MULTI_GPU / MULTI_CPU without num_processes: Accelerate's default is every GPU; we ask instead.
  if (type_ == "MULTI_CPU") set(c_.device, DeviceChoice::cpu, "device", "distributed_type", "MULTI_CPU");
}

// ---- generic rows ----
void AccelerateReader::accept(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node) {
  record(key, node, std::string(row.effect));
}
void AccelerateReader::accept_if_empty(const AccelerateKeyRow& row, const std::string& key,
                                       const YAML::Node& node) {
  only_default(key, node, empty_value(node), row.why, std::string(row.effect));
}
void AccelerateReader::accept_if_false(const AccelerateKeyRow& row, const std::string& key,
                                       const YAML::Node& node) {
  only_default(key, node, !boolean(key, node), row.why, std::string(row.effect));
}
void AccelerateReader::accept_if_null(const AccelerateKeyRow& row, const std::string& key,
                                      const YAML::Node& node) {
  only_default(key, node, is_null(node), row.why, std::string(row.effect));
}

// ---- top-level keys ----
void AccelerateReader::compute_environment(const AccelerateKeyRow& row, const std::string& key,
                                           const YAML::Node& node) {
  only_default(key, node, text_of(node) == "LOCAL_MACHINE", row.why, std::string(row.effect));
}
void AccelerateReader::distributed_type(const AccelerateKeyRow&, const std::string& key,
                                        const YAML::Node& node) {
  record(key, node,
         type_ == "NO"          ? "one rank"
         : type_ == "DEEPSPEED" ? "ZeRO, as deepspeed_config sets"
                                : "data parallel over num_processes ranks (ZeRO stage 0)");
}
void AccelerateReader::mixed_precision(const AccelerateKeyRow&, const std::string& key,
                                       const YAML::Node& node) {
  const std::string v = lower(text_of(node));
  ZT_CHECK(v == "no" || v == "bf16" || v == "fp16", where(), "mixed_precision ", text_of(node),
           " is not supported: no, bf16 or fp16");
  const bool ds_file = top_.contains("deepspeed_config") && top_.at("deepspeed_config").IsMap() &&
                       top_.at("deepspeed_config")["deepspeed_config_file"].IsDefined();
  if (ds_file || !c_.deepspeed_config.empty()) {
    // Accelerate: with a DeepSpeed config file, precision is the file's fp16/bf16 sections.
    ZT_CHECK(v == "no", where(), "mixed_precision ", v,
             " with a DeepSpeed config file: set the precision in its fp16/bf16 section and mixed_precision "
             "to no (Accelerate refuses both too)");
    record(key, node, "precision from the DeepSpeed config file");
    return;
  }
  const ComputeDType dtype = v == "no"     ? ComputeDType::f32
                             : v == "bf16" ? ComputeDType::bf16
                                           : ComputeDType::f16;
  set(c_.dtype, dtype, "dtype", key, text_of(node));
  record(key, node, str("dtype ", compute_dtype_name(dtype)));
}
void AccelerateReader::num_processes(const AccelerateKeyRow&, const std::string& key,
                                     const YAML::Node& node) {
  const int64_t n = integer(key, node, 1);
  ZT_CHECK(n <= kMaxWorldSize, where(), "num_processes ", n, " is above ", kMaxWorldSize);
  ZT_CHECK(type_ != "NO" || n == 1, where(), "num_processes ", n, " with distributed_type NO (one process)");
  set(c_.world_size, static_cast<int>(n), "world_size", key, std::to_string(n));
  record(key, node, str("world_size ", n, " (in-process ranks)"));
}
void AccelerateReader::num_machines(const AccelerateKeyRow& row, const std::string& key,
                                    const YAML::Node& node) {
  only_default(key, node, integer(key, node, 1) == 1, row.why, std::string(row.effect));
}
void AccelerateReader::machine_rank(const AccelerateKeyRow& row, const std::string& key,
                                    const YAML::Node& node) {
  only_default(key, node, integer(key, node, 0) == 0, row.why, std::string(row.effect));
}
void AccelerateReader::use_cpu(const AccelerateKeyRow&, const std::string& key, const YAML::Node& node) {
  const bool cpu = boolean(key, node);
  if (cpu) set(c_.device, DeviceChoice::cpu, "device", key, "true");
  record(key, node, cpu ? "device cpu" : "device as --device (auto: the GPU when present)");
}
void AccelerateReader::debug(const AccelerateKeyRow&, const std::string& key, const YAML::Node& node) {
  const bool debug = boolean(key, node);
  set(c_.debug_collectives, debug, "debug_collectives", key, show_bool(debug));
  record(key, node, str("debug_collectives ", show_bool(debug)));
}
void AccelerateReader::deepspeed_config(const AccelerateKeyRow&, const std::string&, const YAML::Node& node) {
  apply_deepspeed(node);
}
void AccelerateReader::downcast_bf16(const AccelerateKeyRow& row, const std::string& key,
                                     const YAML::Node& node) {
  const std::string v = lower(text_of(node));
  only_default(key, node, v == "no" || v == "false", row.why, std::string(row.effect));
}
void AccelerateReader::gpu_ids(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node) {
  only_default(key, node, text_of(node) == "all" || is_null(node), row.why, std::string(row.effect));
}
void AccelerateReader::dynamo_backend(const AccelerateKeyRow& row, const std::string& key,
                                      const YAML::Node& node) {
  only_default(key, node, lower(text_of(node)) == "no", row.why, std::string(row.effect));
}
void AccelerateReader::dynamo_config(const AccelerateKeyRow& row, const std::string& key,
                                     const YAML::Node& node) {
  const bool off = empty_value(node) || (node.IsMap() && node.size() == 1 && node["dynamo_backend"] &&
                                         lower(text_of(node["dynamo_backend"])) == "no");
  only_default(key, node, off, row.why, std::string(row.effect));
}

// ---- deepspeed_config keys: each becomes its row's DeepSpeed JSON key ----
namespace {
// Sets the DeepSpeed JSON key at dotted `path` in `json`.
void set_json_path(nlohmann::json& json, std::string_view path, nlohmann::json value) {
  nlohmann::json* at = &json;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string_view::npos;
       start = dot + 1, dot = path.find('.', start))
    at = &(*at)[std::string(path.substr(start, dot - start))];
  (*at)[std::string(path.substr(start))] = std::move(value);
}
}  // namespace

void AccelerateReader::ds_integer(const AccelerateKeyRow& row, const std::string& key,
                                  const YAML::Node& node) {
  set_json_path(ds_json_, row.json_path, integer(key, node, std::numeric_limits<int64_t>::min()));
  record(key, node, std::string(row.json_path));
}
void AccelerateReader::ds_count(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node) {
  set_json_path(ds_json_, row.json_path, integer(key, node, 1));
  record(key, node, std::string(row.json_path));
}
void AccelerateReader::ds_number(const AccelerateKeyRow& row, const std::string& key,
                                 const YAML::Node& node) {
  set_json_path(ds_json_, row.json_path, number(key, node));
  record(key, node, std::string(row.effect.empty() ? row.json_path : row.effect));
}
void AccelerateReader::ds_boolean(const AccelerateKeyRow& row, const std::string& key,
                                  const YAML::Node& node) {
  set_json_path(ds_json_, row.json_path, boolean(key, node));
  record(key, node, std::string(row.json_path));
}
void AccelerateReader::ds_text(const AccelerateKeyRow& row, const std::string& key, const YAML::Node& node) {
  set_json_path(ds_json_, row.json_path, text_of(node));
  record(key, node, std::string(row.json_path));
}
// Accelerate writes "none" where there is no disk offload; a directory is the section's nvme_path (used with
// device nvme, ignored otherwise, as in DeepSpeed).
void AccelerateReader::ds_nvme_path(const AccelerateKeyRow& row, const std::string& key,
                                    const YAML::Node& node) {
  if (is_null(node) || lower(text_of(node)) == "none") {
    record(key, node, "none");
    return;
  }
  set_json_path(ds_json_, row.json_path, text_of(node));
  record(key, node, std::string(row.json_path));
}
void AccelerateReader::ds_boolean_unused(const AccelerateKeyRow& row, const std::string& key,
                                         const YAML::Node& node) {
  boolean(key, node);
  record(key, node, std::string(row.effect));
}
void AccelerateReader::ds_config_file(const AccelerateKeyRow& row, const std::string& key,
                                      const YAML::Node& node) {
  record(key, node, std::string(row.effect));
}

void AccelerateReader::apply_deepspeed(const YAML::Node& ds) {
  const std::string k = "deepspeed_config";
  ZT_CHECK(ds.IsMap() || empty_value(ds), where(), k, " must be a mapping of keys");
  if (type_ != "DEEPSPEED") {
    ZT_CHECK(empty_value(ds), where(), k, " is set but distributed_type is ", type_,
             " (use DEEPSPEED, or remove deepspeed_config)");
    record(k, ds, "none; distributed_type is not DEEPSPEED");
    return;
  }
  std::vector<std::string> keys;
  for (const auto& entry : ds) keys.push_back(entry.first.as<std::string>());
  for (const std::string& key : keys) {
    ZT_CHECK(find_row(kDeepSpeedConfigKeys, key) != nullptr, where(), "unknown key '", k, ".", key, "'",
             suggestion(key, row_names(kDeepSpeedConfigKeys)));
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
  // The DeepSpeed JSON Accelerate builds from the inline keys; keys left out take the flags (Note [Flags
  // versus the DeepSpeed JSON]).
  for (const std::string& key : keys) {
    const AccelerateKeyRow& row = *find_row(kDeepSpeedConfigKeys, key);
    (this->*row.apply)(row, k + "." + key, ds[key]);
  }
  if (!ds_json_.empty()) c_.accelerate_deepspeed_json = ds_json_.dump();
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

// The deepspeed_config key of the YAML behind DeepSpeed JSON path `json_path`, or "" (kDeepSpeedConfigKeys).
std::string yaml_key_of(std::string_view json_path) {
  for (const AccelerateKeyRow& row : kDeepSpeedConfigKeys) {
    if (!row.json_path.empty() && row.json_path == json_path) return str("deepspeed_config.", row.name);
  }
  return {};
}

}  // namespace

Error with_accelerate_key(const TrainConfig& config, const Error& e) {
  std::string context = str("accelerate config '", config.config_file, "'");
  // The longest JSON path the message names (offload_optimizer.device before a shorter prefix).
  std::string_view named;
  for (const AccelerateKeyRow& row : kDeepSpeedConfigKeys) {
    if (!row.json_path.empty() && row.json_path.size() > named.size() &&
        e.message().find(row.json_path) != std::string::npos)
      named = row.json_path;
  }
  if (!named.empty()) context += str(" ", yaml_key_of(named));
  return with_context(context + ": ", e);
}

// The JSON built from deepspeed_config holds only the YAML's values: each JSON origin becomes the YAML key.
void mark_accelerate_origins(TrainConfig& config) {
  for (auto& [key, origin] : config.origins) {
    if (origin != Origin::json) continue;
    origin = Origin::accelerate;
    std::string& note = config.origin_notes[key];
    if (const std::string yaml_key = yaml_key_of(note); !yaml_key.empty()) note = yaml_key;
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
