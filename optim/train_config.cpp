#include "optim/train_config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "data/glue_tsv.h"
#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt::optim {

using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Value formatting and parsing shared by flags and JSON.

std::string show_double(double value) {
  std::ostringstream out;
  out << std::setprecision(10) << value;
  return out.str();
}
std::string show_bool(bool value) {
  return value ? "true" : "false";
}

int64_t parse_flag_integer(std::string_view flag, const std::string& text, int64_t minimum) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  ZT_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0, "--", flag,
           " needs an integer, got '", text, "'");
  ZT_CHECK(value >= minimum, "--", flag, " must be at least ", minimum, ", got ", value);
  return value;
}

double parse_flag_number(std::string_view flag, const std::string& text, double minimum) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  ZT_CHECK(!text.empty() && end == text.c_str() + text.size() && errno == 0 && std::isfinite(value), "--",
           flag, " needs a number, got '", text, "'");
  ZT_CHECK(value >= minimum, "--", flag, " must be at least ", minimum, ", got ", text);
  return value;
}

double parse_flag_probability(std::string_view flag, const std::string& text) {
  const double value = parse_flag_number(flag, text, 0.0);
  ZT_CHECK(value < 1.0, "--", flag, " must be in [0, 1), got ", text);
  return value;
}

ComputeDType parse_dtype(std::string_view flag, std::string_view text) {
  if (text == "f32" || text == "fp32") return ComputeDType::f32;
  if (text == "bf16") return ComputeDType::bf16;
  if (text == "f16" || text == "fp16") return ComputeDType::f16;
  ZT_FAIL("--", flag, " must be f32, bf16 or f16, got '", text, "'");
}

DeviceChoice parse_device(std::string_view flag, std::string_view text) {
  if (text == "auto") return DeviceChoice::auto_detect;
  if (text == "cpu") return DeviceChoice::cpu;
  if (text == "cuda") return DeviceChoice::cuda;
  ZT_FAIL("--", flag, " must be auto, cpu or cuda, got '", text, "'");
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

// ---------------------------------------------------------------------------------------------------------
// The flag table: parsing and --help both read it, so a flag cannot be parsed without being documented.

struct FlagSpec {
  std::string_view name;     // without the leading "--"
  std::string_view metavar;  // empty for a boolean flag (bare, or --flag=true|false)
  std::string_view help;
  void (*set)(TrainConfig& config, std::string_view flag, const std::string& value);
  std::string (*show)(const TrainConfig& config);  // the current value, for the default in --help
};

using C = TrainConfig;
using V = const std::string&;
using F = std::string_view;

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = {
      {"task_name", "NAME", "GLUE task; only mrpc is supported",
       [](C& c, F f, V v) {
         ZT_CHECK(v == "mrpc", "--", f, " supports only 'mrpc', got '", v, "'");
         c.task_name = v;
       },
       [](const C& c) { return c.task_name; }},
      {"model_name_or_path", "PATH", "zerotrain model file or directory; empty = the embedded default model",
       [](C& c, F, V v) { c.model_name_or_path = v; }, [](const C& c) { return c.model_name_or_path; }},
      {"data_dir", "DIR", "directory holding the MRPC train/dev/test TSVs",
       [](C& c, F, V v) { c.data_dir = v; }, [](const C& c) { return c.data_dir; }},
      {"train_file", "PATH", "training TSV", [](C& c, F, V v) { c.train_file = v; },
       [](const C& c) { return c.train_file.empty() ? std::string("<data_dir>/train.tsv") : c.train_file; }},
      {"validation_file", "PATH", "validation TSV", [](C& c, F, V v) { c.validation_file = v; },
       [](const C& c) {
         return c.validation_file.empty() ? std::string("<data_dir>/dev.tsv") : c.validation_file;
       }},
      {"test_file", "PATH", "test TSV", [](C& c, F, V v) { c.test_file = v; },
       [](const C& c) { return c.test_file.empty() ? std::string("<data_dir>/test.tsv") : c.test_file; }},
      {"max_length", "N", "maximum tokens per sentence pair after tokenization; longer pairs are truncated",
       [](C& c, F f, V v) { c.max_length = parse_flag_integer(f, v, 3); },
       [](const C& c) { return std::to_string(c.max_length); }},
      {"pad_to_max_length", "", "pad every batch to max_length instead of its longest row",
       [](C& c, F, V) { c.pad_to_max_length = true; },
       [](const C& c) { return show_bool(c.pad_to_max_length); }},
      {"per_device_train_batch_size", "N",
       "training batch size per rank (DeepSpeed train_micro_batch_size_per_gpu)",
       [](C& c, F f, V v) { c.per_device_train_batch_size = parse_flag_integer(f, v, 1); },
       [](const C& c) { return std::to_string(c.per_device_train_batch_size); }},
      {"per_device_eval_batch_size", "N", "evaluation batch size per rank",
       [](C& c, F f, V v) { c.per_device_eval_batch_size = parse_flag_integer(f, v, 1); },
       [](const C& c) { return std::to_string(c.per_device_eval_batch_size); }},
      {"learning_rate", "LR", "peak learning rate (after warmup)",
       [](C& c, F f, V v) { c.learning_rate = parse_flag_number(f, v, 0.0); },
       [](const C& c) { return show_double(c.learning_rate); }},
      {"weight_decay", "WD", "AdamW weight decay (not applied to biases and LayerNorm weights)",
       [](C& c, F f, V v) { c.weight_decay = parse_flag_number(f, v, 0.0); },
       [](const C& c) { return show_double(c.weight_decay); }},
      {"adam_beta1", "B1", "AdamW beta1", [](C& c, F f, V v) { c.adam_beta1 = parse_flag_probability(f, v); },
       [](const C& c) { return show_double(c.adam_beta1); }},
      {"adam_beta2", "B2", "AdamW beta2", [](C& c, F f, V v) { c.adam_beta2 = parse_flag_probability(f, v); },
       [](const C& c) { return show_double(c.adam_beta2); }},
      {"adam_epsilon", "EPS", "AdamW epsilon",
       [](C& c, F f, V v) {
         c.adam_epsilon = parse_flag_number(f, v, 0.0);
         ZT_CHECK(c.adam_epsilon > 0, "--", f, " must be positive, got ", v);
       },
       [](const C& c) { return show_double(c.adam_epsilon); }},
      {"max_grad_norm", "NORM",
       "clip the global gradient norm to this; 0 disables (HF Trainer's default 1.0)",
       [](C& c, F f, V v) { c.max_grad_norm = parse_flag_number(f, v, 0.0); },
       [](const C& c) { return show_double(c.max_grad_norm); }},
      {"num_train_epochs", "N", "epochs to train (ignored when --max_train_steps is given)",
       [](C& c, F f, V v) { c.num_train_epochs = parse_flag_integer(f, v, 1); },
       [](const C& c) { return std::to_string(c.num_train_epochs); }},
      {"max_train_steps", "N", "total optimizer steps; overrides --num_train_epochs",
       [](C& c, F f, V v) { c.max_train_steps = parse_flag_integer(f, v, 1); },
       [](const C& c) {
         return c.max_train_steps ? std::to_string(*c.max_train_steps) : std::string("none");
       }},
      {"gradient_accumulation_steps", "N", "micro-batches accumulated per optimizer step",
       [](C& c, F f, V v) { c.gradient_accumulation_steps = parse_flag_integer(f, v, 1); },
       [](const C& c) { return std::to_string(c.gradient_accumulation_steps); }},
      {"lr_scheduler_type", "NAME", "linear, cosine, constant or constant_with_warmup",
       [](C& c, F, V v) {
         parse_schedule_kind(v);  // throws, naming the HF schedules that exist but are not implemented
         c.lr_scheduler_type = v;
       },
       [](const C& c) { return c.lr_scheduler_type; }},
      {"num_warmup_steps", "N", "optimizer steps of linear warmup",
       [](C& c, F f, V v) { c.num_warmup_steps = parse_flag_integer(f, v, 0); },
       [](const C& c) { return std::to_string(c.num_warmup_steps); }},
      {"seed", "N", "seed for initialization, shuffling and dropout",
       [](C& c, F f, V v) { c.seed = static_cast<uint64_t>(parse_flag_integer(f, v, 0)); },
       [](const C& c) { return std::to_string(c.seed); }},
      {"output_dir", "DIR", "where to write the final model and checkpoints; empty = write nothing",
       [](C& c, F, V v) { c.output_dir = v; }, [](const C& c) { return c.output_dir; }},
      {"checkpointing_steps", "N|epoch",
       "save a checkpoint every N optimizer steps, or at the end of each epoch",
       [](C& c, F f, V v) {
         if (v == "epoch") {
           c.checkpointing_steps = {CheckpointingSteps::Kind::epoch, 0};
         } else {
           c.checkpointing_steps = {CheckpointingSteps::Kind::steps, parse_flag_integer(f, v, 1)};
         }
       },
       [](const C& c) { return show_checkpointing(c.checkpointing_steps); }},
      {"resume_from_checkpoint", "PATH", "checkpoint to resume from",
       [](C& c, F, V v) { c.resume_from_checkpoint = v; },
       [](const C& c) { return c.resume_from_checkpoint; }},
      {"ignore_mismatched_sizes", "", "replace a checkpoint classifier whose label count differs",
       [](C& c, F, V) { c.ignore_mismatched_sizes = true; },
       [](const C& c) { return show_bool(c.ignore_mismatched_sizes); }},
      {"deepspeed_config", "FILE", "DeepSpeed JSON config (ZeRO stage, offload, batch sizes, optimizer, ...)",
       [](C& c, F, V v) { c.deepspeed_config = v; }, [](const C& c) { return c.deepspeed_config; }},
      {"gpu_memory_limit", "SIZE", "cap on device memory, e.g. 24GiB; 0 = the whole device",
       [](C& c, F f, V v) {
         try {
           c.gpu_memory_limit = parse_memory_size(v);
         } catch (const Error& e) {
           ZT_FAIL("--", f, " needs a size such as 24GiB, got '", v, "': ", e.what());
         }
       },
       [](const C& c) {
         return c.gpu_memory_limit == 0 ? std::string("0") : format_memory_size(c.gpu_memory_limit);
       }},
      {"dtype", "f32|bf16|f16", "compute dtype (fp32 master weights always); f16 uses dynamic loss scaling",
       [](C& c, F f, V v) { c.dtype = parse_dtype(f, v); },
       [](const C& c) { return std::string(compute_dtype_name(c.dtype)); }},
      {"device", "auto|cpu|cuda", "where to compute; auto = cuda when a GPU is present",
       [](C& c, F f, V v) { c.device = parse_device(f, v); },
       [](const C& c) { return std::string(device_choice_name(c.device)); }},
      {"log_every", "N", "optimizer steps between loss lines",
       [](C& c, F f, V v) { c.log_every = parse_flag_integer(f, v, 1); },
       [](const C& c) { return std::to_string(c.log_every); }},
  };
  return table;
}

