// The training configuration of train_mrpc: HuggingFace run_glue_no_trainer.py's flags (same names, same
// defaults) plus zerotrain's own, reconciled with an optional DeepSpeed JSON config (--deepspeed_config) read
// with DeepSpeed's schema, "auto" values included.
//
//   TrainConfig config = TrainConfig::from_args(argc, argv);    // flags only; throws zt::Error on bad input
//   if (config.show_help) { std::fputs(TrainConfig::help_text().c_str(), stdout); return 0; }
//   config.device = DeviceChoice::cpu;                          // the launcher settles the device first
//   apply_run_defaults(config, /*embedded_model=*/true);        // Note [Defaults that depend on the run]
//   config.resolve({.world_size = 1, .hidden_size = model.hidden_size, .num_train_examples = train.size()});
//   std::fputs(config.describe().c_str(), stdout);
//
// The implementation is one file per section: train_config.cpp (names, resolve() in order, describe()),
// train_config_flags.cpp (flag table, --help, run defaults), train_config_json.cpp (reading and parsing the
// DeepSpeed JSON), and train_config_{data,optimizer,schedule,precision,zero,offload}.cpp, each resolving and
// describing its own keys.
//
// Note [Flags versus the DeepSpeed JSON]
// Many settings can come from a flag and from the JSON (learning rate, batch sizes, clipping, dtype...).
//   JSON "auto" or key absent -> the flag's value (explicit or default), as HF's DeepSpeed integration does
//                                for "auto". An absent key taking the flag too is our choice: DeepSpeed would
//                                use its own default (e.g. no clipping when gradient_clipping is missing even
//                                though --max_grad_norm is 1.0), a silent surprise we do not reproduce.
//   JSON value, flag left at its default -> the JSON value, and the flag field is updated to it.
//   JSON value, flag given and equal     -> fine.
//   JSON value, flag given and different -> zt::Error naming both. DeepSpeed under Accelerate silently uses
//   the
//                                JSON value (HF Trainer errors); an explicit flag that is then ignored is a
//                                bug report waiting to happen, so we refuse.
// After resolve() the flag fields hold the values training uses; origin_of(name) says where each came from.
//
// Note [Defaults that depend on the run]
// A few defaults differ between a GPU and a CPU run, and for the embedded default model (see run_defaults()):
// the flag table keeps HF's defaults, --help prints each run default beside it, and apply_run_defaults()
// (called by train_mrpc once the device is known) sets the flags still at their default. One table serves
// both, so --help cannot drift from what a run does.
//
// Note [max_grad_norm]
// run_glue_no_trainer.py never clips gradients; HF Trainer (and Accelerate's DeepSpeed "auto" for
// gradient_clipping) use 1.0. We default to 1.0 so that a JSON-driven and a flag-driven run agree and the
// blog's configs behave as under Accelerate; pass --max_grad_norm 0 to disable clipping.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"

namespace zt::optim {

enum class ComputeDType { f32, bf16, f16 };

// What zerotrain does with one key of a DeepSpeed JSON (a refused key ends resolve() with an error instead).
struct JsonKeyVerdict {
  enum class Use { honoured, explained };

