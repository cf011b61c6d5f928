// The flags: one table that parsing and --help both read (a flag cannot be parsed without being
// documented), and the table of defaults that depend on the run (Note [Defaults that depend on the run]).
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "app/config/train_config_sections.h"
#include "data/glue_tasks.h"
#include "runtime/flag_table.h"
#include "runtime/memory_size.h"

namespace zt::optim {

using config_detail::show_bool;
using config_detail::show_checkpointing;
using config_detail::show_double;
using config_detail::suggestion;

namespace {

// A year: far beyond any real wait, and small enough to convert to milliseconds without overflow.
constexpr int64_t kMaxTimeoutSeconds = int64_t{365} * 24 * 3600;

double parse_flag_probability(std::string_view flag, const std::string& text) {
  const double value = zt::parse_number_flag(flag, text, 0.0);
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

// A row of the flag table (runtime/flag_table.h): parsing and --help read the same rows.
using FlagSpec = zt::Flag<TrainConfig>;

using C = TrainConfig;
using V = const std::string&;
using F = std::string_view;

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = {
      {"task_name", "NAME",
       "GLUE task: cola sst2 mrpc qqp stsb mnli qnli rte wnli (files from --data_dir); without it (or '') "
       "--train_file/--validation_file are CSV or JSON lines",
       [](C& c, F f, V v) {
         std::string name(v);
         std::transform(name.begin(), name.end(), name.begin(),
                        [](unsigned char ch) { return std::tolower(ch); });
         if (!name.empty()) data::glue_task(name);  // an unknown name is an error listing the tasks
         c.task_name = name;
       },
       [](const C& c) { return c.task_name; }},
      {"model_name_or_path", "PATH", "zerotrain model file or directory; empty = the embedded default model",
       [](C& c, F, V v) { c.model_name_or_path = v; }, [](const C& c) { return c.model_name_or_path; }},
      {"data_dir", "DIR",
       "the task's GLUE folder (train.tsv, dev.tsv, test.tsv; MNLI dev_matched/mismatched)",
       [](C& c, F, V v) { c.data_dir = v; }, [](const C& c) { return c.data_dir; }},
      {"train_file", "PATH", "training file: the task's TSV, or CSV / JSON lines without --task_name",
       [](C& c, F, V v) { c.train_file = v; },
       [](const C& c) { return c.train_file.empty() ? std::string("<data_dir>/train.tsv") : c.train_file; }},
      {"validation_file", "PATH", "validation file (TSV of the task, or CSV / JSON lines)",
       [](C& c, F, V v) { c.validation_file = v; },
       [](const C& c) {
         return c.validation_file.empty() ? std::string("<data_dir>/dev.tsv") : c.validation_file;
       }},
      {"test_file", "PATH", "test file; predictions go to the task's GLUE submission file",
       [](C& c, F, V v) { c.test_file = v; },
       [](const C& c) { return c.test_file.empty() ? std::string("<data_dir>/test.tsv") : c.test_file; }},
      {"max_length", "N", "maximum tokens per sentence pair after tokenization; longer pairs are truncated",
       [](C& c, F f, V v) { c.max_length = zt::parse_integer_flag(f, v, 3); },
       [](const C& c) { return std::to_string(c.max_length); }},
      {"pad_to_max_length", "", "pad every batch to max_length instead of its longest row",
       [](C& c, F, V) { c.pad_to_max_length = true; },
       [](const C& c) { return show_bool(c.pad_to_max_length); }},
      {"per_device_train_batch_size", "N",
       "training batch size per rank (DeepSpeed train_micro_batch_size_per_gpu)",
       [](C& c, F f, V v) { c.per_device_train_batch_size = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) { return std::to_string(c.per_device_train_batch_size); }},
      {"per_device_eval_batch_size", "N", "evaluation batch size per rank",
       [](C& c, F f, V v) { c.per_device_eval_batch_size = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) { return std::to_string(c.per_device_eval_batch_size); }},
      {"learning_rate", "LR", "peak learning rate (after warmup)",
       [](C& c, F f, V v) { c.learning_rate = zt::parse_number_flag(f, v, 0.0); },
       [](const C& c) { return show_double(c.learning_rate); }},
      {"weight_decay", "WD", "AdamW weight decay (not applied to biases and LayerNorm weights)",
       [](C& c, F f, V v) { c.weight_decay = zt::parse_number_flag(f, v, 0.0); },
       [](const C& c) { return show_double(c.weight_decay); }},
      {"adam_beta1", "B1", "AdamW beta1", [](C& c, F f, V v) { c.adam_beta1 = parse_flag_probability(f, v); },
       [](const C& c) { return show_double(c.adam_beta1); }},
      {"adam_beta2", "B2", "AdamW beta2", [](C& c, F f, V v) { c.adam_beta2 = parse_flag_probability(f, v); },
       [](const C& c) { return show_double(c.adam_beta2); }},
      {"adam_epsilon", "EPS", "AdamW epsilon",
       [](C& c, F f, V v) {
         c.adam_epsilon = zt::parse_number_flag(f, v, 0.0);
         ZT_CHECK(c.adam_epsilon > 0, "--", f, " must be positive, got ", v);
       },
       [](const C& c) { return show_double(c.adam_epsilon); }},
      {"max_grad_norm", "NORM",
       "clip the global gradient norm to this; 0 disables (HF Trainer's default 1.0)",
       [](C& c, F f, V v) { c.max_grad_norm = zt::parse_number_flag(f, v, 0.0); },
       [](const C& c) { return show_double(c.max_grad_norm); }},
      {"num_train_epochs", "N", "epochs to train (ignored when --max_train_steps is given)",
       [](C& c, F f, V v) { c.num_train_epochs = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) { return std::to_string(c.num_train_epochs); }},
      {"max_train_steps", "N", "total optimizer steps; overrides --num_train_epochs",
       [](C& c, F f, V v) { c.max_train_steps = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) {
         return c.max_train_steps ? std::to_string(*c.max_train_steps) : std::string("none");
       }},
      {"gradient_accumulation_steps", "N", "micro-batches accumulated per optimizer step",
       [](C& c, F f, V v) { c.gradient_accumulation_steps = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) { return std::to_string(c.gradient_accumulation_steps); }},
      {"lr_scheduler_type", "NAME", "linear, cosine, constant or constant_with_warmup",
       [](C& c, F, V v) {
         parse_schedule_kind(v);  // throws, naming the HF schedules that exist but are not implemented
         c.lr_scheduler_type = v;
       },
       [](const C& c) { return c.lr_scheduler_type; }},
      {"num_warmup_steps", "N", "optimizer steps of linear warmup",
       [](C& c, F f, V v) { c.num_warmup_steps = zt::parse_integer_flag(f, v, 0); },
       [](const C& c) { return std::to_string(c.num_warmup_steps); }},
      {"seed", "N", "seed for initialization, shuffling and dropout",
       [](C& c, F f, V v) { c.seed = static_cast<uint64_t>(zt::parse_integer_flag(f, v, 0)); },
       [](const C& c) { return std::to_string(c.seed); }},
      {"output_dir", "DIR", "where to write the final model and checkpoints; empty = write nothing",
       [](C& c, F, V v) { c.output_dir = v; }, [](const C& c) { return c.output_dir; }},
      {"checkpointing_steps", "N|epoch",
       "save a checkpoint every N optimizer steps, or at the end of each epoch",
       [](C& c, F f, V v) {
         if (v == "epoch") {
           c.checkpointing_steps = {CheckpointingSteps::Kind::epoch, 0};
         } else {
           c.checkpointing_steps = {CheckpointingSteps::Kind::steps, zt::parse_integer_flag(f, v, 1)};
         }
       },
       [](const C& c) { return show_checkpointing(c.checkpointing_steps); }},
      {"resume_from_checkpoint", "PATH", "checkpoint to resume from",
       [](C& c, F, V v) { c.resume_from_checkpoint = v; },
       [](const C& c) { return c.resume_from_checkpoint; }},
      {"ignore_mismatched_sizes", "", "replace a checkpoint classifier whose label count differs",
       [](C& c, F, V) { c.ignore_mismatched_sizes = true; },
       [](const C& c) { return show_bool(c.ignore_mismatched_sizes); }},
      {"gradient_checkpointing", "",
       "recompute each encoder layer's forward in the backward instead of keeping every layer's activations: "
       "one more forward a step, a fraction of the activation memory (HF's flag; the same gradients)",
       [](C& c, F, V) { c.gradient_checkpointing = true; },
       [](const C& c) { return show_bool(c.gradient_checkpointing); }},
      {"deepspeed_config", "FILE",
       "DeepSpeed JSON config (ZeRO stage, batch sizes, optimizer, schedule, precision, ...)",
       [](C& c, F, V v) { c.deepspeed_config = v; }, [](const C& c) { return c.deepspeed_config; }},
      {"gpu_memory_limit", "SIZE", "cap on device memory, e.g. 24GiB; 0 = the whole device",
       [](C& c, F f, V v) {
         try {
           c.gpu_memory_limit = parse_memory_size(v);
         } catch (const Error& e) {
           throw with_context(str("--", f, " needs a size such as 24GiB, got '", v, "': "), e);
         }
       },
       [](const C& c) {
         return c.gpu_memory_limit == 0 ? std::string("0") : format_memory_size(c.gpu_memory_limit);
       }},
      {"host_memory_limit", "SIZE",
       "cap on the host memory (pinned + pageable) of the offload, e.g. 32GiB; state that does not fit needs "
       "offload_optimizer device nvme (the disk tier); 0 = no cap",
       [](C& c, F f, V v) {
         try {
           c.host_memory_limit = parse_memory_size(v);
         } catch (const Error& e) {
           throw with_context(str("--", f, " needs a size such as 32GiB, got '", v, "': "), e);
         }
         // "--host_memory_limit 32" is 32 bytes: surely a missing unit, not a cap anything could run under.
         ZT_CHECK(c.host_memory_limit == 0 || c.host_memory_limit >= (size_t{1} << 20), "--", f, " ", v,
                  " is below 1 MiB: a unit is missing? (e.g. ", v, "GiB)");
       },
       [](const C& c) {
         return c.host_memory_limit == 0 ? std::string("0") : format_memory_size(c.host_memory_limit);
       }},
      {"dtype", "f32|bf16|f16", "compute dtype (fp32 master weights always); f16 uses dynamic loss scaling",
       [](C& c, F f, V v) { c.dtype = parse_dtype(f, v); },
       [](const C& c) { return std::string(compute_dtype_name(c.dtype)); }},
      {"device", "auto|cpu|cuda", "where to compute; auto = cuda when a GPU is present",
       [](C& c, F f, V v) { c.device = parse_device(f, v); },
       [](const C& c) { return std::string(device_choice_name(c.device)); }},
      {"log_every", "N",
       "optimizer steps between metrics.jsonl / TensorBoard records (HF's logging steps; DeepSpeed's "
       "steps_per_print does not set it)",
       [](C& c, F f, V v) { c.log_every = zt::parse_integer_flag(f, v, 1); },
       [](const C& c) { return std::to_string(c.log_every); }},
      {"world_size", "N",
       "ranks of the run, as threads of this process with in-process collectives (ZeRO shards over them)",
       [](C& c, F f, V v) {
         c.world_size = static_cast<int>(zt::parse_integer_flag(f, v, 1, kMaxWorldSize));
       },
       [](const C& c) { return std::to_string(c.world_size); }},
      {"collective_timeout", "SECONDS",
       "a rank waiting longer than this in a collective aborts the run naming the missing ranks; 0 = none",
       [](C& c, F f, V v) {
         c.collective_timeout_seconds = zt::parse_integer_flag(f, v, 0, kMaxTimeoutSeconds);
       },
       [](const C& c) { return std::to_string(c.collective_timeout_seconds); }},
      {"debug_collectives", "", "extra checks and logging around every collective, for diagnosing hangs",
       [](C& c, F, V) { c.debug_collectives = true; },
       [](const C& c) { return show_bool(c.debug_collectives); }},
      {"offload_delayed_update", "",
       "with CPU optimizer offload: overlap each step's CPU update with the next step's forward and "
       "backward, "
       "which then use parameters one update old (ZeRO-Offload's delayed parameter update)",
       [](C& c, F, V) { c.offload_delayed_update = true; },
       [](const C& c) { return show_bool(c.offload_delayed_update); }},
      {"offload_ratio", "R",
       "with CPU optimizer offload: keep and update this fraction (0 < R <= 1) of each rank's optimizer "
       "state on the host and the rest on the device, both updates at once (exact; "
       "zero_optimization.offload_optimizer.ratio)",
       [](C& c, F f, V v) {
         c.offload_ratio = zt::parse_number_flag(f, v, 0.0);
         ZT_CHECK(c.offload_ratio > 0.0 && c.offload_ratio <= 1.0, "--", f,
                  " must be in (0, 1] (the fraction of the optimizer state on the host), got ", v);
       },
       [](const C& c) {
         return zt::str(c.offload_ratio > 0 ? c.offload_ratio : c.zero.offload_optimizer.ratio);
       }},
      {"offload_overlap_update", "",
       "with CPU optimizer offload: run each step's (exact) CPU update on a host thread while the next "
       "forward starts, which waits for each layer's update before it uses that layer (world size 1)",
       [](C& c, F, V) { c.offload_overlap_update = true; },
       [](const C& c) { return show_bool(c.offload_overlap_update); }},
      {"no_offload_overlap_update", "",
       "with CPU optimizer offload on a GPU: run the CPU update inside each step instead of beside the next "
       "forward (the overlap is on by default where --offload_overlap_update's conditions hold)",
       [](C& c, F, V) { c.no_offload_overlap_update = true; },
       [](const C& c) { return show_bool(c.no_offload_overlap_update); }},
      {"overlap_optimizer", "",
       "GPU: queue each step's AdamW on its own stream, layer by layer in the forward's order, so that the "
       "next forward starts beside it (stage 0, or world size 1; the same results)",
       [](C& c, F, V) { c.overlap_optimizer = true; },
       [](const C& c) { return show_bool(c.overlap_optimizer); }},
      {"estimate_memory", "", "print the memory estimate of the run and exit without training",
       [](C& c, F, V) { c.estimate_memory = true; }, [](const C& c) { return show_bool(c.estimate_memory); }},
      {"auto_plan", "",
       "choose the fastest ZeRO stage, offload, gradient checkpointing and micro-batch x accumulation that "
       "fit the device cap for the same global batch (app/plan); with --estimate_memory print the plan and "
       "exit",
       [](C& c, F, V) { c.auto_plan = true; }, [](const C& c) { return show_bool(c.auto_plan); }},
      {"calibrate", "",
       "measure this host's CPU AdamW rate and norm-pass bandwidth (and, with a GPU, its GEMM, HBM, PCIe and "
       "AdamW rates, the model's encoder and the collectives' rates: in-process ranks on the GPU, NCCL "
       "across >= 2 GPUs), write them to --machine_figures (default: the cache "
       "~/.cache/zerotrain/machine_figures.json that --auto_plan reads) and exit (under a minute)",
       [](C& c, F, V) { c.calibrate = true; }, [](const C& c) { return show_bool(c.calibrate); }},
      {"machine_figures", "FILE",
       "--auto_plan's cost model figures (JSON, app/plan/cost_model.h); default: this machine's cached "
       "--calibrate, else the built-in H200 figures",
       [](C& c, F, V v) { c.machine_figures = v; }, [](const C& c) { return c.machine_figures; }},
      {"overwrite_output_dir", "", "write into --output_dir even when it already holds files (HF's flag)",
       [](C& c, F, V) { c.overwrite_output_dir = true; },
       [](const C& c) { return show_bool(c.overwrite_output_dir); }},
      {"config_file", "FILE",
       "Accelerate config (YAML from `accelerate config`): distributed_type, mixed_precision, num_processes, "
       "deepspeed_config, ...",
       [](C& c, F, V v) { c.config_file = v; }, [](const C& c) { return c.config_file; }},
      {"with_tracking", "", "write TensorBoard event files under <output_dir>/runs/ (HF's flag)",
       [](C& c, F, V) { c.with_tracking = true; }, [](const C& c) { return show_bool(c.with_tracking); }},
      {"report_to", "NAME", "tracker for --with_tracking: tensorboard, or all (= tensorboard, the only one)",
       [](C& c, F f, V v) {
         ZT_CHECK(v == "tensorboard" || v == "all", "--", f, " ", v,
                  ": zerotrain reports to tensorboard only (--report_to tensorboard or all)");
         c.report_to = v;
       },
       [](const C& c) { return c.report_to; }},
      {"wall_clock_breakdown", "",
       "log per-segment step times (forward, backward, optimizer, ...) with the other scalars (DeepSpeed "
       "key)",
       [](C& c, F, V) { c.wall_clock_breakdown = true; },
       [](const C& c) { return show_bool(c.wall_clock_breakdown); }},
  };
  return table;
}

// run_glue_no_trainer.py flags we know but do not implement: told apart from typos.
constexpr auto kHfFlagsNotSupported = std::to_array<std::string_view>(
    {"push_to_hub", "hub_model_id", "hub_token", "use_slow_tokenizer", "trust_remote_code"});

const FlagSpec* find_flag(std::string_view name) {
  for (const FlagSpec& spec : flag_table()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Note [Defaults that depend on the run]: the embedded model's recipe (train_mrpc's default run). CPU: the
// small random-init model learns within a couple of minutes on two cores. GPU: the xlarge model at the batch
// the Accelerate/DeepSpeed blog reached with ZeRO-2 (40); the eval batch shares the activation arena planned
// for max(train, eval), so it stays at the train batch there. The CPU backend computes in f32 only.
constexpr std::array<RunDefault, 4> kRunDefaults = {{
    {.flag = "learning_rate", .on_gpu = "2e-5", .on_cpu = "1e-4", .embedded_model_only = true},
    {.flag = "per_device_train_batch_size", .on_gpu = "40", .on_cpu = "32", .embedded_model_only = true},
    {.flag = "per_device_eval_batch_size", .on_gpu = "40", .on_cpu = "64", .embedded_model_only = true},
    {.flag = "dtype", .on_gpu = "bf16", .on_cpu = "f32", .embedded_model_only = false},
}};

const RunDefault* find_run_default(std::string_view flag) {
  for (const RunDefault& row : kRunDefaults) {
    if (row.flag == flag) return &row;
  }
  return nullptr;
}

// A run default as --help shows the flag's values: parsed by the flag, printed by its show().
std::string shown_value(const FlagSpec& spec, std::string_view value) {
  TrainConfig config;
  spec.set(config, spec.name, std::string(value));
  return spec.show(config);
}

// "[default: 2e-05 on a GPU, 0.0001 on the CPU (embedded model); 5e-05 with --model_name_or_path]".
std::string help_default(const FlagSpec& spec, const std::string& flag_default) {
  const RunDefault* row = find_run_default(spec.name);
  if (row == nullptr) return str("[default: ", flag_default.empty() ? "none" : flag_default, "]");
  std::string text = str("[default: ", shown_value(spec, row->on_gpu), " on a GPU, ",
                         shown_value(spec, row->on_cpu), " on the CPU");
  if (row->embedded_model_only)
    text += str(" (embedded model); ", flag_default, " with --model_name_or_path");
  return text + "]";
}

}  // namespace

std::span<const RunDefault> run_defaults() {
  return kRunDefaults;
}

void apply_run_defaults(TrainConfig& config, bool embedded_model) {
  ZT_CHECK(config.device == DeviceChoice::cpu || config.device == DeviceChoice::cuda,
           "apply_run_defaults needs the device settled (cpu or cuda), got ",
           device_choice_name(config.device));
  const bool gpu = config.device == DeviceChoice::cuda;
  for (const RunDefault& row : kRunDefaults) {
    if (row.embedded_model_only && !embedded_model) continue;
    if (config.origin_of(row.flag) != Origin::default_value) continue;
    const FlagSpec* spec = find_flag(row.flag);
    ZT_CHECK(spec != nullptr, "run default for unknown flag --", row.flag);
    spec->set(config, row.flag, std::string(gpu ? row.on_gpu : row.on_cpu));
    config.origin_notes[std::string(row.flag)] =
        str(gpu ? "on a GPU" : "on the CPU", row.embedded_model_only ? " with the embedded model" : "");
  }
}

TrainConfig TrainConfig::from_args(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return from_args(args);
}

TrainConfig TrainConfig::from_args(const std::vector<std::string>& args) {
  TrainConfig config;
  // run_glue_no_trainer.py flags zerotrain lacks are told apart from typos (flag values never start with --).
  for (const std::string& arg : args) {
    if (!arg.starts_with("--")) continue;
    const std::string name =
        arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    ZT_CHECK(find_flag(name) != nullptr || std::find(kHfFlagsNotSupported.begin(), kHfFlagsNotSupported.end(),
                                                     name) == kHfFlagsNotSupported.end(),
             "--", name, " is a run_glue_no_trainer.py flag that zerotrain does not support");
  }
  const zt::ParsedFlags parsed = zt::parse_flags<TrainConfig>(flag_table(), args, config);
  if (parsed.help) {
    config.show_help = true;
    return config;
  }
  for (const std::string& name : parsed.given) config.origins[name] = Origin::flag;
  // After every flag, so that a key contradicting a flag is told wherever the flag stands.
  if (!config.config_file.empty())
    config.apply_accelerate_config(config_detail::read_config_file(config.config_file, "--config_file"),
                                   config.config_file);
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
    if (!spec.metavar.empty()) out << " " << help_default(spec, shown);
    out << "\n";
  }
  out << std::left << std::setw(44) << "  --help"
      << " "
      << "print this text and exit\n";
  return out.str();
}

namespace config_detail {

std::string suggestion(std::string_view name, const std::vector<std::string_view>& candidates) {
  return zt::did_you_mean(name, candidates);
}

}  // namespace config_detail
}  // namespace zt::optim
