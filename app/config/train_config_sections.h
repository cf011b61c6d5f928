// Internal to the train_config*.cpp files (not included elsewhere): the DeepSpeed JSON reader and the
// resolve/describe step of each section of TrainConfig. resolve() runs the sections in the order declared
// below; a later section may read what an earlier one settled (the schedule needs the step counts).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/config/train_config.h"
#include "runtime/check.h"

namespace zt::optim::config_detail {

std::string show_double(double value);
std::string show_bool(bool value);
std::string show_checkpointing(const CheckpointingSteps& steps);
inline std::string show_value(double v) {
  return show_double(v);
}
inline std::string show_value(int64_t v) {
  return std::to_string(v);
}
inline std::string show_value(bool v) {
  return show_bool(v);
}

// " (did you mean 'x'?)" for the closest of `candidates` within a few edits of `name`, else "".
std::string suggestion(std::string_view name, const std::vector<std::string_view>& candidates);

// ---------------------------------------------------------------------------------------------------------
// DeepSpeed JSON reading: every key read is marked, and whatever is left unread is an error naming its path.

enum class JsonState { absent, automatic, given };

// What a key's value is read as (kDeepSpeedKeys declares it for every honoured key).
enum class JsonType { any, object, integer, number, boolean, string, pair };
// Whether "auto" is accepted for `path`; throws an internal error unless kDeepSpeedKeys
// (train_config_keys.cpp) declares the key honoured with `type`, so that no key is read without its
// declaration.
bool declared_auto_allowed(std::string_view path, JsonType type);

template <typename T>
struct JsonValue {
  JsonState state = JsonState::absent;
  T value{};
  std::string path;
  bool auto_allowed = false;  // whether "auto" was accepted for this key (reconcile's advice depends on it)
  bool given() const { return state == JsonState::given; }
  bool automatic() const { return state == JsonState::automatic; }
  bool present() const { return state != JsonState::absent; }
};

// One JSON object of the config, with its dotted path. Errors name the config (`source`) and the key.
class JsonSection {
 public:
  JsonSection(const nlohmann::json& object, std::string path, std::string_view source);

  std::string path_of(std::string_view key) const;
  // "DeepSpeed config '<source>': ", the start of every message about the JSON.
  std::string where() const;

  std::optional<JsonSection> section(std::string_view key);
  const nlohmann::json& raw() const { return *object_; }
  // Marks `key` read without converting it (a section that explains all of its keys).
  void mark_read(std::string_view key) { read_paths_->insert(path_of(key)); }
  // Typed reads of a key that kDeepSpeedKeys declares (its type, and whether "auto" is accepted).
  // An integer in [minimum, maximum]; whole floats ("2e8") are accepted, as DeepSpeed configs write sizes.
  JsonValue<int64_t> integer(std::string_view key, int64_t minimum = 0,
                             int64_t maximum = std::numeric_limits<int64_t>::max());
  JsonValue<double> number(std::string_view key);
  JsonValue<bool> boolean(std::string_view key);
  JsonValue<std::string> string(std::string_view key);
  JsonValue<std::array<double, 2>> pair(std::string_view key);

  // The dotted paths of every key read so far through this section or any section of the same document.
  const std::set<std::string, std::less<>>& read_paths() const { return *read_paths_; }

 private:
  const nlohmann::json* take(std::string_view key);
  template <typename T, typename Convert>
  JsonValue<T> read(std::string_view key, JsonType type, std::string_view expected, Convert convert);