  std::string path;  // e.g. "zero_optimization.offload_optimizer.pin_memory"
  Use use = Use::honoured;
  std::string note;  // honoured: what it sets, or a note on its value; explained: why it changes nothing
};

// Every key of the DeepSpeed JSON with its verdict, printed by describe() under "deepspeed config keys"
// (Note [DeepSpeed keys], app/config/train_config_keys.cpp). The sections set notes as they resolve.
struct DeepSpeedKeyVerdicts {
  std::vector<JsonKeyVerdict> verdicts;                       // dotted paths, document order
  std::map<std::string, std::string, std::less<>> notes;      // path -> note on an honoured key's line
  std::map<std::string, std::string, std::less<>> explained;  // path -> why a key read changes nothing
};

enum class DeviceChoice { auto_detect, cpu, cuda };

// Where a resolved value came from; printed by describe().
enum class Origin {
  default_value,  // the flag's default, nothing else said anything
  flag,           // given on the command line
  json,           // a value in the DeepSpeed JSON
  json_auto,      // "auto" in the JSON, filled from a flag or from the model/world size
  derived,        // computed from other settings (e.g. train_batch_size, num_training_steps)
  accelerate,     // a key of Accelerate's config file (--config_file)
};
std::string_view origin_name(Origin origin);

// --checkpointing_steps: absent (no checkpoints), "epoch", or every N optimizer steps.
struct CheckpointingSteps {
  enum class Kind { none, epoch, steps };
  Kind kind = Kind::none;
  int64_t every = 0;  // for Kind::steps, > 0
};

std::string_view deepspeed_schedule_name(DeepSpeedSchedule::Type type);

// The disk-tier keys of an offload section (device "nvme"), DeepSpeed's names and defaults. Note [Disk tier
// keys] in app/config/train_config_aio.cpp says what each does; the disk tier itself is optim/swap/.
struct NvmeOffloadSettings {
  bool enabled = false;  // device "nvme" (the section's `enabled` is set too)
  std::string nvme_path;
  int64_t buffer_count = 4;            // staging buffers (DeepSpeed: 4 for the optimizer, 5 for parameters)
  int64_t buffer_size = 100'000'000;   // offload_param: elements per buffer
  int64_t max_in_cpu = 1'000'000'000;  // offload_param: parameter elements kept in host memory
  bool pipeline_read = false;          // offload_optimizer: read ahead during the update
  bool pipeline_write = false;         // offload_optimizer: write behind during the update
};

// An offload_optimizer / offload_param section (app/config/train_config_offload.cpp): device "cpu" turns it
// on, "none" leaves it off, "nvme" turns on `nvme` (the state on disk, app/config/train_config_aio.cpp).
struct OffloadSettings {
  bool enabled = false;  // device "cpu"
  bool pin_memory = false;
  // offload_optimizer.ratio (or --offload_ratio): the fraction of the optimizer state kept and updated on
  // the host, in (0, 1] (ZeroOffload::ratio: a partial offload below 1, device cpu, stages 1-3).
  double ratio = 1.0;
  NvmeOffloadSettings nvme;
};

// DeepSpeed's top-level "aio" block: how the disk tier submits its reads and writes (runtime/direct_io.h).
struct AioSettings {
  int64_t block_size = 1'048'576;  // bytes per request; a multiple of 4096
  int64_t queue_depth = 8;         // requests in flight per thread
  int64_t thread_count = 1;        // I/O threads; "intra_op_parallelism" is its newer name
  bool single_submit = false;      // submit each request on its own
  bool overlap_events = true;      // refill the queue as requests complete
};

// zero_optimization, with DeepSpeed's defaults (sizes are element counts, as in DeepSpeed). Note [ZeRO keys]
// in app/config/train_config_zero.cpp says what each key does here: zerotrain's unit of communication is a
// whole layer (each encoder layer's tensors, the embeddings, the remaining tensors), so the bucket sizes and
// the stage-3 fetch tuning are accepted and stored but do not change what a collective carries; describe()
// prints an "effective:" note for each.
struct ZeroSettings {
  int stage = 0;                     // 0, 1, 2 or 3
  bool allgather_partitions = true;  // always true (false is refused)
  int64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;   // collectives on a communication stream; DeepSpeed: true for stage 3 only
  bool reduce_scatter = true;  // false = all-reduce the gradients, then keep this rank's shard
  int64_t reduce_bucket_size = 500'000'000;
  bool contiguous_gradients = true;  // always true (false is refused)
  OffloadSettings offload_optimizer;
  OffloadSettings offload_param;  // stage 3 only
  int64_t sub_group_size = 1'000'000'000;
  int64_t stage3_prefetch_bucket_size = 50'000'000;
  int64_t stage3_param_persistence_threshold = 100'000;
  // The trainer checks it against two layers plus the embeddings at run time.
  int64_t stage3_max_live_parameters = 1'000'000'000;
  int64_t stage3_max_reuse_distance = 1'000'000'000;
  bool stage3_gather_16bit_weights_on_model_save = false;
};

// What resolve() needs besides the flags and the JSON.
struct ResolveInputs {
  // The ranks the caller already runs (e.g. processes started by a launcher). 1 = a single process, which
  // then runs --world_size in-process ranks; above 1 it must agree with --world_size when that is given.
  int world_size = 1;
  int64_t hidden_size = 0;         // the model's; needed only when a hidden-size "auto" key is present
  int64_t num_train_examples = 0;  // to compute steps per epoch; needed unless --max_train_steps is given
};

struct TrainConfig {
  // ---- HF run_glue_no_trainer.py flags (names and defaults as there) ----
  std::string task_name = "mrpc";  // a GLUE task (data/glue_tasks.h); "" = user CSV / JSON-lines files
  std::string model_name_or_path;  // a zerotrain model file/dir; empty = the embedded default
  std::string train_file;          // MRPC: empty until resolve(): <data_dir>/train.tsv; other tasks: as given
  std::string validation_file;     // MRPC: empty until resolve(): <data_dir>/dev.tsv
  std::string test_file;           // MRPC: empty until resolve(): <data_dir>/test.tsv
  int64_t max_length = 128;
  bool pad_to_max_length = false;  // false = dynamic padding to the longest row of each batch
  int64_t per_device_train_batch_size = 8;
  int64_t per_device_eval_batch_size = 8;
  double learning_rate = 5e-5;
  double weight_decay = 0.0;
  int64_t num_train_epochs = 3;
  std::optional<int64_t> max_train_steps;  // overrides num_train_epochs when given
  int64_t gradient_accumulation_steps = 1;
  std::string lr_scheduler_type = "linear";
  int64_t num_warmup_steps = 0;
  uint64_t seed = 42;      // HF's default is None (unseeded); a run here is always reproducible
  std::string output_dir;  // empty = save nothing
  CheckpointingSteps checkpointing_steps;
  std::string resume_from_checkpoint;    // empty = start fresh
  bool ignore_mismatched_sizes = false;  // replace a checkpoint's classifier whose label count differs
  // HF's --gradient_checkpointing: the backward recomputes each encoder layer's forward instead of the
  // forward keeping every layer's activations (DebertaConfig::gradient_checkpointing; model_config_for_run
  // and the trainer set it there). One more encoder forward a step, far less activation memory, the same
  // gradients bit for bit.
  bool gradient_checkpointing = false;

