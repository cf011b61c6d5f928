// Training checkpoints: one HDF5 file holding everything a run needs to resume bitwise-identically —
// parameters, fp32 master weights, Adam m and v, the step counters, the batcher position, the seed, the loss
// scaler and the resolved training configuration.
//
// File layout (format "zerotrain-checkpoint", format_version 1), every tensor stored by its HF name so a
// checkpoint can be read by h5py and converted without zerotrain:
//   params/<name>   the compute copy in its own dtype (f32, bf16 or f16; bf16/f16 as uint16 bits with a
//                   "dtype" attribute, see runtime/h5file.h)
//   master/<name>   fp32 master weights; absent when the master *is* the params arena (f32 CPU training),
//                   recorded by the root attribute master_is_params = 1, so the weights are stored once
//   adam_m/<name>   AdamW exp_avg (f32)
//   adam_v/<name>   AdamW exp_avg_sq (f32)
// Root attributes: format, format_version, config_json (DebertaConfig::to_json), training_config (the
// resolved training configuration text, verbatim) and its checksum training_config_fnv1a64, params_dtype,
// master_is_params, tensor_count, and the TrainingState fields under the names given below (seed as the int64
// with the same 64 bits).
//
// Writes go through AtomicH5Writer (temp file + fsync + rename): a crash or an exception mid-write leaves
// the previous file at that path untouched.
//
// Note [Checkpoint naming]
// A run writes <output_dir>/step_<N>.h5, N = optimizer steps completed, whatever triggered the save (every
// k steps or the end of an epoch). The latest checkpoint is the one with the largest N; it is found by
// listing the directory rather than through a "latest" pointer file, because a pointer is a second file
// that would have to be updated atomically together with the checkpoint and can go stale, while the
// directory listing is always consistent with what was actually committed (temp files "step_<N>.h5.tmp-*"
// do not match the pattern).
//
//   CheckpointArenas arenas{.params = params16, .master = master, .adam_m = m, .adam_v = v};
//   save_training_checkpoint(checkpoint_path(out_dir, state.optimizer_step), config, table, arenas, state,
//                            resolved_config_text);
//   ...
//   TrainingState state;
//   load_training_checkpoint(resolve_checkpoint_path(resume_arg), config, table, arenas, state);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/batcher.h"
#include "model/config.h"
#include "model/parameters.h"
#include "optim/loss_scaler.h"
#include "runtime/arena.h"
#include "runtime/h5file.h"

