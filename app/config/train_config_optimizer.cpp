// Optimizer section: DeepSpeed's "optimizer" (AdamW or Adam, decoupled decay) and gradient_clipping,
// reconciled with the HF flags.
#include <algorithm>
#include <cctype>

#include "app/config/train_config_sections.h"

namespace zt::optim::config_detail {

void resolve_optimizer(ResolveContext& context) {
  TrainConfig& c = context.config;
  if (context.top != nullptr) {
    reconcile(context, c.max_grad_norm, "max_grad_norm", context.top->number("gradient_clipping"));
    ZT_CHECK(c.max_grad_norm >= 0, context.where(), "gradient_clipping must be non-negative, got ",
             c.max_grad_norm);
  }
  if (std::optional<JsonSection> optimizer = context.section("optimizer")) {
    const JsonValue<std::string> type = optimizer->string("type");
    ZT_CHECK(type.given(), context.where(), "optimizer.type is required (AdamW or Adam)");
    std::string lowered = type.value;
    std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    ZT_CHECK(lowered == "adamw" || lowered == "adam", context.where(), "optimizer.type '", type.value,
             "' is not supported (zerotrain implements AdamW and Adam)");
    c.optimizer_type = lowered == "adamw" ? "AdamW" : "Adam";
    set_json_origin(c, "optimizer.type", type.path);
    if (std::optional<JsonSection> params = optimizer->section("params")) {
      reconcile(context, c.learning_rate, "learning_rate", params->number("lr"));
      reconcile(context, c.weight_decay, "weight_decay", params->number("weight_decay"));
      reconcile(context, c.adam_epsilon, "adam_epsilon", params->number("eps"));
      const JsonValue<std::array<double, 2>> betas = params->pair("betas");
      const JsonValue<double> beta1{betas.state, betas.value[0], betas.path + "[0]", betas.auto_allowed};
      const JsonValue<double> beta2{betas.state, betas.value[1], betas.path + "[1]", betas.auto_allowed};
      reconcile(context, c.adam_beta1, "adam_beta1", beta1);
      reconcile(context, c.adam_beta2, "adam_beta2", beta2);
      const JsonValue<bool> adam_w_mode = params->boolean("adam_w_mode");
      // DeepSpeed: type AdamW forces decoupled decay whatever adam_w_mode says; Adam defaults to it.
      ZT_CHECK(!(adam_w_mode.given() && !adam_w_mode.value && c.optimizer_type == "AdamW"), context.where(),
               "optimizer.type AdamW contradicts optimizer.params.adam_w_mode false");
      ZT_CHECK(!(adam_w_mode.given() && !adam_w_mode.value), context.where(),
               "optimizer.params.adam_w_mode false (Adam with L2 regularization) is not implemented; "
               "zerotrain's AdamW decays weights decoupled");
      if (const JsonValue<bool> v = params->boolean("torch_adam"); v.given()) {
        c.torch_adam = v.value;
        c.deepspeed_keys.explained[v.path] =
            str(show_bool(v.value),
                ": DeepSpeed's choice between torch's Adam and its fused kernel, the same math; "
                "zerotrain runs its own AdamW either way");
      }
      const JsonValue<bool> bias_correction = params->boolean("bias_correction");
      ZT_CHECK(!bias_correction.given() || bias_correction.value, context.where(),
               "optimizer.params.bias_correction false is not implemented");
      const JsonValue<bool> amsgrad = params->boolean("amsgrad");
      ZT_CHECK(!amsgrad.given() || !amsgrad.value, context.where(),
               "optimizer.params.amsgrad true is not implemented");
    }
  }
  ZT_CHECK(c.adam_beta1 >= 0 && c.adam_beta1 < 1 && c.adam_beta2 >= 0 && c.adam_beta2 < 1,
           "Adam betas must be in [0, 1), got (", c.adam_beta1, ", ", c.adam_beta2, ")");
  ZT_CHECK(c.learning_rate >= 0 && c.weight_decay >= 0 && c.adam_epsilon > 0,
           "learning rate and weight decay must be non-negative and epsilon positive");
}

void describe_optimizer(const TrainConfig& c, DescribeWriter& out) {
  auto n = [](double v) { return show_double(v); };
  out.group("optimizer");
  out.line("optimizer.type", c.optimizer_type + (c.torch_adam ? " (torch_adam)" : ""));
  out.line("learning_rate", n(c.learning_rate));
  out.line("weight_decay", n(c.weight_decay));
  out.line("adam_beta1", n(c.adam_beta1));
  out.line("adam_beta2", n(c.adam_beta2));
  out.line("adam_epsilon", n(c.adam_epsilon));
  out.line("max_grad_norm", c.max_grad_norm > 0 ? n(c.max_grad_norm) : "0 (no clipping)");
}

}  // namespace zt::optim::config_detail