  // ---- zerotrain's own ----
  std::string deepspeed_config;  // path of a DeepSpeed JSON; empty = flags only
  size_t gpu_memory_limit = 0;   // bytes; 0 = no cap beyond the device
  // bytes of pinned + pageable host memory the host tier may use (offloaded state beyond it goes to the
  // disk tier); 0 = no cap
  size_t host_memory_limit = 0;
  // bf16 as DESIGN.md decides; HF's run is fp32 unless Accelerate is configured for mixed precision.
  ComputeDType dtype = ComputeDType::bf16;
  DeviceChoice device = DeviceChoice::auto_detect;
  double max_grad_norm = 1.0;  // see Note [max_grad_norm]; 0 disables clipping
  double adam_beta1 = 0.9;     // HF Trainer's names; run_glue_no_trainer uses torch's defaults
  double adam_beta2 = 0.999;
  double adam_epsilon = 1e-8;
  std::string data_dir;    // the task's GLUE folder; MRPC defaults to the shipped one
  int64_t log_every = 10;  // optimizer steps between loss lines; DeepSpeed's steps_per_print sets it too
  bool show_help = false;  // --help was given; nothing else was parsed after it
  // Ranks of the run. --world_size N runs N ranks as threads of this process (in-process collectives);
  // resolve() reconciles it with ResolveInputs::world_size. 1..kMaxWorldSize.
  int world_size = 1;
  bool estimate_memory = false;  // --estimate_memory: print the memory estimate and exit without training
  // --auto_plan: app/plan chooses the stage, offload, checkpointing and micro-batch x accumulation (the same
  // global batch); --machine_figures: its cost model's figures (JSON; empty = the built-in measured ones).
  bool auto_plan = false;
  std::string machine_figures;
  bool calibrate = false;          // --calibrate: measure the host's figures into --machine_figures and exit
  bool debug_collectives = false;  // --debug_collectives: extra checks and logging around collectives
  // --offload_delayed_update: ZeRO-Offload's delayed parameter update (one step stale; needs
  // zero_optimization.offload_optimizer.device cpu).
  bool offload_delayed_update = false;
  // --offload_ratio R: zero_optimization.offload_optimizer.ratio (0: not given; the JSON's, or 1).
  double offload_ratio = 0;
  // Where the delayed update lands: in_backward (unit by unit, the only landing a run uses; after_norm where
  // in_backward cannot run), or whole / after_norm forced — no flag or key sets it: the tests compare the
  // unit-by-unit landing with the whole one (ZeroOffload::delayed_landing; the same values in each).
  std::string offload_delayed_landing = "in_backward";
  // --offload_overlap_update: the exact CPU update overlapping the next forward (ZeroOffload::overlap_update;
  // needs offload_optimizer cpu, world size 1, no delayed update, the state not on disk). Without either flag
  // it is on for GPU runs where those hold (ZeroOffload::overlap_update_where_it_applies);
  // --no_offload_overlap_update turns that off.
  bool offload_overlap_update = false;
  bool no_offload_overlap_update = false;
  // --overlap_optimizer: the GPU AdamW on its own stream overlapping the next forward
  // (ZeroEngineOptions::overlap_optimizer; stage 0 or world size 1, no optimizer offload).
  bool overlap_optimizer = false;
  // --collective_timeout: a rank waiting longer than this in a collective aborts the group, naming the ranks
  // that never arrived, instead of hanging; 0 = wait forever.
  int64_t collective_timeout_seconds = 600;
  bool overwrite_output_dir = false;  // HF's --overwrite_output_dir: write into an existing, non-empty dir
  // HF's --with_tracking / --report_to: TensorBoard event files under <output_dir>/runs/ (the only tracker;
  // report_to "all" means it too). app/tracking/run_tracker.h.
  bool with_tracking = false;
  std::string report_to = "all";
  // DeepSpeed's wall_clock_breakdown (also a flag): per-segment step times logged with the other scalars.
  bool wall_clock_breakdown = false;
  // Accelerate's config file (`accelerate launch --config_file`), read by from_args once every flag is
  // parsed: Note [Accelerate config files] in app/config/train_config_accelerate.cpp.
  std::string config_file;
  struct AccelerateKey {
    std::string key;     // as in the YAML, nested keys dotted: "deepspeed_config.zero_stage"
    std::string value;   // as written there
    std::string effect;  // what it sets here, or why it changes nothing
  };
  std::vector<AccelerateKey> accelerate_keys;  // every key of the file, in file order, for describe()
  std::string accelerate_deepspeed_json;       // its deepspeed_config as a DeepSpeed JSON; empty if none

