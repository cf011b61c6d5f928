// ZeRO section: DeepSpeed's zero_optimization, every key honoured or refused with a reason.
//
// Note [ZeRO keys]
// zerotrain's ZeRO (stages 0-3) communicates in units of whole layers: each encoder layer's tensors are one
// unit, reduce-scattered together once its gradients are final and, at stage 3, all-gathered together before
// use; the embeddings and the remaining tensors are two more units. Against that, each key is
//   honoured   stage (0-3), reduce_scatter (false: all-reduce, then keep the shard)
//   honoured   overlap_comm (DeepSpeed's default: true at stage 3 only) on the GPU at world size > 1: the
//              gradient reductions run on a communication stream, overlapping backward (ZeroEngineOptions::
//              overlap_comm, optim/zero/engine.h); on the CPU backend and at world size 1 it changes
//              nothing, which the effective note says
//   accepted   with an "effective:" note in describe(), because the layer unit decides what they would tune:
//              reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size (one layer per bucket),
//              stage3_param_persistence_threshold, stage3_max_reuse_distance (each layer, small tensors
//              included, is gathered by one collective), stage3_gather_16bit_weights_on_model_save (the
//              trainer always writes a consolidated fp32 model.h5); stage3_max_live_parameters is checked by
//              the trainer against two layers plus the embeddings. The stage-3-only keys given at a lower
//              stage get a notice, not an error: DeepSpeed tolerates them too.
//   honoured   sub_group_size (at least 1) where the optimizer state is offloaded (offload_optimizer cpu or
//              nvme, stages 1-3; DeepSpeed reads it at stage 3 only): the offloaded state is kept and
//              updated in sub-groups of at most that many elements (ZeroOffload::sub_group_size), and the
//              disk tier's records are one sub-group each, so its host buffers are buffer_count x sub-group x
//              12 bytes. Without offload it changes nothing (the optimizer updates a shard in one fused
//              pass), said in describe().
//   refused    values we do not implement: contiguous_gradients false (gradients are always written into flat
//              per-layer buckets), allgather_partitions false (partitions are always all-gathered). The other
//              keys DeepSpeed has (round_robin_gradients, the legacy cpu_offload*, ZeRO++ and MiCS switches)
//              are in the key table, train_config_keys.cpp. The offload sections: train_config_offload.cpp,
//              the aio block and nvme: train_config_aio.cpp.
#include "app/config/train_config_sections.h"
#include "runtime/memory_size.h"

