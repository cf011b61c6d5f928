// Offload sections of zero_optimization (offload_optimizer, offload_param), DeepSpeed's keys:
//   device       none | cpu (honoured: optim/zero/engine.h, "CPU offload") | nvme (the CPU offload with the
//                optimizer state / the stage-3 parameter shard on disk, app/config/train_config_aio.cpp) |
//                auto (the planner chooses: --auto_plan, app/plan; none until it runs)
//   pin_memory   honoured: the offloaded buffers are page-locked on a GPU run (checked against the
//                locked-memory limit before allocation), pageable when false
//   nvme_path, buffer_count, pipeline_*, buffer_size, max_in_cpu: the disk tier's keys
//                (app/config/train_config_aio.cpp, Note [Disk tier keys])
//   fast_init    false accepted; true refused (not implemented)
//   ratio        (offload_optimizer; DeepSpeed's partial "Twin-Flow" offload) honoured at stages 1-3 with
//                device cpu: that fraction of each rank's shard keeps its optimizer state on the host, the
//                rest on the device (ZeroOffload::ratio, exact); --offload_ratio sets it too. In (0, 1];
//                below 1 not with device nvme, offload_param, --offload_delayed_update or
//                --offload_overlap_update (TrainConfig::resolve says why)
// Stage rules: offload_optimizer needs stage 1-3, offload_param needs stage 3 and offload_optimizer.
#include "app/config/train_config_sections.h"

namespace zt::optim::config_detail {

void resolve_offload(ResolveContext& context, JsonSection& zero_section, std::string_view key,
                     OffloadSettings& settings) {
  TrainConfig& c = context.config;
  std::optional<JsonSection> section = zero_section.section(key);
  if (!section) return;
  const JsonValue<std::string> device = section->string("device");
  if (device.automatic()) {  // the planner chooses (--auto_plan, app/plan); none until it runs
    c.auto_plan = true;
    c.origins[device.path] = Origin::json_auto;
    c.origin_notes[device.path] = "--auto_plan";
  }
  const bool wants_offload = device.given() && device.value != "none";
  if (device.given()) {
    ZT_CHECK(device.value == "cpu" || device.value == "nvme" || device.value == "none", context.where(),
             device.path, " must be none, cpu or nvme (or auto: the planner chooses), got '", device.value,
             "'");
    set_json_origin(c, device.path, device.path);
  }
  // Stage rules first: they hold whatever the device, so a config that is wrong twice is told the lasting
  // problem. DeepSpeed partitions parameters only at stage 3, and offloads optimizer state from stage 1.
  const int stage = c.zero.stage;
  if (key == "offload_param" && stage != 3) {
    // DeepSpeed partitions (and so offloads) parameters at stage 3 only and ignores the section below it;
    // DeepSpeed-Chat's generator writes it at stage 2. Every key of it is explained, none applied.
    const std::string why =
        str("offload_param applies at stage 3 only; at stage ", stage,
            " DeepSpeed ignores it and so does zerotrain (parameters stay on the device)");
    for (const auto& [name, value] : section->raw().items()) {
      section->mark_read(name);
      c.deepspeed_keys.explained[section->path_of(name)] = why;
    }
    return;
  }
  ZT_CHECK(!(wants_offload && key == "offload_optimizer" && stage == 0), context.where(),
           zero_section.path_of(key), " needs stage 1, 2 or 3, but zero_optimization.stage is 0");
  // The disk-tier keys (train_config_aio.cpp), whatever the device; it refuses device nvme where the disk
  // tier does not run.
  resolve_nvme_offload(context, *section, key, device.given() ? device.value : "none", settings.nvme);
  // Offloaded off the device: to host memory (cpu) or, through host buffers, to disk (nvme).
  settings.enabled = device.given() && (device.value == "cpu" || device.value == "nvme");
  if (const JsonValue<bool> v = section->boolean("pin_memory"); v.given()) {
    settings.pin_memory = v.value;
    set_json_origin(c, v.path, v.path);
    if (c.device == DeviceChoice::cpu) {
      c.deepspeed_keys.explained[v.path] =
          str(show_bool(v.value), ": the CPU backend has no device to copy to, so nothing is page-locked");
    }
  }
  if (const JsonValue<bool> v = section->boolean("fast_init"); v.given()) {
    ZT_CHECK(!v.value, context.where(), v.path,
             " true: DeepSpeed's fast initialization of the disk tier is not implemented (remove the key)");
  }
  if (key == "offload_optimizer") {
    if (const JsonValue<double> v = section->number("ratio"); v.given()) {
      ZT_CHECK(v.value > 0.0 && v.value <= 1.0, context.where(), v.path, " ", v.value,
               ": the fraction of the optimizer state kept on the host must be in (0, 1]");
      settings.ratio = v.value;
      set_json_origin(c, v.path, v.path);
    }
  }
  if (key == "offload_param" && settings.enabled) {
    ZT_CHECK(c.zero.offload_optimizer.enabled, context.where(), device.path, " ", device.value,
             " needs zero_optimization.offload_optimizer.device cpu or nvme too (the CPU update writes the "
             "offloaded parameter shard)");
  }
}

void describe_offload(const TrainConfig& c, DescribeWriter& out, std::string_view key,
                      const OffloadSettings& settings) {
  const std::string prefix = str("zero_optimization.", key, ".");
  out.line(prefix + "device", settings.nvme.enabled ? "nvme" : settings.enabled ? "cpu" : "none");
  // pin_memory is only about offload buffers; shown when the JSON set it, so that it is not silently dropped.
  if (c.origin_of(prefix + "pin_memory") == Origin::json || settings.enabled) {
    out.line(prefix + "pin_memory", show_bool(settings.pin_memory),
             settings.enabled ? std::string_view{} : "none; nothing is offloaded");
  }
  if (key == "offload_optimizer" && (settings.ratio < 1.0 || c.origin_of(prefix + "ratio") == Origin::json)) {
    out.line(prefix + "ratio", str(settings.ratio),
             settings.ratio < 1.0 ? "partial: that fraction of each rank's optimizer state on the host, the "
                                    "rest on the device"
                                  : "");
  }
  describe_nvme_offload(c, out, key, settings.nvme);
}

}  // namespace zt::optim::config_detail