namespace zt::optim {

inline constexpr std::string_view kCheckpointFormat = "zerotrain-checkpoint";
inline constexpr int64_t kCheckpointFormatVersion = 1;

// The counters and settings that, with the tensors, fix the rest of a run. Attribute names in the file are
// given after each field.
struct TrainingState {
  // Optimizer steps completed, skipped (overflowing) ones included: HF run_glue_no_trainer's
  // completed_steps. "optimizer_step"
  int64_t optimizer_step = 0;
  // Micro-batches consumed (forward + backward passes); with gradient accumulation k it is k times the
  // optimizer steps plus the micro-batches of an unfinished accumulation. "micro_step"
  int64_t micro_step = 0;
  // AdamW's t (AdamW::step_count): behind optimizer_step by the skipped steps, since a skipped step does not
  // advance Adam's bias correction. "adam_step"
  int64_t adam_step = 0;
  // Learning-rate schedule steps taken (the s of LrSchedule::lr_at). "scheduler_step"
  int64_t scheduler_step = 0;
  // The next batch to read: batch `batch` of epoch `epoch`. "next_batch_epoch", "next_batch_index"
  data::BatcherPosition next_batch;
  // Run seed: shuffling and dropout masks are pure functions of it and the counters above. "seed"
  uint64_t seed = 0;
  // "loss_scale", "loss_scaler_iteration", "loss_scaler_last_overflow_iteration",
  // "loss_scaler_hysteresis_left", "loss_scaler_skipped_steps"
  LossScalerState loss_scaler;
  // The learning rate of the last applied step, for logs and the resume banner. "last_lr"
  double last_lr = 0;
  // The sum of the step losses and the optimizer steps of the epoch under way, so a run resumed mid-epoch
  // reports the epoch's train_loss (their mean) as an uninterrupted run does. "epoch_loss_sum",
  // "epoch_optimizer_steps" (optional: 0 when absent)
  double epoch_loss_sum = 0;
  int64_t epoch_optimizer_steps = 0;
};

// The arenas a checkpoint holds. Each must contain every tensor of the parameter table under its HF name
// with the table's shape: params in f32, bf16 or f16; master, adam_m and adam_v in f32. `master` may be the
// same arena as `params` (f32 training without a separate master copy). Host and pinned-host arenas are
// read and written in place; device arenas are staged through host memory in CUDA builds. ZeRO shards
// are not handled here: a sharded run gathers full tensors into such arenas first.
struct CheckpointArenas {
  const Arena& params;
  const Arena& master;
  const Arena& adam_m;
  const Arena& adam_v;
};

// Writes the checkpoint to `path` atomically (see the header comment). Throws zt::Error naming the file
// and, where one is at fault, the arena and tensor.
void save_training_checkpoint(const std::string& path, const DebertaConfig& config,
                              const ParameterTable& table, const CheckpointArenas& arenas,
                              const TrainingState& state, std::string_view resolved_config_text);

// What a checkpoint says about itself, read without touching its tensors: enough to build the model and
// the arenas before loading.
struct CheckpointInfo {
  int64_t format_version = 0;
  std::string config_json;
  std::string training_config;  // resolved training configuration text
  DType params_dtype = DType::f32;
  bool master_is_params = false;
  int64_t tensor_count = 0;  // tensors per group
  TrainingState state;
};
CheckpointInfo read_checkpoint_info(const std::string& path);

// Restores the arenas and `state` from `path`. Before anything is overwritten it checks that the file is a
// zerotrain checkpoint of a version this build reads, that its model config equals `config` (the message
// lists every differing field with both values; bookkeeping keys — _name_or_path, transformers_version,
// architectures, torch_dtype — are not compared), and that every tensor exists with the table's shape and
// the arena's dtype (the message names the tensor). A truncated or corrupt file is an error naming it, and
// so is a tensor whose data fails its checksum or holds NaN, infinity or (Adam's v) a negative value. If
// reading tensor data fails part way, the arenas hold a mix of old and new values and `state` is unchanged.
void load_training_checkpoint(const std::string& path, const DebertaConfig& config,
                              const ParameterTable& table, const CheckpointArenas& arenas,
                              TrainingState& state);

// The pieces the sharded (ZeRO) checkpoint shares with this format: the TrainingState attributes, and the
// model-config comparison whose message names every differing field.

void write_training_state(H5File& file, const TrainingState& state);
// The resolved configuration text (attribute training_config) with its FNV-1a 64 checksum (attribute
// training_config_fnv1a64): a damaged byte in the text would otherwise read as a changed setting on resume.
// Reading verifies the checksum where the file has one and throws naming the file when it fails.
void write_training_config(H5File& file, std::string_view text);
std::string read_training_config(const H5File& file);
TrainingState read_training_state(const H5File& file);
void check_same_model_config(const std::string& path, const std::string& stored_json,
                             const DebertaConfig& running);
// A directory holding rank_0_of_<W>.h5: a sharded checkpoint (app/run/sharded_checkpoint.h).
bool is_sharded_checkpoint(const std::string& path);

// <output_dir>/step_<optimizer_step>.h5 (see Note [Checkpoint naming]).
std::string checkpoint_path(const std::string& output_dir, int64_t optimizer_step);
// The step_<N>.h5 file or step_<N>.zero directory (sharded) in `output_dir` with the largest N, or nothing
// when there is none. Throws when the directory does not exist.
std::optional<std::string> find_latest_checkpoint(const std::string& output_dir);
// --resume_from_checkpoint: a file is used as given; a directory resolves to its latest checkpoint (an
// error when it has none); a missing path is an error.
std::string resolve_checkpoint_path(const std::string& file_or_dir);

}  // namespace zt::optim