namespace zt::optim::config_detail {

namespace {

constexpr std::string_view kLayerBuckets = "one layer per bucket (zerotrain reduces/gathers whole layers)";
constexpr std::string_view kLayerGathers =
    "none; each layer, small tensors included, is gathered by one collective";

// Keys DeepSpeed reads only at stage 3 (the "stage3_" ones; sub_group_size is described on its own, since it
// is honoured with offload at any stage), as describe() prints them.
struct Stage3Key {
  std::string_view name;
  int64_t ZeroSettings::*size;  // nullptr for the boolean
  std::string_view effective;
};
constexpr std::array<Stage3Key, 5> kStage3Keys = {{
    {"stage3_prefetch_bucket_size", &ZeroSettings::stage3_prefetch_bucket_size, kLayerBuckets},
    {"stage3_param_persistence_threshold", &ZeroSettings::stage3_param_persistence_threshold, kLayerGathers},
    {"stage3_max_reuse_distance", &ZeroSettings::stage3_max_reuse_distance, kLayerGathers},
    {"stage3_max_live_parameters", &ZeroSettings::stage3_max_live_parameters,
     "checked by the trainer against two layers + the embeddings"},
    {"stage3_gather_16bit_weights_on_model_save", nullptr,
     "the trainer always writes a consolidated fp32 model.h5"},
}};

const std::string kZero = "zero_optimization.";

bool from_json(const TrainConfig& c, std::string_view key) {
  const Origin origin = c.origin_of(kZero + std::string(key));
  return origin == Origin::json || origin == Origin::json_auto;
}

// DeepSpeed's old offload switches, which it still maps: cpu_offload -> offload_optimizer.device cpu,
// cpu_offload_params -> offload_param.device cpu, cpu_offload_use_pin_memory -> both sections' pin_memory.
// Given beside the section they stand for, they must agree with it.
void resolve_legacy_offload(ResolveContext& context, JsonSection& z) {
  TrainConfig& c = context.config;
  struct Legacy {
    std::string_view key;
    std::string_view section;
    OffloadSettings& settings;
  };
  for (const Legacy& legacy : {Legacy{"cpu_offload", "offload_optimizer", c.zero.offload_optimizer},
                               Legacy{"cpu_offload_params", "offload_param", c.zero.offload_param}}) {
    const JsonValue<bool> v = z.boolean(legacy.key);
    if (!v.given()) continue;
    const std::string device = kZero + std::string(legacy.section) + ".device";
    const bool section_given = c.origin_of(device) == Origin::json;
    ZT_CHECK(!section_given || legacy.settings.enabled == v.value, context.where(), v.path, " ",
             show_bool(v.value), " contradicts ", device, " (",
             legacy.settings.enabled ? "offloaded" : "none",
             "); keep the section, the legacy key's newer form");
    c.deepspeed_keys.notes[v.path] = str(show_bool(v.value), ": DeepSpeed's legacy name for ", kZero,
                                         legacy.section, ".device ", v.value ? "cpu" : "none");
    if (section_given || !v.value) continue;
    if (legacy.key == "cpu_offload") {
      ZT_CHECK(c.zero.stage >= 1, context.where(), v.path, " true needs stage 1, 2 or 3, but ", kZero,
               "stage is 0");
      legacy.settings.enabled = true;
    } else if (c.zero.stage == 3) {
      ZT_CHECK(c.zero.offload_optimizer.enabled, context.where(), v.path,
               " true needs the optimizer offloaded too (cpu_offload true or offload_optimizer.device cpu)");
      legacy.settings.enabled = true;
    } else {
      c.deepspeed_keys.explained[v.path] = str("true: parameters are offloaded at stage 3 only; at stage ",
                                               c.zero.stage, " DeepSpeed ignores it and so does zerotrain");
      continue;
    }
    c.origins[device] = Origin::json;
    c.origin_notes[device] = v.path;
  }
  if (const JsonValue<bool> pin = z.boolean("cpu_offload_use_pin_memory"); pin.given()) {
    for (OffloadSettings* settings : {&c.zero.offload_optimizer, &c.zero.offload_param}) {
      settings->pin_memory = pin.value;
    }
    c.deepspeed_keys.notes[pin.path] =
        str(show_bool(pin.value), ": DeepSpeed's legacy name for the offload sections' pin_memory");
  }
}

}  // namespace

void resolve_zero(ResolveContext& context) {
  TrainConfig& c = context.config;
  ZeroSettings& zero = c.zero;
  zero = ZeroSettings{};
  std::optional<JsonSection> z = context.section("zero_optimization");
  if (!z) return;
  const int64_t hidden = context.inputs.hidden_size;
  // A count or size, with the value HF's DeepSpeed integration gives "auto" (from the hidden size), if any.
  auto integer = [&](const char* key, int64_t& field, std::optional<int64_t> auto_value, int64_t minimum) {
    const JsonValue<int64_t> v = z->integer(key, minimum);
    if (v.given()) {
      field = v.value;
      set_json_origin(c, v.path, v.path);
    } else if (v.automatic()) {
      ZT_CHECK(auto_value.has_value(), "internal: ", v.path,
               " is declared \"auto\"-able without a value for it");
      ZT_CHECK(hidden > 0, context.where(), v.path,
               " is \"auto\", which needs the model's hidden size (not given to resolve)");
      field = *auto_value;
      c.origins[v.path] = Origin::json_auto;
    }
    return v;
  };
  // "auto" (where kDeepSpeedKeys allows it) -> `auto_value`.
  auto boolean = [&](const char* key, bool& field, bool auto_value = false) {
    const JsonValue<bool> v = z->boolean(key);
    if (v.given()) {
      field = v.value;
      set_json_origin(c, v.path, v.path);
    } else if (v.automatic()) {
      field = auto_value;
      c.origins[v.path] = Origin::json_auto;
    }
    return v;
  };

  int64_t stage = 0;
  // "auto": the planner chooses the stage (--auto_plan, app/plan); 0 until it runs.
  if (const JsonValue<int64_t> v = z->integer("stage", std::numeric_limits<int64_t>::min()); v.given()) {
    stage = v.value;
    set_json_origin(c, v.path, v.path);
  } else if (v.automatic()) {
    c.auto_plan = true;
    c.origins[v.path] = Origin::json_auto;
    c.origin_notes[v.path] = "--auto_plan";
  }
  ZT_CHECK(stage >= 0 && stage <= 3, context.where(), "zero_optimization.stage must be 0, 1, 2 or 3, got ",
           stage);
  zero.stage = static_cast<int>(stage);

  zero.overlap_comm = zero.stage == 3;  // DeepSpeed's default depends on the stage
  if (!boolean("overlap_comm", zero.overlap_comm).given())
    c.origin_notes[kZero + "overlap_comm"] = "true at stage 3 only, as DeepSpeed";
  boolean("reduce_scatter", zero.reduce_scatter);
  const JsonValue<bool> contiguous = boolean("contiguous_gradients", zero.contiguous_gradients);
  ZT_CHECK(
      !contiguous.given() || contiguous.value, context.where(), contiguous.path,
      " false is not supported: zerotrain always writes gradients into flat per-layer buckets (set it to "
      "true or remove it)");
  const JsonValue<bool> allgather = boolean("allgather_partitions", zero.allgather_partitions);
  ZT_CHECK(!allgather.given() || allgather.value, context.where(), allgather.path,
           " false is not supported: zerotrain always all-gathers the updated partitions (DeepSpeed's false "
           "broadcasts them one by one); set it to true or remove it");

  // HF/Accelerate's hidden-size rules for "auto".
  // 0 is what transformers' own ZeRO-3 test config writes; the bucket is one layer whatever the size.
  integer("reduce_bucket_size", zero.reduce_bucket_size, hidden * hidden, 0);
  integer("allgather_bucket_size", zero.allgather_bucket_size, std::nullopt, 1);
  integer("stage3_prefetch_bucket_size", zero.stage3_prefetch_bucket_size,
          static_cast<int64_t>(0.9 * static_cast<double>(hidden * hidden)), 0);
  integer("stage3_param_persistence_threshold", zero.stage3_param_persistence_threshold, 10 * hidden, 0);
  integer("stage3_max_live_parameters", zero.stage3_max_live_parameters, std::nullopt, 0);
  integer("stage3_max_reuse_distance", zero.stage3_max_reuse_distance, std::nullopt, 0);
  integer("sub_group_size", zero.sub_group_size, std::nullopt, 1);
  // "auto" -> false, as Accelerate fills it; the old fp16 name is DeepSpeed's alias.
  const JsonValue<bool> gather = boolean("stage3_gather_16bit_weights_on_model_save",
                                         zero.stage3_gather_16bit_weights_on_model_save, false);
  const JsonValue<bool> gather_old = boolean("stage3_gather_fp16_weights_on_model_save",
                                             zero.stage3_gather_16bit_weights_on_model_save, false);
  ZT_CHECK(!(gather.present() && gather_old.present()), context.where(),
           "has both stage3_gather_16bit_weights_on_model_save and its old name "
           "stage3_gather_fp16_weights_on_model_save");
  if (gather_old.present()) {
    const std::string key = kZero + "stage3_gather_16bit_weights_on_model_save";
    c.origins[key] = c.origin_of(gather_old.path);
    c.origin_notes[key] = gather_old.path;
  }

  resolve_offload(context, *z, "offload_optimizer", zero.offload_optimizer);
  resolve_offload(context, *z, "offload_param", zero.offload_param);
  resolve_legacy_offload(context, *z);
}

void describe_zero(const TrainConfig& c, DescribeWriter& out) {
  const ZeroSettings& zero = c.zero;
  auto i = [](int64_t v) { return std::to_string(v); };
  out.group("ZeRO");
  out.line(kZero + "stage", i(zero.stage));
  std::string overlap;
  if (zero.overlap_comm) {
    if (c.device == DeviceChoice::cpu) {
      overlap = "none on the CPU backend: collectives run in order";
    } else if (c.world_size == 1) {
      overlap = "none at world size 1: there is nothing to reduce";
    } else {
      overlap = "reductions on a communication stream, overlapping backward (GPU, world > 1)";
    }
  }
  out.line(kZero + "overlap_comm", show_bool(zero.overlap_comm), overlap);
  out.line(kZero + "reduce_scatter", show_bool(zero.reduce_scatter));
  out.line(kZero + "contiguous_gradients", show_bool(zero.contiguous_gradients));
  out.line(kZero + "allgather_partitions", show_bool(zero.allgather_partitions));
  out.line(kZero + "reduce_bucket_size", i(zero.reduce_bucket_size), kLayerBuckets);
  out.line(kZero + "allgather_bucket_size", i(zero.allgather_bucket_size), kLayerBuckets);
  describe_offload(c, out, "offload_optimizer", zero.offload_optimizer);
  describe_offload(c, out, "offload_param", zero.offload_param);
  out.line("offload_delayed_update", show_bool(c.offload_delayed_update),
           c.offload_delayed_update
               ? "one step stale: forward/backward use the parameters before the last update"
               : "");
  out.line("overlap_optimizer", show_bool(c.overlap_optimizer),
           c.overlap_optimizer ? "the AdamW on its own stream, the next forward beside it (GPU)" : "");
  // Unasked, the overlap is on where its conditions hold on a GPU
  // (ZeroOffload::overlap_update_where_it_applies).
  const bool overlap_applies = c.offload_overlap_update_applies() && c.device != DeviceChoice::cpu;
  if (c.offload_overlap_update || c.no_offload_overlap_update || !overlap_applies) {
    out.line("offload_overlap_update", show_bool(c.offload_overlap_update),
             c.offload_overlap_update      ? "exact: the next forward waits for each layer's CPU update"
             : c.no_offload_overlap_update ? "off (--no_offload_overlap_update)"
                                           : "");
  } else {
    out.line("offload_overlap_update", "auto",
             "on when the run has a GPU: exact, the next forward waits for each layer's CPU update");
  }
  // sub_group_size: where it acts (offloaded optimizer state), at stage 3, or where the JSON gave it.
  if (zero.offload_optimizer.enabled) {
    out.line(kZero + "sub_group_size", i(zero.sub_group_size),
             zero.offload_optimizer.nvme.enabled
                 ? str("the offloaded optimizer state in sub-groups of at most this many elements: the CPU "
                       "AdamW's pieces and the disk tier's records (host buffers: ",
                       zero.offload_optimizer.nvme.buffer_count, " x ",
                       format_memory_size(static_cast<size_t>(zero.sub_group_size) * 12), " at most)")
                 : std::string("the offloaded optimizer state is updated in sub-groups of at most this many "
                               "elements (no change in host memory: the state is resident)"));
  } else if (zero.stage == 3 || from_json(c, "sub_group_size")) {
    out.line(kZero + "sub_group_size", i(zero.sub_group_size),
             "none without offload_optimizer; the optimizer updates a shard in one fused pass");
  }
  // Stage-3 keys: all of them at stage 3; below it only those the JSON gave, with one notice.
  std::string unused;
  for (const Stage3Key& key : kStage3Keys) {
    if (zero.stage < 3 && !from_json(c, key.name)) continue;
    const std::string value =
        key.size != nullptr ? i(zero.*key.size) : show_bool(zero.stage3_gather_16bit_weights_on_model_save);
    out.line(kZero + std::string(key.name), value, key.effective);
    if (zero.stage < 3) unused += str(unused.empty() ? "" : ", ", key.name);
  }
  if (!unused.empty()) {
    out.notice(str("at stage ", zero.stage,
                   " these stage-3 settings change nothing (DeepSpeed ignores them too): ", unused));
  }
}

}  // namespace zt::optim::config_detail
