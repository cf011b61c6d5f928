// Offload sections of zero_optimization (offload_optimizer, offload_param), DeepSpeed's keys:
//   device       none | cpu (honoured: optim/zero/engine.h, "CPU offload") | nvme (refused: the disk tier
//                is not supported yet)
//   pin_memory   honoured: the offloaded buffers are page-locked on a GPU run (checked against the
//                locked-memory limit before allocation), pageable when false
//   buffer_count, fast_init: NVMe swap settings; refused (they would change nothing: the whole shard
//                stays resident in host memory) except at DeepSpeed's defaults (buffer_count 4 for the
//                optimizer, 5 for parameters; fast_init false), which say nothing
//   buffer_size, max_in_cpu, pipeline_*, nvme_path: NVMe-only, refused by reject_unread as DeepSpeed
//                settings zerotrain lacks
//   ratio        (offload_optimizer; DeepSpeed's partial "Twin-Flow" offload at stage 3) 1 honoured; < 1
//                refused: the whole shard is offloaded or none of it
// Stage rules: offload_optimizer needs stage 1-3, offload_param needs stage 3 and offload_optimizer.
#include "optim/train_config_sections.h"

namespace zt::optim::config_detail {

void resolve_offload(ResolveContext& context, JsonSection& zero_section, std::string_view key,
                     OffloadSettings& settings) {
  TrainConfig& c = context.config;
  std::optional<JsonSection> section = zero_section.section(key);
  if (!section) return;
  const JsonValue<std::string> device = section->string("device");
  const bool wants_offload = device.given() && device.value != "none";
  if (device.given()) {
    ZT_CHECK(device.value == "cpu" || device.value == "nvme" || device.value == "none", context.where(),
             device.path, " must be none, cpu or nvme, got '", device.value, "'");
    set_json_origin(c, device.path, device.path);
  }
  // Stage rules first: they hold whatever the device, so a config that is wrong twice is told the lasting
  // problem. DeepSpeed partitions parameters only at stage 3, and offloads optimizer state from stage 1.
  const int stage = c.zero.stage;
  ZT_CHECK(!(wants_offload && key == "offload_param" && stage != 3), context.where(),
           zero_section.path_of(key),
           " needs stage 3 (parameters are only partitioned there), but zero_optimization.stage is ", stage);
  ZT_CHECK(!(wants_offload && key == "offload_optimizer" && stage == 0), context.where(),
           zero_section.path_of(key), " needs stage 1, 2 or 3, but zero_optimization.stage is 0");
  ZT_CHECK(!(device.given() && device.value == "nvme"), context.where(), device.path,
           " nvme: disk offload is not supported yet (use device cpu, or none)");
  settings.enabled = device.given() && device.value == "cpu";
  if (const JsonValue<bool> v = section->boolean("pin_memory", false); v.given()) {
    settings.pin_memory = v.value;
    set_json_origin(c, v.path, v.path);
  }
  // NVMe swap settings: only their DeepSpeed defaults, which mean nothing without a disk tier.
  const int64_t default_buffers = key == "offload_param" ? 5 : 4;
  if (const JsonValue<int64_t> v = section->integer("buffer_count", false, 1); v.given()) {
    ZT_CHECK(v.value == default_buffers, context.where(), v.path, " ", v.value,
             ": swap buffers belong to device nvme, which is not supported yet; with device cpu the whole "
             "shard stays in host memory (remove the key)");
  }
  if (const JsonValue<bool> v = section->boolean("fast_init", false); v.given()) {
    ZT_CHECK(
        !v.value, context.where(), v.path,
        " true: fast initialization applies to device nvme, which is not supported yet (remove the key)");
  }
  if (key == "offload_optimizer") {
    if (const JsonValue<double> v = section->number("ratio", false); v.given()) {
      ZT_CHECK(v.value == 1.0, context.where(), v.path, " ", v.value,
               ": partial optimizer offload is not supported (the whole shard is offloaded); set 1 or remove "
               "it");
    }
  }
  section->reject_unread({"device", "pin_memory", "buffer_count", "fast_init", "ratio"});
  if (key == "offload_param" && settings.enabled) {
    ZT_CHECK(c.zero.offload_optimizer.enabled, context.where(), device.path,
             " cpu needs zero_optimization.offload_optimizer.device cpu too (the CPU update writes the "
             "offloaded parameter shard)");
  }
}

void describe_offload(const TrainConfig& c, DescribeWriter& out, std::string_view key,
                      const OffloadSettings& settings) {
  const std::string prefix = str("zero_optimization.", key, ".");
  out.line(prefix + "device", settings.enabled ? "cpu" : "none");
  // pin_memory is only about offload buffers; shown when the JSON set it, so that it is not silently dropped.
  if (c.origin_of(prefix + "pin_memory") == Origin::json || settings.enabled) {
    out.line(prefix + "pin_memory", show_bool(settings.pin_memory),
             settings.enabled ? std::string_view{} : "none; nothing is offloaded");
  }
}

}  // namespace zt::optim::config_detail