  const nlohmann::json* object_;  // inside the parsed document, which outlives every section
  std::string path_;
  std::string_view source_;                                         // owned by the ResolveContext
  std::shared_ptr<std::set<std::string, std::less<>>> read_paths_;  // shared by the document's sections
};

// The text of a config file, read once to EOF (a FIFO works) but no further than one chunk past
// kMaxDeepSpeedConfigBytes (/dev/zero ends there), so the caller's size check sees a file too big.
// `flag` names the file in messages (--deepspeed_config, --config_file).
std::string read_config_file(const std::string& path, std::string_view flag = "--deepspeed_config");
// Parses a config, refusing duplicate keys and numbers out of a double's range, naming the key and `source`.
nlohmann::json parse_config_json(std::string_view text, std::string_view source);

// ---------------------------------------------------------------------------------------------------------
// Resolution, one function per section.

struct ResolveContext {
  TrainConfig& config;
  JsonSection* top;  // the JSON's top level; nullptr without --deepspeed_config
  std::string source;
  const ResolveInputs& inputs;
  // "DeepSpeed config '<source>': ".
  std::string where() const { return str("DeepSpeed config '", source, "': "); }
  // The named top-level section of the JSON, if there is a JSON and it has one.
  std::optional<JsonSection> section(std::string_view key) const {
    return top ? top->section(key) : std::nullopt;
  }
};

void set_json_origin(TrainConfig& config, const std::string& key, const std::string& path);

// Applies a JSON value to a flag-backed field following Note [Flags versus the DeepSpeed JSON].
template <typename T>
void reconcile(const ResolveContext& context, T& field, const std::string& key, const JsonValue<T>& j) {
  TrainConfig& config = context.config;
  const Origin origin = config.origin_of(key);
  if (j.automatic()) {
    if (origin != Origin::json) config.origin_notes[key] = str("fills ", j.path, "=auto");
    return;
  }
  if (!j.given()) return;
  if (origin != Origin::default_value) {
    if (field == j.value) return;  // agrees with the flag or the earlier JSON key, which stays the origin
    if (origin == Origin::flag) {
      ZT_FAIL("--", key, " ", show_value(field), " contradicts DeepSpeed config '", context.source, "' ",
              j.path, " = ", show_value(j.value),
              j.auto_allowed ? " (set the JSON value to \"auto\" or drop the flag)" : " (drop one of them)");
    }
    ZT_FAIL(context.where(), j.path, " = ", show_value(j.value), " contradicts ", config.origin_notes[key],
            " = ", show_value(field), " (", key, ")");
  }
  field = j.value;
  set_json_origin(config, key, j.path);
}

// a * b, or zt::Error saying that `what` overflows (flags and JSON both accept very large counts).
int64_t checked_product(int64_t a, int64_t b, std::string_view what);

void resolve_data_paths(ResolveContext& context);   // train_config_data.cpp
void resolve_world_size(ResolveContext& context);   // train_config.cpp
void resolve_batch_sizes(ResolveContext& context);  // train_config_data.cpp
void resolve_run_keys(ResolveContext& context);     // train_config.cpp: steps_per_print, ...
void resolve_optimizer(ResolveContext& context);    // train_config_optimizer.cpp (gradient_clipping too)
void resolve_steps(ResolveContext& context);        // train_config_data.cpp
void resolve_schedule(ResolveContext& context);     // train_config_schedule.cpp
void resolve_precision(ResolveContext& context);    // train_config_precision.cpp
void resolve_zero(ResolveContext& context);         // train_config_zero.cpp
// One offload_optimizer / offload_param section of zero_optimization (train_config_offload.cpp).
void resolve_offload(ResolveContext& context, JsonSection& zero_section, std::string_view key,
                     OffloadSettings& settings);
// The disk-tier keys of an offload section (train_config_aio.cpp); `device` is the section's device. Refuses
// offload_param device nvme. The keys it reads are marked read in `section`.
void resolve_nvme_offload(ResolveContext& context, JsonSection& section, std::string_view key,
                          std::string_view device, NvmeOffloadSettings& settings);
// The "aio" block and --host_memory_limit (train_config_aio.cpp); after resolve_zero.
void resolve_disk_tier(ResolveContext& context);

// Gives every key of `document` its verdict in config.deepspeed_keys, or throws for the first refused or
// unknown one (Note [DeepSpeed keys], train_config_keys.cpp); `read` holds the paths the sections read.
void check_deepspeed_keys(TrainConfig& config, const nlohmann::json& document,
                          const std::set<std::string, std::less<>>& read, std::string_view source);
void describe_deepspeed_keys(const TrainConfig& config, std::ostream& out);

// ---------------------------------------------------------------------------------------------------------
// describe(), one function per group.

class DescribeWriter {
 public:
  DescribeWriter(const TrainConfig& config, std::ostream& out) : config_(config), out_(out) {}
  void group(std::string_view name);
  // "  key  value  [origin, note]", and "  effective: <effective>" after it when our behaviour differs.
  void line(const std::string& key, const std::string& value, std::string_view effective = {});
  void notice(std::string_view text);  // "  note: <text>"

 private:
  const TrainConfig& config_;
  std::ostream& out_;
};

void describe_data(const TrainConfig& config, DescribeWriter& out);
void describe_accelerate(const TrainConfig& config, DescribeWriter& out);  // train_config_accelerate.cpp
// After resolving the JSON built from an Accelerate config's deepspeed_config: its values are the YAML's.
void mark_accelerate_origins(TrainConfig& config);
// `e` (from resolving that JSON) prefixed with the config file and the YAML key behind the JSON path it
// names.
Error with_accelerate_key(const TrainConfig& config, const Error& e);
void describe_optimizer(const TrainConfig& config, DescribeWriter& out);
void describe_schedule(const TrainConfig& config, DescribeWriter& out);
void describe_precision(const TrainConfig& config, DescribeWriter& out);
void describe_zero(const TrainConfig& config, DescribeWriter& out);
void describe_offload(const TrainConfig& config, DescribeWriter& out, std::string_view key,
                      const OffloadSettings& settings);
void describe_nvme_offload(const TrainConfig& config, DescribeWriter& out, std::string_view key,
                           const NvmeOffloadSettings& settings);
void describe_aio(const TrainConfig& config, DescribeWriter& out);  // the "aio" block (train_config_aio.cpp)

}  // namespace zt::optim::config_detail
