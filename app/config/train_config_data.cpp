// Data section: the task and its files, the batch sizes (DeepSpeed's train_batch_size derivation) and the
// step counts.
#include "app/config/train_config_sections.h"
#include "data/glue_tsv.h"
#include "optim/epoch_steps.h"

namespace zt::optim::config_detail {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool is_user_file(const std::string& path) {
  return path.ends_with(".csv") || path.ends_with(".json") || path.ends_with(".jsonl");
}

}  // namespace

void resolve_data_paths(ResolveContext& context) {
  TrainConfig& c = context.config;
  // run_glue without --task_name: the user's CSV / JSON-lines files.
  if (c.origin_of("task_name") != Origin::flag && is_user_file(c.train_file)) c.task_name.clear();
  // Only MRPC ships with the repo; the other tasks' files are where --data_dir or the file flags say
  // (data/task_data.h resolves them).
  if (c.task_name != "mrpc") return;
  if (c.data_dir.empty()) c.data_dir = ZT_DATA_DIR;
  if (c.train_file.empty()) c.train_file = data::mrpc_split_path(c.data_dir, "train");
  if (c.validation_file.empty()) c.validation_file = data::mrpc_split_path(c.data_dir, "dev");
  if (c.test_file.empty()) c.test_file = data::mrpc_split_path(c.data_dir, "test");
}

// DeepSpeed's derivation (runtime/config.py _set_batch_related_parameters), with the world size already
// settled by resolve_world_size.
void resolve_batch_sizes(ResolveContext& context) {
  TrainConfig& c = context.config;
  const int64_t world = c.world_size;
  JsonValue<int64_t> train_batch, micro, accumulation;
  if (context.top != nullptr) {
    train_batch = context.top->integer("train_batch_size", 1);
    micro = context.top->integer("train_micro_batch_size_per_gpu", 1);
    accumulation = context.top->integer("gradient_accumulation_steps", 1);
  }
  const bool micro_known = micro.given() || c.origin_of("per_device_train_batch_size") == Origin::flag;
  const bool accumulation_known =
      accumulation.given() || c.origin_of("gradient_accumulation_steps") == Origin::flag;
  reconcile(context, c.per_device_train_batch_size, "per_device_train_batch_size", micro);
  reconcile(context, c.gradient_accumulation_steps, "gradient_accumulation_steps", accumulation);
  // Checked: flags and JSON accept any positive int64, and the product feeds every step count.
  const int64_t product =
      checked_product(checked_product(c.per_device_train_batch_size, c.gradient_accumulation_steps,
                                      "micro batch x gradient_accumulation_steps"),
                      world, "micro batch x gradient_accumulation_steps x world_size");
  if (!train_batch.given()) {
    c.train_batch_size = product;
    c.origins["train_batch_size"] = train_batch.automatic() ? Origin::json_auto : Origin::derived;
    c.origin_notes["train_batch_size"] = "micro x accumulation x world_size";
    return;
  }
  const int64_t total = train_batch.value;
  // train_batch_size fixes the factor that nobody gave: total / (the other factor x world_size).
  auto derive = [&](int64_t& unknown, const char* key, int64_t other, const char* other_name,
                    const char* note) {
    ZT_CHECK(total % (other * world) == 0, context.where(), "train_batch_size ", total,
             " is not divisible by ", other_name, " ", other, " x world_size ", world);
    unknown = total / (other * world);
    c.origins[key] = Origin::derived;
    c.origin_notes[key] = note;
  };
  if (micro_known && !accumulation_known) {
    derive(c.gradient_accumulation_steps, "gradient_accumulation_steps", c.per_device_train_batch_size,
           "train_micro_batch_size_per_gpu", "train_batch_size / (micro x world_size)");
  } else if (!micro_known) {
    derive(c.per_device_train_batch_size, "per_device_train_batch_size", c.gradient_accumulation_steps,
           "gradient_accumulation_steps", "train_batch_size / (accumulation x world_size)");
  }
  const int64_t derived = c.per_device_train_batch_size * c.gradient_accumulation_steps * world;
  ZT_CHECK(total == derived, context.where(), "train_batch_size ", total,
           " != train_micro_batch_size_per_gpu ", c.per_device_train_batch_size, " (",
           origin_name(c.origin_of("per_device_train_batch_size")), ") x gradient_accumulation_steps ",
           c.gradient_accumulation_steps, " (", origin_name(c.origin_of("gradient_accumulation_steps")),
           ") x world_size ", world, " = ", derived);
  c.train_batch_size = total;
  set_json_origin(c, "train_batch_size", train_batch.path);
}

void resolve_steps(ResolveContext& context) {
  TrainConfig& c = context.config;
  const int64_t examples = context.inputs.num_train_examples;
  if (examples > 0) {
    // Note [Optimizer steps of an epoch] (optim/epoch_steps.h): the trainer's loop counts with it too.
    c.num_update_steps_per_epoch =
        epoch_steps(examples, c.per_device_train_batch_size, c.gradient_accumulation_steps, c.world_size)
            .steps;
  }
  if (c.max_train_steps) {
    c.num_training_steps = *c.max_train_steps;
    c.origins["num_training_steps"] = c.origin_of("max_train_steps");
    if (c.num_update_steps_per_epoch > 0) {
      // As run_glue_no_trainer.py: the epoch count follows from the step budget.
      c.num_train_epochs = ceil_div(c.num_training_steps, c.num_update_steps_per_epoch);
      c.origins["num_train_epochs"] = Origin::derived;
      c.origin_notes["num_train_epochs"] = "ceil(max_train_steps / steps per epoch)";
    }
  } else {
    ZT_CHECK(examples > 0, "the number of training steps needs the training set size (or --max_train_steps)");
    c.num_training_steps = checked_product(c.num_train_epochs, c.num_update_steps_per_epoch,
                                           "num_train_epochs x steps per epoch");
    c.origins["num_training_steps"] = Origin::derived;
    c.origin_notes["num_training_steps"] = "num_train_epochs x steps per epoch";
  }
  c.origins["num_update_steps_per_epoch"] = Origin::derived;
}

void describe_data(const TrainConfig& c, DescribeWriter& out) {
  auto i = [](int64_t v) { return std::to_string(v); };
  out.group("data");
  out.line("task_name", c.task_name);
  out.line("data_dir", c.data_dir);
  out.line("train_file", c.train_file);
  out.line("validation_file", c.validation_file);
  out.line("test_file", c.test_file);
  out.line("max_length", i(c.max_length));
  out.line("pad_to_max_length", show_bool(c.pad_to_max_length));
  out.line("per_device_train_batch_size", i(c.per_device_train_batch_size));
  out.line("gradient_accumulation_steps", i(c.gradient_accumulation_steps));
  out.line("train_batch_size", i(c.train_batch_size));
  out.line("per_device_eval_batch_size", i(c.per_device_eval_batch_size));
}

}  // namespace zt::optim::config_detail
