// What changed between the run that wrote a checkpoint and the run resuming from it.
//
// Note [Resuming with changed settings]
// A checkpoint stores the resolved configuration as TrainConfig::describe() prints it (attribute
// training_config); the resuming run's describe() is compared with it key by key. Changes that alter which
// examples form each optimizer step, or the examples themselves, make the rest of the run another run: they
// are refused (seed, max_length, pad_to_max_length, per_device_train_batch_size,
// gradient_accumulation_steps, world_size, train_file, task_name; a different model architecture is refused
// by load_training_checkpoint). One rule for the global batch: gradient_accumulation_steps and world_size
// may change only together, when world_size x accumulation, the micro-batches of a step, stays the same
// (resharding: world 2 with accumulation 3 resumes at world 3 with accumulation 2 on the same
// micro-batches). Every other change of a setting that shapes training (learning rate, schedule, warmup,
// steps, epochs, weight decay, clipping, Adam's constants, dtype, and any key not known here) is allowed
// but said: "continuing with changed learning_rate 0.0001 -> 0.0002, not bitwise the original run". Where
// things go and how they are logged (output_dir, checkpointing_steps, log_every, evaluation files and batch
// size, ZeRO stage and memory settings, collective checks, which give the same numbers) are not compared,
// and neither are values derived from compared ones (num_update_steps_per_epoch, num_training_steps).
//
//   const CheckpointInfo info = read_checkpoint_info(file);
//   for (const std::string& line : check_resume_config(file, info.training_config, config.describe()))
//     std::printf("%s\n", line.c_str());   // throws first when a refused setting changed
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace zt::optim {

struct ConfigChange {
  std::string key;
  std::string in_checkpoint;  // "(absent)" when only the current run has the key
  std::string now;            // "(absent)" when only the checkpoint has it
  bool refused = false;
  // "learning_rate 0.0001 -> 0.0002" plus why it is refused, or the "continuing with changed ..." line.
  std::string message() const;
};

// key -> value of a describe() text: "  learning_rate   0.0001   [flag]" gives {"learning_rate", "0.0001"};
// the header's "(world_size N" gives {"world_size", "N"}; group titles are skipped.
std::map<std::string, std::string, std::less<>> parse_described_config(std::string_view text);

// Every difference that matters (see the Note), in key order.
std::vector<ConfigChange> compare_resume_config(std::string_view checkpoint_text,
                                                std::string_view current_text);

// Throws zt::Error naming the checkpoint and every refused change; otherwise returns the lines to print for
// the allowed ones.
std::vector<std::string> check_resume_config(const std::string& checkpoint, std::string_view checkpoint_text,
                                             std::string_view current_text);

}  // namespace zt::optim
