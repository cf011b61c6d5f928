#include "app/run/resume_config.h"

#include <exception>
#include <set>

#include "runtime/check.h"

namespace zt::optim {
namespace {

// Refused when changed: each key with what the change would alter.
const std::map<std::string_view, std::string_view>& refused_keys() {
  static const std::map<std::string_view, std::string_view> keys = {
      {"seed", "the data order and the dropout masks"},
      {"max_length", "the tokenized examples"},
      {"pad_to_max_length", "the padded batches"},
      {"per_device_train_batch_size", "which examples form each step"},
      {"gradient_accumulation_steps", "which examples form each step"},
      {"world_size",
       "which examples form each step (world_size x gradient_accumulation_steps micro-batches)"},
      {"train_file", "the training data"},
      {"task_name", "the task"},
  };
  return keys;
}

// Not compared: where output goes, logging, evaluation, memory, ZeRO layout and gradient checkpointing (same
// numbers), and values derived from compared keys.
bool is_ignored_key(std::string_view key) {
  static const std::set<std::string_view> keys = {"output_dir",
                                                  "resume_from_checkpoint",
                                                  "checkpointing_steps",
                                                  "log_every",
                                                  "steps_per_print",
                                                  "wall_clock_breakdown",
                                                  "with_tracking",
                                                  "report_to",
                                                  "data_dir",
                                                  "validation_file",
                                                  "test_file",
                                                  "per_device_eval_batch_size",
                                                  "model_name_or_path",
                                                  "ignore_mismatched_sizes",
                                                  "gpu_memory_limit",
                                                  "device",
                                                  "collective_timeout",
                                                  "debug_collectives",
                                                  "overwrite_output_dir",
                                                  "estimate_memory",
                                                  "gradient_checkpointing",
                                                  "num_update_steps_per_epoch",
                                                  "num_training_steps"};
  return keys.contains(key) || key.starts_with("zero_optimization.") || key.starts_with("accelerate.");
}

// world_size x gradient_accumulation_steps: the micro-batches of one optimizer step (0 when unreadable).
int64_t micro_batches_per_step(const std::map<std::string, std::string, std::less<>>& values) {
  const auto world = values.find("world_size"), accumulation = values.find("gradient_accumulation_steps");
  if (world == values.end() || accumulation == values.end()) return 0;
  try {
    return std::stoll(world->second) * std::stoll(accumulation->second);
  } catch (const std::exception&) {
    return 0;
  }
}

std::string_view trimmed(std::string_view s) {
  const size_t first = s.find_first_not_of(' ');
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(' ') - first + 1);
}

}  // namespace

std::string ConfigChange::message() const {
  if (refused) {
    return str(key, " ", in_checkpoint, " -> ", now, ": that changes ", refused_keys().at(key),
               ", so the run would not continue the checkpoint's run; resume with ", key, " ", in_checkpoint);
  }
  return str("continuing with changed ", key, " ", in_checkpoint, " -> ", now,
             ", not bitwise the original run");
}

std::map<std::string, std::string, std::less<>> parse_described_config(std::string_view text) {
  std::map<std::string, std::string, std::less<>> values;
  constexpr std::string_view kWorldSize = "(world_size ";
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (const size_t at = line.find(kWorldSize); at != std::string_view::npos && !line.starts_with("  ")) {
      const std::string_view rest = line.substr(at + kWorldSize.size());
      values["world_size"] = std::string(rest.substr(0, rest.find_first_of(",)")));
      continue;
    }
    // "  <key> <value padded> [<origin>]"; values may contain spaces ("0 (no clipping)").
    const size_t origin = line.rfind(" [");
    if (!line.starts_with("  ") || origin == std::string_view::npos) continue;
    line = line.substr(2, origin - 2);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    values[std::string(line.substr(0, space))] = std::string(trimmed(line.substr(space)));
  }
  return values;
}

std::vector<ConfigChange> compare_resume_config(std::string_view checkpoint_text,
                                                std::string_view current_text) {
  const auto stored = parse_described_config(checkpoint_text);
  const auto current = parse_described_config(current_text);
  std::set<std::string, std::less<>> keys;
  for (const auto& [key, value] : stored) keys.insert(key);
  for (const auto& [key, value] : current) keys.insert(key);
  std::vector<ConfigChange> changes;
  for (const std::string& key : keys) {
    if (is_ignored_key(key)) continue;
    const auto s = stored.find(key), c = current.find(key);
    ConfigChange change{.key = key,
                        .in_checkpoint = s != stored.end() ? s->second : "(absent)",
                        .now = c != current.end() ? c->second : "(absent)"};
    if (change.in_checkpoint == change.now) continue;
    change.refused = refused_keys().contains(key);
    // Resharding: world 2 with accumulation 3 resumes at world 3 with accumulation 2, the same six
    // micro-batches per step in the same order (the trainer's train_step).
    if ((key == "gradient_accumulation_steps" || key == "world_size") &&
        micro_batches_per_step(stored) != 0 &&
        micro_batches_per_step(stored) == micro_batches_per_step(current))
      change.refused = false;
    changes.push_back(std::move(change));
  }
  return changes;
}

std::vector<std::string> check_resume_config(const std::string& checkpoint, std::string_view checkpoint_text,
                                             std::string_view current_text) {
  std::string refused;
  std::vector<std::string> allowed;
  for (const ConfigChange& change : compare_resume_config(checkpoint_text, current_text)) {
    if (change.refused) {
      refused += "\n  " + change.message();
    } else {
      allowed.push_back(change.message());
    }
  }
  ZT_CHECK(refused.empty(), "cannot resume from ", checkpoint, ":", refused);
  return allowed;
}

}  // namespace zt::optim