// run_glue_no_trainer.py flags we know but do not implement: told apart from typos.
constexpr auto kHfFlagsNotSupported =
    std::to_array<std::string_view>({"with_tracking", "report_to", "push_to_hub", "hub_model_id", "hub_token",
                                     "use_slow_tokenizer", "trust_remote_code"});

const FlagSpec* find_flag(std::string_view name) {
  for (const FlagSpec& spec : flag_table()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the closest candidate within a few edits, else "".
template <typename Range>
std::string suggestion(std::string_view name, const Range& candidates) {
  std::string_view best;
  size_t best_distance = std::max<size_t>(2, name.size() / 4) + 1;
  for (const auto& candidate : candidates) {
    const size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best.empty() ? std::string() : str(" (did you mean '", best, "'?)");
}

// ---------------------------------------------------------------------------------------------------------
// DeepSpeed JSON reading: every key read is marked, and whatever is left unread is an error naming its path.

enum class JsonState { absent, automatic, given };

template <typename T>
struct JsonValue {
  using State = JsonState;
  State state = State::absent;
  T value{};
  std::string path;
  bool given() const { return state == State::given; }
  bool automatic() const { return state == State::automatic; }
};

// DeepSpeed keys that exist but that zerotrain does not implement (leaf names, any section): a clearer
// message than "unknown" for a config copied from elsewhere.
constexpr auto kDeepSpeedNotImplemented =
    std::to_array<std::string_view>({"amp",
                                     "activation_checkpointing",
                                     "aio",
                                     "autotuning",
                                     "comms_logger",
                                     "compression_training",
                                     "csv_monitor",
                                     "data_efficiency",
                                     "elasticity",
                                     "flops_profiler",
                                     "gradient_predivide_factor",
                                     "prescale_gradients",
                                     "communication_data_type",
                                     "sparse_attention",
                                     "tensorboard",
                                     "wandb",
                                     "zero_force_ds_cpu_optimizer",
                                     "checkpoint",
                                     "pipeline",
                                     "dump_state",
                                     "fp32_allreduce",
                                     "sparse_gradients",
                                     "memory_breakdown",
                                     "nebula",
                                     "torch_autocast",
                                     "cpu_offload",
                                     "cpu_offload_params",
                                     "cpu_offload_use_pin_memory",
                                     "elastic_checkpoint",
                                     "load_from_fp32_weights",
                                     "ignore_unused_parameters",
                                     "legacy_stage1",
                                     "stage3_model_persistence_threshold",
                                     "zero_hpz_partition_size",
                                     "zero_quantized_weights",
                                     "zero_quantized_gradients",
                                     "mics_shard_size",
                                     "use_multi_rank_bucket_allreduce",
                                     "nvme_path",
                                     "buffer_count",
                                     "buffer_size",
                                     "max_in_cpu",
                                     "fast_init",
                                     "ratio",
                                     "fp16_master_weights_and_grads"});

class JsonSection {
 public:
  JsonSection(const json& object, std::string path) : object_(&object), path_(std::move(path)) {
    ZT_CHECK(object_->is_object(), "DeepSpeed config key '", path_.empty() ? "(top level)" : path_,
             "' must be a JSON object, got ", object_->type_name());
  }

  std::string path_of(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const json* take(std::string_view key) {
    const auto it = object_->find(std::string(key));
    if (it == object_->end()) return nullptr;
    read_.emplace_back(key);
    return &*it;
  }

  std::optional<JsonSection> section(std::string_view key) {
    const json* value = take(key);
    if (value == nullptr) return std::nullopt;
    return JsonSection(*value, path_of(key));
  }

  JsonValue<int64_t> integer(std::string_view key, bool auto_allowed) {
    return read<int64_t>(key, auto_allowed, "an integer", [](const json& v) -> std::optional<int64_t> {
      if (v.is_number_integer()) return v.get<int64_t>();
      // DeepSpeed configs write sizes as floats ("2e8"); accept them when they are whole numbers.
      if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::floor(d) == d && std::abs(d) < 9.0e18) return static_cast<int64_t>(d);
      }
      return std::nullopt;
    });
  }

  JsonValue<double> number(std::string_view key, bool auto_allowed) {
    return read<double>(key, auto_allowed, "a number", [](const json& v) -> std::optional<double> {
      if (v.is_number()) return v.get<double>();
      return std::nullopt;
    });
  }

  JsonValue<bool> boolean(std::string_view key, bool auto_allowed) {
    return read<bool>(key, auto_allowed, "true or false", [](const json& v) -> std::optional<bool> {
      if (v.is_boolean()) return v.get<bool>();
      return std::nullopt;
    });
  }

  JsonValue<std::string> string(std::string_view key) {
    return read<std::string>(key, false, "a string", [](const json& v) -> std::optional<std::string> {
      if (v.is_string()) return v.get<std::string>();
      return std::nullopt;
    });
  }

  JsonValue<std::array<double, 2>> pair(std::string_view key, bool auto_allowed) {
    return read<std::array<double, 2>>(
        key, auto_allowed, "a list of two numbers",
        [](const json& v) -> std::optional<std::array<double, 2>> {
          if (v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number())
            return std::array<double, 2>{v[0].get<double>(), v[1].get<double>()};
          return std::nullopt;
        });
  }

  // Errors on the first key that was never read, telling a typo from a DeepSpeed setting we lack.
  void reject_unread(std::initializer_list<std::string_view> known) const {
    for (const auto& [key, value] : object_->items()) {
      if (std::find(read_.begin(), read_.end(), key) != read_.end()) continue;
      const std::string path = path_of(key);
      if (std::find(kDeepSpeedNotImplemented.begin(), kDeepSpeedNotImplemented.end(), key) !=
          kDeepSpeedNotImplemented.end()) {
        ZT_FAIL("DeepSpeed config key '", path,
                "' is a DeepSpeed setting that zerotrain does not implement; ", "remove it");
      }
      ZT_FAIL("unknown DeepSpeed config key '", path, "'", suggestion(key, known));
    }
  }

 private:
  template <typename T, typename Convert>
  JsonValue<T> read(std::string_view key, bool auto_allowed, std::string_view expected, Convert convert) {
    JsonValue<T> result;
    result.path = path_of(key);
    const json* value = take(key);
    if (value == nullptr) return result;
    if (value->is_string() && value->get<std::string>() == "auto") {
      ZT_CHECK(
          auto_allowed, "DeepSpeed config key '", result.path,
          "' is \"auto\", but \"auto\" is only resolved for keys HF's DeepSpeed integration fills "
          "(batch sizes, clipping, optimizer and scheduler params, fp16/bf16 enabled, hidden-size buckets)");
      result.state = JsonValue<T>::State::automatic;
      return result;
    }
    const std::optional<T> converted = convert(*value);
    ZT_CHECK(converted.has_value(), "DeepSpeed config key '", result.path, "' must be ", expected, ", got ",
             value->dump());
    result.state = JsonValue<T>::State::given;
    result.value = *converted;
    return result;
  }

  const json* object_;  // inside the parsed document, which outlives every section
  std::string path_;
  std::vector<std::string> read_;
};

std::string show_value(double v) {
  return show_double(v);
}
std::string show_value(int64_t v) {
  return std::to_string(v);
}

}  // namespace

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

std::string_view deepspeed_schedule_name(DeepSpeedSchedule::Type type) {
  switch (type) {
    case DeepSpeedSchedule::Type::warmup_lr:
      return "WarmupLR";
    case DeepSpeedSchedule::Type::warmup_decay_lr:
      return "WarmupDecayLR";
    case DeepSpeedSchedule::Type::warmup_cosine_lr:
      return "WarmupCosineLR";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------------------
// Flags

TrainConfig TrainConfig::from_args(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return from_args(args);
}

TrainConfig TrainConfig::from_args(const std::vector<std::string>& args) {
  TrainConfig config;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      config.show_help = true;
      return config;
    }
    ZT_CHECK(arg.starts_with("--") && arg.size() > 2, "unexpected argument '", arg,
             "' (flags look like --name value or --name=value; see --help)");
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagSpec* spec = find_flag(name);
    if (spec == nullptr) {
      if (std::find(kHfFlagsNotSupported.begin(), kHfFlagsNotSupported.end(), name) !=
          kHfFlagsNotSupported.end()) {
        ZT_FAIL("--", name, " is a run_glue_no_trainer.py flag that zerotrain does not support");
      }
      std::vector<std::string_view> names;
      for (const FlagSpec& s : flag_table()) names.push_back(s.name);
      ZT_FAIL("unknown flag '--", name, "'", suggestion(name, names), "; see --help");
    }
    std::string value;
    if (spec->metavar.empty()) {  // boolean: bare, or --flag=true|false
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        ZT_CHECK(value == "true" || value == "false", "--", name, " is a switch; give it bare or as --", name,
                 "=true|false, got '", value, "'");
      }
      if (value != "false") spec->set(config, name, value);
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      spec->set(config, name, value);
    } else {
      ZT_CHECK(i + 1 < args.size() && !args[i + 1].starts_with("--"), "--", name, " needs a value (",
               spec->metavar, ")");
      value = args[++i];
      spec->set(config, name, value);
    }
    config.origins[name] = Origin::flag;
  }
  return config;
}

