// Offload sections of zero_optimization (offload_optimizer, offload_param). CPU offload is not implemented
// yet and the disk tier (device nvme, keys in train_config_aio.cpp) is not wired into the engine yet, so
// today only device "none" resolves; this file is where the CPU offload settings will be read when the
// offload lands.
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
  // The disk-tier keys (train_config_aio.cpp), whatever the device; device nvme is refused there until the
  // engine runs the disk tier.
  resolve_nvme_offload(context, *section, key, device.given() ? device.value : "none", settings.nvme);
  ZT_CHECK(!(device.given() && device.value == "cpu"), context.where(), device.path,
           " cpu: CPU offload is not implemented yet (remove the section or set device none)");
  if (const JsonValue<bool> v = section->boolean("pin_memory", false); v.given()) {
    settings.pin_memory = v.value;
    set_json_origin(c, v.path, v.path);
  }
  section->reject_unread({"device", "pin_memory", "nvme_path", "buffer_count", "pipeline_read",
                          "pipeline_write", "buffer_size", "max_in_cpu"});
}

void describe_offload(const TrainConfig& c, DescribeWriter& out, std::string_view key,
                      const OffloadSettings& settings) {
  const std::string prefix = str("zero_optimization.", key, ".");
  out.line(prefix + "device", settings.nvme.enabled ? "nvme" : settings.enabled ? "cpu" : "none");
  // pin_memory is only about offload buffers; shown when the JSON set it, so that it is not silently dropped.
  if (c.origin_of(prefix + "pin_memory") == Origin::json) {
    out.line(prefix + "pin_memory", show_bool(settings.pin_memory),
             settings.enabled ? std::string_view{} : "none; nothing is offloaded");
  }
  describe_nvme_offload(c, out, key, settings.nvme);
}

}  // namespace zt::optim::config_detail