  // ---- filled by resolve() ----
  int64_t train_batch_size = 0;            // micro x accumulation x world
  int64_t num_update_steps_per_epoch = 0;  // optimizer steps per epoch per rank (0 if examples unknown)
  int64_t num_training_steps = 0;          // --max_train_steps or epochs x steps per epoch
  std::string optimizer_type = "AdamW";    // "AdamW" or DeepSpeed's "Adam" (decoupled decay either way)
  bool torch_adam = false;                 // DeepSpeed optimizer.params.torch_adam; same math here
  std::optional<DeepSpeedSchedule> deepspeed_schedule;  // replaces lr_scheduler_type when set
  LossScalerConfig fp16;                                // used when dtype is f16
  bool fp16_auto_cast = false;
  ZeroSettings zero;
  AioSettings aio;
  DeepSpeedKeyVerdicts deepspeed_keys;  // what each key of the DeepSpeed JSON does here
  bool resolved = false;

  // Parses command-line flags ("--flag value", "--flag=value", bare booleans). Throws zt::Error naming the
  // flag on an unknown flag, a missing value or a malformed number. argv[0] is skipped.
  static TrainConfig from_args(int argc, const char* const* argv);
  static TrainConfig from_args(const std::vector<std::string>& args);  // without a program name
  // Usage text generated from the flag table (every flag, its default and what it does).
  static std::string help_text();
  // Applies an Accelerate config (YAML text; `source` names it in messages) to flags already parsed: Note
  // [Accelerate config files]. from_args calls it for --config_file. Throws zt::Error naming the key.
  void apply_accelerate_config(std::string_view yaml_text, std::string_view source);