std::string TrainConfig::help_text() {
  const TrainConfig defaults;
  std::ostringstream out;
  out << "usage: train_mrpc [--flag value | --flag=value | --switch] ...\n"
         "Fine-tunes DeBERTa-v2 on GLUE MRPC. Flags follow HuggingFace run_glue_no_trainer.py; distributed\n"
         "settings come from a DeepSpeed JSON (--deepspeed_config), whose \"auto\" values are filled from "
         "these flags.\n\n";
  for (const FlagSpec& spec : flag_table()) {
    std::string head = str("  --", spec.name, spec.metavar.empty() ? "" : " ", spec.metavar);
    out << std::left << std::setw(44) << head << " " << spec.help;
    std::string shown = spec.show(defaults);
    if (spec.name == "data_dir") shown = ZT_DATA_DIR;
    if (!spec.metavar.empty()) out << " [default: " << (shown.empty() ? "none" : shown) << "]";
    out << "\n";
  }
  out << std::left << std::setw(44) << "  --help"
      << " "
      << "print this text and exit\n";
  return out.str();
}

LrSchedule TrainConfig::hf_schedule() const {
  LrSchedule schedule;
  schedule.kind = parse_schedule_kind(lr_scheduler_type);
  schedule.base_lr = learning_rate;
  schedule.num_warmup_steps = num_warmup_steps;
  schedule.num_training_steps = num_training_steps;
  return schedule;
}

