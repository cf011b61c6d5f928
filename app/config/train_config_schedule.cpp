// Schedule section: HF's --lr_scheduler_type, or a DeepSpeed "scheduler" that replaces it (as Accelerate's
// DummyScheduler does), with its warmup and total steps reconciled with the flags.
#include <limits>

#include "app/config/train_config_sections.h"

namespace zt::optim {

using nlohmann::json;

std::string_view deepspeed_schedule_name(DeepSpeedSchedule::Type type) {
  switch (type) {
    case DeepSpeedSchedule::Type::warmup_lr:
      return "WarmupLR";
    case DeepSpeedSchedule::Type::warmup_decay_lr:
      return "WarmupDecayLR";
    case DeepSpeedSchedule::Type::warmup_cosine_lr:
      return "WarmupCosineLR";
  }
  return "?";
}

LrSchedule TrainConfig::hf_schedule() const {
  LrSchedule schedule;
  schedule.kind = parse_schedule_kind(lr_scheduler_type);
  schedule.base_lr = learning_rate;
  schedule.num_warmup_steps = num_warmup_steps;
  schedule.num_training_steps = num_training_steps;
  return schedule;
}

namespace config_detail {

void resolve_schedule(ResolveContext& context) {
  TrainConfig& c = context.config;
  parse_schedule_kind(c.lr_scheduler_type);
  if (std::optional<JsonSection> scheduler = context.section("scheduler")) {
    const JsonValue<std::string> type = scheduler->string("type");
    ZT_CHECK(type.given(), context.where(),
             "scheduler.type is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    DeepSpeedSchedule schedule;
    if (type.value == "WarmupLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_lr;
    } else if (type.value == "WarmupDecayLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_decay_lr;
    } else if (type.value == "WarmupCosineLR") {
      schedule.type = DeepSpeedSchedule::Type::warmup_cosine_lr;
    } else {
      ZT_FAIL(context.where(), "scheduler.type '", type.value,
              "' is not supported (expected WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    }
    ZT_CHECK(c.origin_of("lr_scheduler_type") != Origin::flag, "--lr_scheduler_type ", c.lr_scheduler_type,
             " contradicts DeepSpeed config '", context.source, "' scheduler.type ", type.value,
             " (with a DeepSpeed scheduler the flag's schedule is not used; drop one of them)");
    set_json_origin(c, "scheduler.type", type.path);
    const bool cosine = schedule.type == DeepSpeedSchedule::Type::warmup_cosine_lr;
    const bool has_total = schedule.type != DeepSpeedSchedule::Type::warmup_lr;
    std::optional<JsonSection> params = scheduler->section("params");
    const json empty_object = json::object();
    JsonSection empty_params(empty_object, "scheduler.params", context.source);
    JsonSection& p = params ? *params : empty_params;

    // warmup_num_steps: "auto" and absent follow --num_warmup_steps (DeepSpeed's own default is 1000).
    const JsonValue<int64_t> warmup = p.integer("warmup_num_steps");
    ZT_CHECK(!warmup.given() || warmup.value > 0, context.where(), warmup.path,
             " must be a positive integer, as DeepSpeed requires, got 0 (for no warmup leave it \"auto\" and "
             "pass --num_warmup_steps 0)");
    reconcile(context, c.num_warmup_steps, "num_warmup_steps", warmup);
    schedule.warmup_num_steps = c.num_warmup_steps;
    if (schedule.warmup_num_steps == 0) {
      c.deepspeed_keys.notes[warmup.path] =
          "0 from --num_warmup_steps: no warmup (DeepSpeed refuses 0; the schedule starts past its warmup)";
    } else if (schedule.effective_warmup_steps() != schedule.warmup_num_steps) {
      c.deepspeed_keys.notes[warmup.path] =
          str(schedule.warmup_num_steps, ": DeepSpeed warms up over at least ",
              schedule.effective_warmup_steps(), " steps, and so does zerotrain");
    }
    if (!cosine) {
      const JsonValue<double> min_lr = p.number("warmup_min_lr");
      schedule.warmup_min_lr = min_lr.given() ? min_lr.value : 0.0;  // "auto": 0, as HF
      if (min_lr.given()) set_json_origin(c, "scheduler.warmup_min_lr", min_lr.path);
      if (min_lr.automatic()) c.origins["scheduler.warmup_min_lr"] = Origin::json_auto;
      // The schedule sets the rate to warmup_max_lr outright, so it is the learning rate.
      const JsonValue<double> max_lr = p.number("warmup_max_lr");
      reconcile(context, c.learning_rate, "learning_rate", max_lr);
      if (max_lr.given()) {
        set_json_origin(c, "scheduler.warmup_max_lr", max_lr.path);
      } else {
        // Absent, DeepSpeed would use 0.001 whatever the optimizer says; we keep the one learning rate.
        c.origins["scheduler.warmup_max_lr"] = max_lr.automatic() ? Origin::json_auto : Origin::derived;
        c.origin_notes["scheduler.warmup_max_lr"] = "learning_rate";
      }
      schedule.warmup_max_lr = c.learning_rate;
    } else {
      if (const JsonValue<double> v = p.number("warmup_min_ratio"); v.given())
        schedule.warmup_min_ratio = v.value;
      if (const JsonValue<double> v = p.number("cos_min_ratio"); v.given()) schedule.cos_min_ratio = v.value;
    }
    if (has_total) {
      const JsonValue<int64_t> total = p.integer("total_num_steps");
      if (total.given()) {
        ZT_CHECK(!(c.max_train_steps && c.origin_of("max_train_steps") == Origin::flag &&
                   *c.max_train_steps != total.value),
                 "--max_train_steps ", c.max_train_steps.value_or(0), " contradicts DeepSpeed config '",
                 context.source, "' ", total.path, " = ", total.value);
        schedule.total_num_steps = total.value;
        set_json_origin(c, "scheduler.total_num_steps", total.path);
      } else {
        // "auto" (and absent, which DeepSpeed would reject): the run's optimizer steps per rank. Accelerate
        // divides its total by the number of processes; ours is already per rank.
        schedule.total_num_steps = c.num_training_steps;
        c.origins["scheduler.total_num_steps"] = total.automatic() ? Origin::json_auto : Origin::derived;
        c.origin_notes["scheduler.total_num_steps"] = "num_training_steps";
      }
      // DeepSpeed's schedules assume the warmup ends within the run.
      ZT_CHECK(schedule.total_num_steps >= schedule.warmup_num_steps, context.where(), total.path, " ",
               schedule.total_num_steps, total.given() ? "" : " (the run's optimizer steps)",
               " is less than scheduler.params.warmup_num_steps ", schedule.warmup_num_steps,
               ": the warmup would not end before the schedule does");
    }
    const JsonValue<std::string> warmup_type = p.string("warmup_type");
    if (warmup_type.given()) {
      set_json_origin(c, "scheduler.warmup_type", warmup_type.path);
      ZT_CHECK(warmup_type.value == "log" || warmup_type.value == "linear", context.where(), warmup_type.path,
               " must be log or linear, got '", warmup_type.value, "'");
      schedule.warmup_log = warmup_type.value == "log";
    }
    const JsonValue<int64_t> last = p.integer("last_batch_iteration", std::numeric_limits<int64_t>::min());
    ZT_CHECK(!last.given() || last.value == -1, context.where(), last.path,
             " other than -1 is not supported; resume with --resume_from_checkpoint");
    c.deepspeed_schedule = schedule;
  }
}

void describe_schedule(const TrainConfig& c, DescribeWriter& out) {
  auto n = [](double v) { return show_double(v); };
  auto i = [](int64_t v) { return std::to_string(v); };
  out.group("schedule");
  out.line("num_train_epochs", i(c.num_train_epochs));
  out.line("max_train_steps", c.max_train_steps ? i(*c.max_train_steps) : "");
  out.line("num_update_steps_per_epoch", i(c.num_update_steps_per_epoch));
  out.line("num_training_steps", i(c.num_training_steps));
  out.line("num_warmup_steps", i(c.num_warmup_steps));
  if (!c.deepspeed_schedule) {
    out.line("lr_scheduler_type", c.lr_scheduler_type);
    return;
  }
  const DeepSpeedSchedule& s = *c.deepspeed_schedule;
  out.line("scheduler.type", std::string(deepspeed_schedule_name(s.type)));
  if (s.type == DeepSpeedSchedule::Type::warmup_cosine_lr) {
    out.line("scheduler.warmup_min_ratio", n(s.warmup_min_ratio));
    out.line("scheduler.cos_min_ratio", n(s.cos_min_ratio));
  } else {
    out.line("scheduler.warmup_min_lr", n(s.warmup_min_lr));
    out.line("scheduler.warmup_max_lr", n(s.warmup_max_lr));
  }
  if (s.type != DeepSpeedSchedule::Type::warmup_lr)
    out.line("scheduler.total_num_steps", i(s.total_num_steps));
  out.line("scheduler.warmup_type", s.warmup_log ? "log" : "linear");
}

}  // namespace config_detail
}  // namespace zt::optim
