// Checkpoints of a ZeRO run, written by every rank in parallel and readable at any world size and stage.
//
// Stage 0 (every rank holds the full state): rank 0 writes the single-file format of app/run/checkpoint.h,
// <output_dir>/step_<N>.h5. Stages 1-3: a directory <output_dir>/step_<N>.zero/ with one file per rank,
//   rank_<r>_of_<W>.h5   root attributes: format "zerotrain-zero-checkpoint", format_version, world_size,
//                        rank, zero_stage, config_json, training_config, and the TrainingState attributes
//                        of app/run/checkpoint.h (equal in every rank file);
//                        datasets master/<name>, adam_m/<name>, adam_v/<name>: the rank's piece of each
//                        tensor it owns, 1-D, with attributes tensor_offset (first element, row-major) and
//                        tensor_numel (the whole tensor's element count).
// Every rank writes its file into step_<N>.zero.tmp-<pid>/; after a barrier rank 0 renames the directory,
// so a crash leaves either the previous checkpoint or the complete new one.
//
// Loading (load_engine_checkpoint) accepts both layouts: each rank reads, for every piece it owns under
// the *current* partition, the overlapping ranges of the stored pieces (a full tensor in the single-file
// format counts as one piece at offset 0). So a run can resume at another world size or stage. Errors name
// the file: a missing rank file, files of different runs or steps, another model's config, a tensor whose
// stored pieces do not cover what this rank needs.
#pragma once

#include <string>
#include <string_view>

#include "app/run/checkpoint.h"
#include "model/config.h"
#include "optim/zero/engine.h"

namespace zt::optim {

inline constexpr std::string_view kZeroCheckpointFormat = "zerotrain-zero-checkpoint";

// <output_dir>/step_<N>.zero
std::string sharded_checkpoint_path(const std::string& output_dir, int64_t optimizer_step);

// Collective over the engine's ranks: writes this rank's file, then (rank 0, after a barrier) commits the
// directory. `path` is the final directory.
void save_sharded_checkpoint(const std::string& path, ZeroEngine& engine, Communicator& comm,
                             const DebertaConfig& config, const TrainingState& state,
                             std::string_view resolved_config_text);

// Removes what a failed save_sharded_checkpoint of `path` left (its uncommitted step_<N>.zero.tmp/), so a
// full disk is not kept full; call once every rank has left the save.
void remove_unfinished_sharded_checkpoint(const std::string& path) noexcept;

// What a checkpoint of either layout says about its run, read without its tensors: the resolved training
// configuration (attribute training_config; of the rank_0 file for a step_<N>.zero directory) and the
// TrainingState. Throws naming the file when it is not a zerotrain checkpoint.
struct CheckpointSummary {
  std::string training_config;
  TrainingState state;
};
CheckpointSummary read_checkpoint_summary(const std::string& path);

// Fills the engine's master, m and v from `path` (a step_<N>.h5 file or a step_<N>.zero directory), then
// refreshes the compute copy (collective for stages 1/2). Returns the stored TrainingState.
TrainingState load_engine_checkpoint(const std::string& path, ZeroEngine& engine,
                                     const DebertaConfig& config);

// Writes the consolidated f32 parameters of a checkpoint (either layout) as a model file for
// --model_name_or_path and convert_hf export.
void consolidate_checkpoint(const std::string& checkpoint, const std::string& model_file);

}  // namespace zt::optim