Origin TrainConfig::origin_of(std::string_view key) const {
  const auto it = origins.find(key);
  return it == origins.end() ? Origin::default_value : it->second;
}

// ---------------------------------------------------------------------------------------------------------
// Resolution

void TrainConfig::resolve(const ResolveInputs& inputs) {
  if (deepspeed_config.empty()) {
    resolve_impl(nullptr, "", inputs);
    return;
  }
  std::ifstream file(deepspeed_config, std::ios::binary);
  ZT_CHECK(file.good(), "--deepspeed_config: cannot open '", deepspeed_config, "'");
  std::ostringstream text;
  text << file.rdbuf();
  resolve_with_json_text(text.str(), deepspeed_config, inputs);
}

void TrainConfig::resolve_with_json_text(std::string_view json_text, std::string_view source,
                                         const ResolveInputs& inputs) {
  json document;
  try {
    document = json::parse(json_text);
  } catch (const json::parse_error& e) {
    // nlohmann's message carries line and column; the byte offset helps with one-line configs.
    ZT_FAIL("DeepSpeed config '", source, "' is not valid JSON (byte ", e.byte, "): ", e.what());
  }
  resolve_impl(&document, source, inputs);
}

namespace {

// Applies a JSON value to a flag-backed field following Note [Flags versus the DeepSpeed JSON].
template <typename T>
void reconcile(TrainConfig& config, T& field, const std::string& key, const JsonValue<T>& j) {
  const Origin origin = config.origin_of(key);
  if (j.automatic()) {
    if (origin != Origin::json) config.origin_notes[key] = str("fills ", j.path, "=auto");
    return;
  }
  if (!j.given()) return;
  if (origin != Origin::default_value) {
    if (field == j.value) return;  // agrees with the flag or the earlier JSON key, which stays the origin
    if (origin == Origin::flag) {
      ZT_FAIL("--", key, " ", show_value(field), " contradicts DeepSpeed config ", j.path, " = ",
              show_value(j.value), " (set the JSON value to \"auto\" or drop the flag)");
    }
    ZT_FAIL("DeepSpeed config ", j.path, " = ", show_value(j.value), " contradicts ",
            config.origin_notes[key], " = ", show_value(field), " (", key, ")");
  }
  field = j.value;
  config.origins[key] = Origin::json;
  config.origin_notes[key] = j.path;
}

void set_json_origin(TrainConfig& config, const std::string& key, const std::string& path) {
  config.origins[key] = Origin::json;
  config.origin_notes[key] = path;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

void TrainConfig::resolve_impl(const json* ds, std::string_view source, const ResolveInputs& inputs) {
  ZT_CHECK(!resolved, "TrainConfig::resolve called twice");
  ZT_CHECK(inputs.world_size >= 1, "world size must be at least 1, got ", inputs.world_size);
  world_size = inputs.world_size;

  if (data_dir.empty()) data_dir = ZT_DATA_DIR;
  if (train_file.empty()) train_file = data::mrpc_split_path(data_dir, "train");
  if (validation_file.empty()) validation_file = data::mrpc_split_path(data_dir, "dev");
  if (test_file.empty()) test_file = data::mrpc_split_path(data_dir, "test");

  std::optional<JsonSection> top;
  if (ds != nullptr) {
    try {
      top.emplace(*ds, "");
    } catch (const Error& e) {
      ZT_FAIL("DeepSpeed config '", source, "': ", e.what());
    }
  }

  // ---- batch sizes: DeepSpeed's derivation (runtime/config.py _set_batch_related_parameters) ----
  JsonValue<int64_t> train_batch, micro, accumulation;
  if (top) {
    train_batch = top->integer("train_batch_size", true);
    micro = top->integer("train_micro_batch_size_per_gpu", true);
    accumulation = top->integer("gradient_accumulation_steps", true);
    for (const JsonValue<int64_t>* v : {&train_batch, &micro, &accumulation}) {
      ZT_CHECK(!v->given() || v->value >= 1, "DeepSpeed config ", v->path, " must be at least 1, got ",
               v->value);
    }
  }
  const bool micro_known = micro.given() || origin_of("per_device_train_batch_size") == Origin::flag;
  const bool accumulation_known =
      accumulation.given() || origin_of("gradient_accumulation_steps") == Origin::flag;
  reconcile(*this, per_device_train_batch_size, "per_device_train_batch_size", micro);
  reconcile(*this, gradient_accumulation_steps, "gradient_accumulation_steps", accumulation);
  if (train_batch.given()) {
    const int64_t total = train_batch.value;
    if (micro_known && !accumulation_known) {
      ZT_CHECK(total % (per_device_train_batch_size * world_size) == 0, "DeepSpeed config train_batch_size ",
               total, " is not divisible by train_micro_batch_size_per_gpu ", per_device_train_batch_size,
               " x world_size ", world_size);
      gradient_accumulation_steps = total / (per_device_train_batch_size * world_size);
      origins["gradient_accumulation_steps"] = Origin::derived;
      origin_notes["gradient_accumulation_steps"] = "train_batch_size / (micro x world_size)";
    } else if (!micro_known) {
      ZT_CHECK(total % (gradient_accumulation_steps * world_size) == 0, "DeepSpeed config train_batch_size ",
               total, " is not divisible by gradient_accumulation_steps ", gradient_accumulation_steps,
               " x world_size ", world_size);
      per_device_train_batch_size = total / (gradient_accumulation_steps * world_size);
      origins["per_device_train_batch_size"] = Origin::derived;
      origin_notes["per_device_train_batch_size"] = "train_batch_size / (accumulation x world_size)";
    }
    const int64_t product = per_device_train_batch_size * gradient_accumulation_steps * world_size;
    ZT_CHECK(total == product, "DeepSpeed config train_batch_size ", total,
             " != train_micro_batch_size_per_gpu ", per_device_train_batch_size, " (",
             origin_name(origin_of("per_device_train_batch_size")), ") x gradient_accumulation_steps ",
             gradient_accumulation_steps, " (", origin_name(origin_of("gradient_accumulation_steps")),
             ") x world_size ", world_size, " = ", product);
    train_batch_size = total;
    set_json_origin(*this, "train_batch_size", train_batch.path);
  } else {
    train_batch_size = per_device_train_batch_size * gradient_accumulation_steps * world_size;
    origins["train_batch_size"] = train_batch.automatic() ? Origin::json_auto : Origin::derived;
    origin_notes["train_batch_size"] = "micro x accumulation x world_size";
  }

  if (top) {
    reconcile(*this, max_grad_norm, "max_grad_norm", top->number("gradient_clipping", true));
    ZT_CHECK(max_grad_norm >= 0, "DeepSpeed config gradient_clipping must be non-negative, got ",
             max_grad_norm);
    if (const JsonValue<int64_t> v = top->integer("steps_per_print", false); v.given()) {
      ZT_CHECK(v.value >= 1, "DeepSpeed config steps_per_print must be at least 1, got ", v.value);
      steps_per_print = v.value;
      set_json_origin(*this, "steps_per_print", v.path);
    }
    if (const JsonValue<bool> v = top->boolean("wall_clock_breakdown", false); v.given()) {
      wall_clock_breakdown = v.value;
      set_json_origin(*this, "wall_clock_breakdown", v.path);
    }
    // Accepted because Accelerate-generated configs carry it; our optimizer is always the built-in AdamW, so
    // there is no "untested optimizer" to allow.
    top->boolean("zero_allow_untested_optimizer", false);
  }

  // ---- optimizer ----
  if (std::optional<JsonSection> optimizer = top ? top->section("optimizer") : std::nullopt) {
    const JsonValue<std::string> type = optimizer->string("type");
    ZT_CHECK(type.given(), "DeepSpeed config optimizer.type is required (AdamW or Adam)");
    std::string lowered = type.value;
    std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    ZT_CHECK(lowered == "adamw" || lowered == "adam", "DeepSpeed config optimizer.type '", type.value,
             "' is not supported (zerotrain implements AdamW and Adam)");
    optimizer_type = lowered == "adamw" ? "AdamW" : "Adam";
    set_json_origin(*this, "optimizer.type", type.path);
    if (std::optional<JsonSection> params = optimizer->section("params")) {
      reconcile(*this, learning_rate, "learning_rate", params->number("lr", true));
      reconcile(*this, weight_decay, "weight_decay", params->number("weight_decay", true));
      reconcile(*this, adam_epsilon, "adam_epsilon", params->number("eps", true));
      const JsonValue<std::array<double, 2>> betas = params->pair("betas", true);
      JsonValue<double> beta1{betas.state, betas.value[0], betas.path + "[0]"};
      JsonValue<double> beta2{betas.state, betas.value[1], betas.path + "[1]"};
      reconcile(*this, adam_beta1, "adam_beta1", beta1);
      reconcile(*this, adam_beta2, "adam_beta2", beta2);
      const JsonValue<bool> adam_w_mode = params->boolean("adam_w_mode", false);
      // DeepSpeed: type AdamW forces decoupled decay whatever adam_w_mode says; Adam defaults to it.
      ZT_CHECK(!(adam_w_mode.given() && !adam_w_mode.value && optimizer_type == "AdamW"),
               "DeepSpeed config optimizer.type AdamW contradicts optimizer.params.adam_w_mode false");
      ZT_CHECK(!(adam_w_mode.given() && !adam_w_mode.value),
               "DeepSpeed config optimizer.params.adam_w_mode false (Adam with L2 regularization) is not "
               "implemented; zerotrain's AdamW decays weights decoupled");
      if (const JsonValue<bool> v = params->boolean("torch_adam", false); v.given()) torch_adam = v.value;
      const JsonValue<bool> bias_correction = params->boolean("bias_correction", false);
      ZT_CHECK(!bias_correction.given() || bias_correction.value,
               "DeepSpeed config optimizer.params.bias_correction false is not implemented");
      const JsonValue<bool> amsgrad = params->boolean("amsgrad", false);
      ZT_CHECK(!amsgrad.given() || !amsgrad.value,
               "DeepSpeed config optimizer.params.amsgrad true is not implemented");
      params->reject_unread(
          {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "torch_adam", "bias_correction", "amsgrad"});
    }
    optimizer->reject_unread({"type", "params"});
  }
  ZT_CHECK(adam_beta1 >= 0 && adam_beta1 < 1 && adam_beta2 >= 0 && adam_beta2 < 1,
           "Adam betas must be in [0, 1), got (", adam_beta1, ", ", adam_beta2, ")");
  ZT_CHECK(learning_rate >= 0 && weight_decay >= 0 && adam_epsilon > 0,
           "learning rate and weight decay must be non-negative and epsilon positive");

  // ---- steps ----
  if (inputs.num_train_examples > 0) {
    // Note [Sharding across ranks] in data/batcher.h: ceil(N/W) examples per rank, a last partial batch kept.
    const int64_t batches =
        ceil_div(ceil_div(inputs.num_train_examples, world_size), per_device_train_batch_size);
    num_update_steps_per_epoch = ceil_div(batches, gradient_accumulation_steps);
  }
  if (max_train_steps) {
    num_training_steps = *max_train_steps;
    origins["num_training_steps"] = origin_of("max_train_steps");
    if (num_update_steps_per_epoch > 0) {
      // As run_glue_no_trainer.py: the epoch count follows from the step budget.
      num_train_epochs = ceil_div(num_training_steps, num_update_steps_per_epoch);
      origins["num_train_epochs"] = Origin::derived;
      origin_notes["num_train_epochs"] = "ceil(max_train_steps / steps per epoch)";
    }
  } else {
    ZT_CHECK(inputs.num_train_examples > 0,
             "the number of training steps needs the training set size (or --max_train_steps)");
    num_training_steps = num_train_epochs * num_update_steps_per_epoch;
    origins["num_training_steps"] = Origin::derived;
    origin_notes["num_training_steps"] = "num_train_epochs x steps per epoch";
  }
  origins["num_update_steps_per_epoch"] = Origin::derived;

  // ---- scheduler ----
  parse_schedule_kind(lr_scheduler_type);
  if (std::optional<JsonSection> scheduler = top ? top->section("scheduler") : std::nullopt) {
    const JsonValue<std::string> type = scheduler->string("type");
    ZT_CHECK(type.given(),
             "DeepSpeed config scheduler.type is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    DeepSpeedSchedule schedule;
    if (type.value == "WarmupLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_lr;
    } else if (type.value == "WarmupDecayLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_decay_lr;
    } else if (type.value == "WarmupCosineLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_cosine_lr;
    } else {
      ZT_FAIL("DeepSpeed config scheduler.type '", type.value,
              "' is not supported (expected WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    }
    ZT_CHECK(origin_of("lr_scheduler_type") != Origin::flag, "--lr_scheduler_type ", lr_scheduler_type,
             " contradicts DeepSpeed config scheduler.type ", type.value,
             " (with a DeepSpeed scheduler the flag's schedule is not used; drop one of them)");
    set_json_origin(*this, "scheduler.type", type.path);
    const bool cosine = schedule.type == DeepSpeedSchedule::Type::warmup_cosine_lr;
    const bool has_total = schedule.type != DeepSpeedSchedule::Type::warmup_lr;
    std::optional<JsonSection> params = scheduler->section("params");
    const json empty_object = json::object();
    JsonSection empty_params(empty_object, "scheduler.params");
    JsonSection& p = params ? *params : empty_params;

    // warmup_num_steps: "auto" and absent follow --num_warmup_steps (DeepSpeed's own default is 1000).
    reconcile(*this, num_warmup_steps, "num_warmup_steps", p.integer("warmup_num_steps", true));
    ZT_CHECK(num_warmup_steps >= 0,
             "DeepSpeed config scheduler.params.warmup_num_steps must be non-negative");
    schedule.warmup_num_steps = num_warmup_steps;
    if (!cosine) {
      const JsonValue<double> min_lr = p.number("warmup_min_lr", true);
      schedule.warmup_min_lr = min_lr.given() ? min_lr.value : 0.0;  // "auto": 0, as HF
      if (min_lr.given()) set_json_origin(*this, "scheduler.warmup_min_lr", min_lr.path);
      if (min_lr.automatic()) origins["scheduler.warmup_min_lr"] = Origin::json_auto;
      // The schedule sets the rate to warmup_max_lr outright, so it is the learning rate.
      const JsonValue<double> max_lr = p.number("warmup_max_lr", true);
      reconcile(*this, learning_rate, "learning_rate", max_lr);
      if (max_lr.given()) {
        set_json_origin(*this, "scheduler.warmup_max_lr", max_lr.path);
      } else {
        // Absent, DeepSpeed would use 0.001 whatever the optimizer says; we keep the one learning rate.
        origins["scheduler.warmup_max_lr"] = max_lr.automatic() ? Origin::json_auto : Origin::derived;
        origin_notes["scheduler.warmup_max_lr"] = "learning_rate";
      }
      schedule.warmup_max_lr = learning_rate;
    } else {
      if (const JsonValue<double> v = p.number("warmup_min_ratio", false); v.given())
        schedule.warmup_min_ratio = v.value;
      if (const JsonValue<double> v = p.number("cos_min_ratio", false); v.given())
        schedule.cos_min_ratio = v.value;
    }
    if (has_total) {
      const JsonValue<int64_t> total = p.integer("total_num_steps", true);
      if (total.given()) {
        ZT_CHECK(!(max_train_steps && origin_of("max_train_steps") == Origin::flag &&
                   *max_train_steps != total.value),
                 "--max_train_steps ", max_train_steps.value_or(0), " contradicts DeepSpeed config ",
                 total.path, " = ", total.value);
        schedule.total_num_steps = total.value;
        set_json_origin(*this, "scheduler.total_num_steps", total.path);
      } else {
        // "auto" (and absent, which DeepSpeed would reject): the run's optimizer steps per rank. Accelerate
        // divides its total by the number of processes; ours is already per rank.
        schedule.total_num_steps = num_training_steps;
        origins["scheduler.total_num_steps"] = total.automatic() ? Origin::json_auto : Origin::derived;
        origin_notes["scheduler.total_num_steps"] = "num_training_steps";
      }
    }
    const JsonValue<std::string> warmup_type = p.string("warmup_type");
    if (warmup_type.given()) {
      set_json_origin(*this, "scheduler.warmup_type", warmup_type.path);
      ZT_CHECK(warmup_type.value == "log" || warmup_type.value == "linear", "DeepSpeed config ",
               warmup_type.path, " must be log or linear, got '", warmup_type.value, "'");
      schedule.warmup_log = warmup_type.value == "log";
    }
    const JsonValue<int64_t> last = p.integer("last_batch_iteration", false);
    ZT_CHECK(!last.given() || last.value == -1, "DeepSpeed config ", last.path,
             " other than -1 is not supported; resume with --resume_from_checkpoint");
    if (cosine) {
      p.reject_unread({"warmup_num_steps", "total_num_steps", "warmup_min_ratio", "cos_min_ratio",
                       "warmup_type", "last_batch_iteration"});
    } else if (has_total) {
      p.reject_unread({"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps", "warmup_type",
                       "last_batch_iteration"});
    } else {
      p.reject_unread(
          {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"});
    }
    scheduler->reject_unread({"type", "params"});
    deepspeed_schedule = schedule;
  }

  // ---- precision ----
  if (top) {
    JsonValue<bool> fp16_enabled, bf16_enabled;
    if (std::optional<JsonSection> fp16_section = top->section("fp16")) {
      fp16_enabled = fp16_section->boolean("enabled", true);
      if (const JsonValue<double> v = fp16_section->number("loss_scale", false); v.given()) {
        ZT_CHECK(v.value >= 0, "DeepSpeed config ", v.path, " must be >= 0 (0 = dynamic), got ", v.value);
        fp16.static_scale = v.value;
      }
      if (const JsonValue<int64_t> v = fp16_section->integer("initial_scale_power", false); v.given()) {
        ZT_CHECK(v.value >= 0 && v.value <= 63, "DeepSpeed config ", v.path, " must be in [0, 63], got ",
                 v.value);
        fp16.initial_scale_power = static_cast<int>(v.value);
      }
      if (const JsonValue<int64_t> v = fp16_section->integer("loss_scale_window", false); v.given()) {
        ZT_CHECK(v.value >= 1, "DeepSpeed config ", v.path, " must be at least 1, got ", v.value);
        fp16.scale_window = v.value;
      }
      if (const JsonValue<int64_t> v = fp16_section->integer("hysteresis", false); v.given()) {
        ZT_CHECK(v.value >= 1, "DeepSpeed config ", v.path, " must be at least 1, got ", v.value);
        fp16.hysteresis = static_cast<int>(v.value);
      }
      if (const JsonValue<bool> v = fp16_section->boolean("consecutive_hysteresis", false); v.given()) {
        fp16.consecutive_hysteresis = v.value;
      }
      if (const JsonValue<double> v = fp16_section->number("min_loss_scale", false); v.given()) {
        ZT_CHECK(v.value > 0, "DeepSpeed config ", v.path, " must be positive, got ", v.value);
        fp16.min_scale = v.value;
      }
      if (const JsonValue<bool> v = fp16_section->boolean("auto_cast", false); v.given())
        fp16_auto_cast = v.value;
      fp16_section->reject_unread({"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                                   "hysteresis", "consecutive_hysteresis", "min_loss_scale", "auto_cast"});
    }
    // DeepSpeed accepts "bfloat16" as another name for "bf16".
    std::optional<JsonSection> bf16_section = top->section("bf16");
    std::optional<JsonSection> bfloat16_section = top->section("bfloat16");
    ZT_CHECK(!(bf16_section && bfloat16_section),
             "DeepSpeed config has both bf16 and bfloat16 (the same setting)");
    if (!bf16_section) bf16_section = std::move(bfloat16_section);
    if (bf16_section) {
      bf16_enabled = bf16_section->boolean("enabled", true);
      bf16_section->reject_unread({"enabled"});
    }
    ZT_CHECK(!(fp16_enabled.given() && fp16_enabled.value && bf16_enabled.given() && bf16_enabled.value),
             "DeepSpeed config enables both fp16 and bf16 (", fp16_enabled.path, " and ", bf16_enabled.path,
             " are true); enable at most one");
    // What the JSON allows: an enabled section fixes the dtype, a disabled one rules its dtype out.
    std::optional<ComputeDType> wanted;
    std::string wanted_by;
    if (fp16_enabled.given() && fp16_enabled.value) {
      wanted = ComputeDType::f16;
      wanted_by = fp16_enabled.path + " true";
    } else if (bf16_enabled.given() && bf16_enabled.value) {
      wanted = ComputeDType::bf16;
      wanted_by = bf16_enabled.path + " true";
    }
    const bool f16_ruled_out = fp16_enabled.given() && !fp16_enabled.value;
    const bool bf16_ruled_out = bf16_enabled.given() && !bf16_enabled.value;
    const bool dtype_fits = wanted ? dtype == *wanted
                                   : !((dtype == ComputeDType::f16 && f16_ruled_out) ||
                                       (dtype == ComputeDType::bf16 && bf16_ruled_out));
    if (!dtype_fits) {
      if (!wanted) {
        wanted_by = dtype == ComputeDType::f16 ? fp16_enabled.path + " false" : bf16_enabled.path + " false";
      }
      ZT_CHECK(origin_of("dtype") != Origin::flag, "--dtype ", compute_dtype_name(dtype),
               " contradicts DeepSpeed config ", wanted_by);
      // With neither section enabled DeepSpeed trains in fp32.
      dtype = wanted.value_or(ComputeDType::f32);
      set_json_origin(*this, "dtype", wanted_by);
    } else if (fp16_enabled.automatic() || bf16_enabled.automatic()) {
      origin_notes["dtype"] = "fills fp16/bf16.enabled=auto";
    } else if (wanted) {
      if (origin_of("dtype") != Origin::flag) set_json_origin(*this, "dtype", wanted_by);
    }
  }

  // ---- ZeRO ----
  zero = ZeroSettings{};
  if (std::optional<JsonSection> z = top ? top->section("zero_optimization") : std::nullopt) {
    auto integer = [&](const char* key, int64_t& field, bool auto_allowed, int64_t auto_value) {
      const JsonValue<int64_t> v = z->integer(key, auto_allowed);
      if (v.given()) {
        ZT_CHECK(v.value >= 0, "DeepSpeed config ", v.path, " must be non-negative, got ", v.value);
        field = v.value;
        set_json_origin(*this, v.path, v.path);
      } else if (v.automatic()) {
        ZT_CHECK(inputs.hidden_size > 0, "DeepSpeed config ", v.path,
                 " is \"auto\", which needs the model's hidden size (not given to resolve)");
        field = auto_value;
        origins[v.path] = Origin::json_auto;
      }
    };
    auto boolean = [&](const char* key, bool& field, bool auto_allowed = false, bool auto_value = false) {
      const JsonValue<bool> v = z->boolean(key, auto_allowed);
      if (v.given()) {
        field = v.value;
        set_json_origin(*this, v.path, v.path);
      } else if (v.automatic()) {
        field = auto_value;
        origins[v.path] = Origin::json_auto;
      }
      return v;
    };
    auto offload = [&](const char* key, OffloadSettings& field) {
      std::optional<JsonSection> section = z->section(key);
      if (!section) return;
      const JsonValue<std::string> device = section->string("device");
      if (device.given()) {
        ZT_CHECK(device.value == "cpu" || device.value == "none", "DeepSpeed config ", device.path, " '",
                 device.value, "' is not supported (cpu or none; zerotrain has no NVMe offload)");
        field.enabled = device.value == "cpu";
        set_json_origin(*this, device.path, device.path);
      }
      if (const JsonValue<bool> v = section->boolean("pin_memory", false); v.given()) {
        field.pin_memory = v.value;
        set_json_origin(*this, v.path, v.path);
      }
      section->reject_unread({"device", "pin_memory"});
    };
    const int64_t hidden = inputs.hidden_size;
    int64_t stage = 0;
    integer("stage", stage, false, 0);
    ZT_CHECK(stage >= 0 && stage <= 3, "DeepSpeed config zero_optimization.stage must be 0, 1, 2 or 3, got ",
             stage);
    zero.stage = static_cast<int>(stage);
    zero.overlap_comm = zero.stage == 3;  // DeepSpeed's default depends on the stage
    boolean("allgather_partitions", zero.allgather_partitions);
    integer("allgather_bucket_size", zero.allgather_bucket_size, false, 0);
    boolean("overlap_comm", zero.overlap_comm);
    boolean("reduce_scatter", zero.reduce_scatter);
    // HF/Accelerate's hidden-size rules for "auto".
    integer("reduce_bucket_size", zero.reduce_bucket_size, true, hidden * hidden);
    boolean("contiguous_gradients", zero.contiguous_gradients);
    boolean("round_robin_gradients", zero.round_robin_gradients);
    offload("offload_optimizer", zero.offload_optimizer);
    offload("offload_param", zero.offload_param);
    integer("sub_group_size", zero.sub_group_size, false, 0);
    integer("stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size, true,
            static_cast<int64_t>(0.9 * static_cast<double>(hidden * hidden)));
    integer("stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold, true, 10 * hidden);
    integer("stage3_max_live_parameters", zero.stage3_max_live_parameters, false, 0);
    integer("stage3_max_reuse_distance", zero.stage3_max_reuse_distance, false, 0);
    // "auto" -> false, as Accelerate fills it; the old fp16 name is DeepSpeed's alias.
    const JsonValue<bool> gather = boolean("stage3_gather_16bit_weights_on_model_save",
                                           zero.stage3_gather_16bit_weights_on_model_save, true, false);
    const JsonValue<bool> gather_old = boolean("stage3_gather_fp16_weights_on_model_save",
                                               zero.stage3_gather_16bit_weights_on_model_save, true, false);
    ZT_CHECK(!(gather.state != JsonValue<bool>::State::absent &&
               gather_old.state != JsonValue<bool>::State::absent),
             "DeepSpeed config has both stage3_gather_16bit_weights_on_model_save and its old name "
             "stage3_gather_fp16_weights_on_model_save");
    z->reject_unread({"stage", "allgather_partitions", "allgather_bucket_size", "overlap_comm",
                      "reduce_scatter", "reduce_bucket_size", "contiguous_gradients", "round_robin_gradients",
                      "offload_optimizer", "offload_param", "sub_group_size", "stage3_prefetch_bucket_size",
                      "stage3_param_persistence_threshold", "stage3_max_live_parameters",
                      "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save"});
    ZT_CHECK(!zero.offload_param.enabled || zero.stage == 3,
             "DeepSpeed config zero_optimization.offload_param needs "
             "stage 3 (parameters are only partitioned there), but zero_optimization.stage is ",
             zero.stage);
    ZT_CHECK(!zero.offload_optimizer.enabled || zero.stage >= 1,
             "DeepSpeed config "
             "zero_optimization.offload_optimizer needs stage 1, 2 or 3, but zero_optimization.stage is 0");
    ZT_CHECK(zero.reduce_bucket_size > 0 && zero.allgather_bucket_size > 0,
             "DeepSpeed config zero_optimization bucket sizes must be positive");
  }

  if (top) {
    top->reject_unread({"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                        "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
                        "zero_allow_untested_optimizer", "optimizer", "scheduler", "fp16", "bf16",
                        "zero_optimization"});
  }
  resolved = true;
}

// ---------------------------------------------------------------------------------------------------------
// describe()

std::string TrainConfig::describe() const {
  std::ostringstream out;
  out << "zerotrain configuration (world_size " << world_size;
  if (!deepspeed_config.empty()) out << ", DeepSpeed config " << deepspeed_config;
  out << ")\n";
  auto line = [&](const std::string& key, const std::string& value) {
    const Origin origin = origin_of(key);
    const auto note = origin_notes.find(key);
    std::string where(origin_name(origin));
    if (note != origin_notes.end()) where += (origin == Origin::json ? " " : ", ") + note->second;
    // JSON keys are described by their path already; "json <same path>" would repeat it.
    if (origin == Origin::json && note != origin_notes.end() && note->second == key) where = "json";
    out << "  " << std::left << std::setw(60) << key << " " << std::setw(24)
        << (value.empty() ? "(none)" : value) << " [" << where << "]\n";
  };
  auto n = [](double v) { return show_double(v); };
  auto i = [](int64_t v) { return std::to_string(v); };
  auto b = [](bool v) { return show_bool(v); };

  out << "data\n";
  line("task_name", task_name);
  line("data_dir", data_dir);
  line("train_file", train_file);
  line("validation_file", validation_file);
  line("test_file", test_file);
  line("max_length", i(max_length));
  line("pad_to_max_length", b(pad_to_max_length));
  line("per_device_train_batch_size", i(per_device_train_batch_size));
  line("gradient_accumulation_steps", i(gradient_accumulation_steps));
  line("train_batch_size", i(train_batch_size));
  line("per_device_eval_batch_size", i(per_device_eval_batch_size));

  out << "model\n";
  line("model_name_or_path", model_name_or_path.empty() ? "(embedded default)" : model_name_or_path);
  line("ignore_mismatched_sizes", b(ignore_mismatched_sizes));

  out << "optimizer\n";
  line("optimizer.type", optimizer_type + (torch_adam ? " (torch_adam)" : ""));
  line("learning_rate", n(learning_rate));
  line("weight_decay", n(weight_decay));
  line("adam_beta1", n(adam_beta1));
  line("adam_beta2", n(adam_beta2));
  line("adam_epsilon", n(adam_epsilon));
  line("max_grad_norm", max_grad_norm > 0 ? n(max_grad_norm) : "0 (no clipping)");

  out << "schedule\n";
  line("num_train_epochs", i(num_train_epochs));
  line("max_train_steps", max_train_steps ? i(*max_train_steps) : "");
  line("num_update_steps_per_epoch", i(num_update_steps_per_epoch));
  line("num_training_steps", i(num_training_steps));
  line("num_warmup_steps", i(num_warmup_steps));
  if (deepspeed_schedule) {
    const DeepSpeedSchedule& s = *deepspeed_schedule;
    line("scheduler.type", std::string(deepspeed_schedule_name(s.type)));
    if (s.type == DeepSpeedSchedule::Type::warmup_cosine_lr) {
      line("scheduler.warmup_min_ratio", n(s.warmup_min_ratio));
      line("scheduler.cos_min_ratio", n(s.cos_min_ratio));
    } else {
      line("scheduler.warmup_min_lr", n(s.warmup_min_lr));
      line("scheduler.warmup_max_lr", n(s.warmup_max_lr));
    }
    if (s.type != DeepSpeedSchedule::Type::warmup_lr) line("scheduler.total_num_steps", i(s.total_num_steps));
    line("scheduler.warmup_type", s.warmup_log ? "log" : "linear");
  } else {
    line("lr_scheduler_type", lr_scheduler_type);
  }

  out << "precision\n";
  line("dtype", std::string(compute_dtype_name(dtype)));
  if (dtype == ComputeDType::f16) {
    line("fp16.loss_scale", fp16.static_scale > 0 ? n(fp16.static_scale) : "0 (dynamic)");
    line("fp16.initial_scale_power", i(fp16.initial_scale_power));
    line("fp16.loss_scale_window", i(fp16.scale_window));
    line("fp16.hysteresis", i(fp16.hysteresis));
    line("fp16.consecutive_hysteresis", b(fp16.consecutive_hysteresis));
    line("fp16.min_loss_scale", n(fp16.min_scale));
    line("fp16.auto_cast", b(fp16_auto_cast));
  }

  out << "ZeRO\n";
  const std::string z = "zero_optimization.";
  line(z + "stage", i(zero.stage));
  line(z + "allgather_partitions", b(zero.allgather_partitions));
  line(z + "allgather_bucket_size", i(zero.allgather_bucket_size));
  line(z + "overlap_comm", b(zero.overlap_comm));
  line(z + "reduce_scatter", b(zero.reduce_scatter));
  line(z + "reduce_bucket_size", i(zero.reduce_bucket_size));
  line(z + "contiguous_gradients", b(zero.contiguous_gradients));
  line(z + "round_robin_gradients", b(zero.round_robin_gradients));
  line(z + "offload_optimizer.device", zero.offload_optimizer.enabled ? "cpu" : "none");
  line(z + "offload_optimizer.pin_memory", b(zero.offload_optimizer.pin_memory));
  line(z + "offload_param.device", zero.offload_param.enabled ? "cpu" : "none");
  line(z + "offload_param.pin_memory", b(zero.offload_param.pin_memory));
  if (zero.stage == 3) {
    line(z + "sub_group_size", i(zero.sub_group_size));
    line(z + "stage3_prefetch_bucket_size", i(zero.stage3_prefetch_bucket_size));
    line(z + "stage3_param_persistence_threshold", i(zero.stage3_param_persistence_threshold));
    line(z + "stage3_max_live_parameters", i(zero.stage3_max_live_parameters));
    line(z + "stage3_max_reuse_distance", i(zero.stage3_max_reuse_distance));
    line(z + "stage3_gather_16bit_weights_on_model_save", b(zero.stage3_gather_16bit_weights_on_model_save));
  }

  out << "run\n";
  line("device", std::string(device_choice_name(device)));
  line("gpu_memory_limit", gpu_memory_limit == 0 ? "" : format_memory_size(gpu_memory_limit));
  line("seed", std::to_string(seed));
  line("output_dir", output_dir);
  line("checkpointing_steps", show_checkpointing(checkpointing_steps));
  line("resume_from_checkpoint", resume_from_checkpoint);
  line("log_every", i(log_every));
  line("steps_per_print", i(steps_per_print));
  line("wall_clock_breakdown", b(wall_clock_breakdown));
  return out.str();
}

}  // namespace zt::optim