  // Fills data paths, reads --deepspeed_config (if any, at most kMaxDeepSpeedConfigBytes) and reconciles it
  // with the flags (Note [Flags versus the DeepSpeed JSON]), resolves "auto", computes step counts and
  // validates everything. `device` must already be settled for a CPU run: 16-bit precision is refused there.
  // Throws zt::Error.
  void resolve(const ResolveInputs& inputs);
  // As resolve(), with the DeepSpeed config given as text; `source` names it in messages.
  void resolve_with_json_text(std::string_view json_text, std::string_view source,
                              const ResolveInputs& inputs);

  // The resolved configuration, one key per line, grouped, each marked with its origin.
  std::string describe() const;
  Origin origin_of(std::string_view key) const;  // keys as printed by describe(); default_value if unknown

  // The HF schedule built from the flags (valid when deepspeed_schedule is empty).
  LrSchedule hf_schedule() const;

  // Whether the overlapped CPU update can run, the device aside (resolved): the optimizer offloaded to host
  // memory (all of it: not a partial offload), world size 1, no delayed update, nothing on disk.
  // --offload_overlap_update needs it; without either flag the overlap is on where it holds on a GPU.
  bool offload_overlap_update_applies() const;

  std::map<std::string, Origin, std::less<>> origins;            // key -> where its value came from
  std::map<std::string, std::string, std::less<>> origin_notes;  // key -> e.g. "optimizer.params.lr"

 private:
  void resolve_impl(const nlohmann::json* ds, std::string_view source, const ResolveInputs& inputs);
  void resolve_offload_ratio();
};

inline constexpr int kMaxWorldSize = 64;                             // --world_size's upper bound
inline constexpr size_t kMaxDeepSpeedConfigBytes = size_t{1} << 20;  // a real config is a few KiB
// Nesting of objects/arrays (JSON) or mappings/sequences (YAML) a config may have: real ones nest 3 or 4
// levels. Checked before anything recurses over the value (yaml-cpp's parser, nlohmann's dump in a message).
inline constexpr int kMaxConfigNesting = 64;

// A default that depends on the run (Note [Defaults that depend on the run]); values are in the flag's own
// syntax and go through its parser.
struct RunDefault {
  std::string_view flag;     // a flag of the table, without "--"
  std::string_view on_gpu;   // --device cuda
  std::string_view on_cpu;   // --device cpu
  bool embedded_model_only;  // with --model_name_or_path the flag's own (HF) default applies
};
std::span<const RunDefault> run_defaults();
// Sets each flag of run_defaults() that is still at its default to its value for config.device (cpu or
// cuda, already settled); rows for the embedded model apply only when `embedded_model`. The origin stays
// "default", with a note saying which run default it is.
void apply_run_defaults(TrainConfig& config, bool embedded_model);

std::string_view compute_dtype_name(ComputeDType dtype);
std::string_view device_choice_name(DeviceChoice device);

}  // namespace zt::optim
