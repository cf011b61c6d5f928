// train_mrpc: fine-tunes DeBERTa-v2 on GLUE MRPC, with run_glue_no_trainer.py's flags and an optional
// DeepSpeed JSON (--deepspeed_config). With no flags it trains the embedded default: a small DeBERTa-v2 from
// a seeded random init on the shipped MRPC, on the CPU, in about a minute.
//
//   train_mrpc                                   # embedded default
//   train_mrpc --output_dir out --num_train_epochs 3 --learning_rate 1e-4
//   train_mrpc --help
#include <cstdio>
#include <exception>
#include <string>

#include "data/glue_tsv.h"
#include "model/config.h"
#include "model/deberta.h"
#include "model/parameters.h"
#include "optim/train_config.h"
#include "optim/trainer.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/memory_size.h"

namespace {

using zt::optim::ComputeDType;
using zt::optim::DeviceChoice;
using zt::optim::Origin;
using zt::optim::TrainConfig;

// The embedded default recipe: a learning rate and length that make the small random-init model learn within
// a minute on two CPU cores. Flags and the DeepSpeed JSON still override every value.
void apply_embedded_defaults(TrainConfig& config, bool default_model) {
  if (!default_model) return;
  if (config.origin_of("learning_rate") == Origin::default_value) config.learning_rate = 1e-4;
  if (config.origin_of("per_device_train_batch_size") == Origin::default_value)
    config.per_device_train_batch_size = 32;
  if (config.origin_of("per_device_eval_batch_size") == Origin::default_value)
    config.per_device_eval_batch_size = 64;
  if (config.origin_of("num_train_epochs") == Origin::default_value) config.num_train_epochs = 3;
}

// Picks the backend. --device cuda trains on the GPU (f32 for now: the bf16/f16 model path is being built);
// --device auto stays on the CPU and says so when it finds a GPU. Both compute in f32, so a 16-bit --dtype
// given explicitly is an error rather than silently ignored.
void choose_device(TrainConfig& config) {
  const bool gpu = zt::cuda_available();
  if (config.device == DeviceChoice::cuda) {
    ZT_CHECK(gpu, "--device cuda: ", zt::describe_devices());
  } else if (config.device == DeviceChoice::auto_detect && gpu) {
    std::printf(
        "note: %s found; --device auto trains on the CPU until the bf16 GPU path lands "
        "(pass --device cuda for the f32 GPU path)\n",
        zt::describe_devices().c_str());
  }
  if (config.dtype != ComputeDType::f32) {
    ZT_CHECK(config.origin_of("dtype") == Origin::default_value, "--dtype ",
             zt::optim::compute_dtype_name(config.dtype),
             ": training computes in f32 only for now; pass --dtype f32 or leave it out");
    config.dtype = ComputeDType::f32;
  }
}

int run(int argc, char** argv) {
  TrainConfig config = TrainConfig::from_args(argc, argv);
  if (config.show_help) {
    std::fputs(TrainConfig::help_text().c_str(), stdout);
    return 0;
  }
  const bool default_model = config.model_name_or_path.empty();
  const zt::DebertaConfig model_config = zt::optim::model_config_for_run(config);
  choose_device(config);
  apply_embedded_defaults(config, default_model);

  // Step counts depend on the number of training rows, so read the train file once before resolving.
  TrainConfig probe = config;
  if (probe.data_dir.empty()) probe.data_dir = ZT_DATA_DIR;
  const std::string train_file =
      !config.train_file.empty() ? config.train_file : zt::data::mrpc_split_path(probe.data_dir, "train");
  const int64_t train_rows = static_cast<int64_t>(zt::data::read_glue_mrpc_tsv(train_file).rows.size());
  config.resolve(
      {.world_size = 1, .hidden_size = model_config.hidden_size, .num_train_examples = train_rows});

  zt::ParameterTable table(model_config);
  const zt::ArenaLayout activations = zt::DebertaForSequenceClassification::plan_activations(
      model_config, std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size),
      config.max_length);
  std::printf("zerotrain train_mrpc — %s\n", zt::describe_devices().c_str());
  std::printf("model: %s, %lld parameters (%lld layers, hidden %lld)\n",
              model_config.name_or_path.value_or("deberta-v2").c_str(),
              static_cast<long long>(table.total_numel()),
              static_cast<long long>(model_config.num_hidden_layers),
              static_cast<long long>(model_config.hidden_size));
  const size_t state_bytes = 4 * table.layout(zt::DType::f32).total_bytes();
  std::printf(
      "memory plan (CPU, f32): parameters+gradients+Adam m,v %s, activations %s (batch %lld x %lld)\n",
      zt::format_memory_size(state_bytes).c_str(), zt::format_memory_size(activations.total_bytes()).c_str(),
      static_cast<long long>(std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size)),
      static_cast<long long>(config.max_length));
  std::fputs(config.describe().c_str(), stdout);
  std::fflush(stdout);

  if (config.device == DeviceChoice::cuda) {
    // Every device allocation goes through the capped allocator: --gpu_memory_limit 24GiB emulates a 24 GB
    // card.
    if (config.gpu_memory_limit > 0) zt::set_device_memory_limit(config.gpu_memory_limit);
    std::printf(
        "device memory plan (f32): parameters+gradients+Adam m,v %s, activations %s, cap %s\n",
        zt::format_memory_size(state_bytes).c_str(),
        zt::format_memory_size(activations.total_bytes()).c_str(),
        config.gpu_memory_limit > 0 ? zt::format_memory_size(config.gpu_memory_limit).c_str() : "none");
  }
  zt::optim::MrpcTrainer trainer(config, model_config);
  const auto epochs = trainer.train();
  if (!epochs.empty()) {
    const auto& last = epochs.back();
    std::printf("done: %lld optimizer steps, dev accuracy %.4f, dev F1 %.4f\n",
                static_cast<long long>(last.optimizer_steps), last.eval.accuracy, last.eval.f1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mrpc: error: %s\n", e.what());
    return 2;
  }
}
