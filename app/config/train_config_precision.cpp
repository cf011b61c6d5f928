// Precision section: --dtype against the JSON's fp16/bf16 sections, fp16 loss scaling, and the CPU backend's
// f32-only rule.
#include "app/config/train_config_sections.h"

namespace zt::optim::config_detail {

namespace {

// fp16's loss-scaler keys (DeepSpeed's names) into c.fp16; returns fp16.enabled.
JsonValue<bool> read_fp16_section(ResolveContext& context, JsonSection& section) {
  TrainConfig& c = context.config;
  const JsonValue<bool> enabled = section.boolean("enabled");
  auto given = [&](const auto& v) {
    if (v.given()) set_json_origin(c, v.path, v.path);
    return v.given();
  };
  if (const JsonValue<double> v = section.number("loss_scale"); given(v)) {
    ZT_CHECK(v.value >= 0, context.where(), v.path, " must be >= 0 (0 = dynamic), got ", v.value);
    c.fp16.static_scale = v.value;
  }
  if (const JsonValue<int64_t> v = section.integer("initial_scale_power", 0, 63); given(v))
    c.fp16.initial_scale_power = static_cast<int>(v.value);
  if (const JsonValue<int64_t> v = section.integer("loss_scale_window", 1); given(v))
    c.fp16.scale_window = v.value;
  // LossScalerConfig::hysteresis is an int.
  if (const JsonValue<int64_t> v = section.integer("hysteresis", 1, std::numeric_limits<int>::max());
      given(v))
    c.fp16.hysteresis = static_cast<int>(v.value);
  if (const JsonValue<bool> v = section.boolean("consecutive_hysteresis"); given(v))
    c.fp16.consecutive_hysteresis = v.value;
  if (const JsonValue<double> v = section.number("min_loss_scale"); given(v)) {
    ZT_CHECK(v.value > 0, context.where(), v.path, " must be positive, got ", v.value);
    c.fp16.min_scale = v.value;
  }
  if (const JsonValue<bool> v = section.boolean("auto_cast"); given(v)) {
    c.fp16_auto_cast = v.value;
    c.deepspeed_keys.explained[v.path] =
        str(show_bool(v.value),
            ": DeepSpeed casts the model's floating-point inputs to fp16; the model's "
            "inputs are token ids and masks, so there is nothing to cast");
  }
  return enabled;
}

// The dtype the JSON's fp16/bf16 sections ask for, reconciled with --dtype.
void resolve_json_dtype(ResolveContext& context) {
  TrainConfig& c = context.config;
  JsonValue<bool> fp16_enabled, bf16_enabled;
  if (std::optional<JsonSection> fp16_section = context.section("fp16")) {
    fp16_enabled = read_fp16_section(context, *fp16_section);
  }
  // DeepSpeed accepts "bfloat16" as another name for "bf16".
  std::optional<JsonSection> bf16_section = context.section("bf16");
  std::optional<JsonSection> bfloat16_section = context.section("bfloat16");
  ZT_CHECK(!(bf16_section && bfloat16_section), context.where(),
           "has both bf16 and bfloat16 (the same setting)");
  if (!bf16_section) bf16_section = std::move(bfloat16_section);
  if (bf16_section) {
    bf16_enabled = bf16_section->boolean("enabled");
  }
  ZT_CHECK(!(fp16_enabled.given() && fp16_enabled.value && bf16_enabled.given() && bf16_enabled.value),
           context.where(), "enables both fp16 and bf16 (", fp16_enabled.path, " and ", bf16_enabled.path,
           " are true); enable at most one");
  // What the JSON allows: an enabled section fixes the dtype, a disabled one rules its dtype out.
  std::optional<ComputeDType> wanted;
  std::string wanted_by;
  if (fp16_enabled.given() && fp16_enabled.value) {
    wanted = ComputeDType::f16;
    wanted_by = fp16_enabled.path + " true";
  } else if (bf16_enabled.given() && bf16_enabled.value) {
    wanted = ComputeDType::bf16;
    wanted_by = bf16_enabled.path + " true";
  }
  const bool f16_ruled_out = fp16_enabled.given() && !fp16_enabled.value;
  const bool bf16_ruled_out = bf16_enabled.given() && !bf16_enabled.value;
  const bool dtype_fits = wanted ? c.dtype == *wanted
                                 : !((c.dtype == ComputeDType::f16 && f16_ruled_out) ||
                                     (c.dtype == ComputeDType::bf16 && bf16_ruled_out));
  if (!dtype_fits) {
    if (!wanted) {
      wanted_by = c.dtype == ComputeDType::f16 ? fp16_enabled.path + " false" : bf16_enabled.path + " false";
    }
    ZT_CHECK(c.origin_of("dtype") != Origin::flag, "--dtype ", compute_dtype_name(c.dtype),
             " contradicts DeepSpeed config '", context.source, "' ", wanted_by);
    ZT_CHECK(c.origin_of("dtype") != Origin::accelerate, "accelerate config '", c.config_file, "' ",
             c.origin_notes["dtype"], " (", compute_dtype_name(c.dtype), ") contradicts DeepSpeed config '",
             context.source, "' ", wanted_by);
    // With neither section enabled DeepSpeed trains in fp32.
    c.dtype = wanted.value_or(ComputeDType::f32);
    set_json_origin(c, "dtype", wanted_by);
  } else if (fp16_enabled.automatic() || bf16_enabled.automatic()) {
    c.origin_notes["dtype"] = "fills fp16/bf16.enabled=auto";
  } else if (wanted) {
    if (c.origin_of("dtype") != Origin::flag) set_json_origin(c, "dtype", wanted_by);
  }
}

}  // namespace

void resolve_precision(ResolveContext& context) {
  TrainConfig& c = context.config;
  if (context.top != nullptr) resolve_json_dtype(context);
  if (c.device != DeviceChoice::cpu || c.dtype == ComputeDType::f32) return;
  // The CPU backend computes in f32 only: a 16-bit dtype someone asked for is refused rather than trained in
  // f32 under a 16-bit label; the default (bf16, for GPUs) quietly becomes f32, as on train_mrpc's CPU run.
  const std::string_view dtype = compute_dtype_name(c.dtype);
  switch (c.origin_of("dtype")) {
    case Origin::flag:
      ZT_FAIL("--dtype ", dtype,
              ": the CPU backend computes in f32 only; pass --dtype f32, leave it out, or train on a GPU");
    case Origin::json:
      ZT_FAIL(context.where(), c.origin_notes["dtype"], ": the CPU backend computes in f32 only, not ", dtype,
              "; set it to false or \"auto\", or train on a GPU");
    case Origin::accelerate:
      ZT_FAIL("accelerate config '", c.config_file, "' ", c.origin_notes["dtype"], " ", dtype,
              ": the CPU backend computes in f32 only; set it to 'no', or train on a GPU");
    default:
      c.dtype = ComputeDType::f32;
      c.origin_notes["dtype"] = "on the CPU";
  }
}

void describe_precision(const TrainConfig& c, DescribeWriter& out) {
  out.group("precision");
  out.line("dtype", std::string(compute_dtype_name(c.dtype)));
  if (c.dtype != ComputeDType::f16) return;
  const LossScalerConfig& s = c.fp16;
  out.line("fp16.loss_scale", s.static_scale > 0 ? show_double(s.static_scale) : "0 (dynamic)");
  out.line("fp16.initial_scale_power", std::to_string(s.initial_scale_power));
  out.line("fp16.loss_scale_window", std::to_string(s.scale_window));
  out.line("fp16.hysteresis", std::to_string(s.hysteresis));
  out.line("fp16.consecutive_hysteresis", show_bool(s.consecutive_hysteresis));
  out.line("fp16.min_loss_scale", show_double(s.min_scale));
  out.line("fp16.auto_cast", show_bool(c.fp16_auto_cast));
}

}  // namespace zt::optim::config_detail
