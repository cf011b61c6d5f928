// train_mrpc: fine-tunes DeBERTa-v2 on GLUE MRPC, with run_glue_no_trainer.py's flags and an optional
// DeepSpeed JSON (--deepspeed_config). With no flags it trains the embedded default: a small DeBERTa-v2 from
// a seeded random init on the shipped MRPC: on a GPU the full xlarge architecture in bf16, on a CPU a small
// model in f32 (about two minutes on two cores).
//
//   train_mrpc                                   # embedded default
//   train_mrpc --output_dir out --num_train_epochs 3 --learning_rate 1e-4
//   train_mrpc --help
#include <cstdio>
#include <string>

#include "data/glue_tsv.h"
#include "model/config.h"
#include "model/deberta.h"
#include "model/parameters.h"
#include "optim/train_config.h"
#include "optim/trainer/trainer.h"
#include "optim/zero/memory_estimate.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/memory_size.h"
#include "runtime/mpi_launch.h"
#include "runtime/signals.h"

namespace {

using zt::optim::ComputeDType;
using zt::optim::DeviceChoice;
using zt::optim::Origin;
using zt::optim::TrainConfig;

// The defaults that depend on the device and on the embedded model (lr, batch sizes, dtype): one table in
// optim/train_config, which --help prints too. Flags and the DeepSpeed JSON still override every value.
void apply_embedded_defaults(TrainConfig& config, bool default_model) {
  zt::optim::apply_run_defaults(config, default_model);
}

// Picks the backend: --device auto (the default) trains on the GPU when one is present. The GPU computes in
// --dtype (bf16 by default, f16 with loss scaling, or f32); the CPU backend computes in f32 only, so a 16-bit
// --dtype given explicitly for a CPU run is an error rather than silently ignored.
void choose_device(TrainConfig& config) {
  const bool gpu = zt::cuda_available();
  if (config.device == DeviceChoice::cuda) {
    ZT_CHECK(gpu, "--device cuda: ", zt::describe_devices());
  } else if (config.device == DeviceChoice::auto_detect) {
    config.device = gpu ? DeviceChoice::cuda : DeviceChoice::cpu;
  }
  if (config.device == DeviceChoice::cpu && config.dtype != ComputeDType::f32) {
    ZT_CHECK(config.origin_of("dtype") == Origin::default_value, "--dtype ",
             zt::optim::compute_dtype_name(config.dtype),
             ": the CPU backend computes in f32 only; pass --dtype f32, leave it out, or train on a GPU");
    config.dtype = ComputeDType::f32;
  }
}

int run(int argc, char** argv) {
  TrainConfig config = TrainConfig::from_args(argc, argv);
  // One process per GPU under mpirun is not wired into the trainer yet: N copies would each train alone.
  const zt::LaunchInfo launch = zt::detect_launch();
  ZT_CHECK(
      launch.world_size == 1, "started as rank ", launch.rank, " of ", launch.world_size,
      " by a launcher (mpirun): train_mrpc does not run multi-process ZeRO yet; start one process and use "
      "--world_size N for in-process ranks");
  if (config.show_help) {
    std::fputs(TrainConfig::help_text().c_str(), stdout);
    return 0;
  }
  const bool default_model = config.model_name_or_path.empty();
  choose_device(config);
  const zt::DebertaConfig model_config = zt::optim::model_config_for_run(config);
  apply_embedded_defaults(config, default_model);

  // Step counts depend on the number of training rows, so read the train file once before resolving.
  TrainConfig probe = config;
  if (probe.data_dir.empty()) probe.data_dir = ZT_DATA_DIR;
  const std::string train_file =
      !config.train_file.empty() ? config.train_file : zt::data::mrpc_split_path(probe.data_dir, "train");
  const int64_t train_rows = static_cast<int64_t>(zt::data::read_glue_mrpc_tsv(train_file).rows.size());
  config.resolve(
      {.world_size = 1, .hidden_size = model_config.hidden_size, .num_train_examples = train_rows});

  const bool gpu = config.device == DeviceChoice::cuda;
  const zt::DType compute = zt::optim::compute_dtype_for_run(config);
  zt::ParameterTable table(model_config);
  const int64_t max_batch = std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size);
  const zt::ArenaLayout activations = zt::DebertaForSequenceClassification::plan_activations(
      model_config, max_batch, config.max_length, compute);
  std::printf("zerotrain train_mrpc — %s\n", zt::describe_devices().c_str());
  std::printf("model: %s, %lld parameters (%lld layers, hidden %lld)\n",
              model_config.name_or_path.value_or("deberta-v2").c_str(),
              static_cast<long long>(table.total_numel()),
              static_cast<long long>(model_config.num_hidden_layers),
              static_cast<long long>(model_config.hidden_size));
  // The memory plan of every stage at this world size, from the layout the run allocates.
  std::fputs(zt::optim::describe_memory_estimates(
                 model_config, config.zero.stage, config.world_size, compute, max_batch, config.max_length,
                 {.optimizer = config.zero.offload_optimizer.enabled,
                  .param = config.zero.offload_param.enabled,
                  .disk_buffers = config.zero.offload_optimizer.nvme.enabled
                                      ? static_cast<int>(config.zero.offload_optimizer.nvme.buffer_count)
                                      : 0})
                 .c_str(),
             stdout);
  if (config.estimate_memory) return 0;
  std::printf("ZeRO stage %d, %d rank%s (%s)\n", config.zero.stage, config.world_size,
              config.world_size == 1 ? "" : "s",
              config.world_size == 1 ? "single process" : "in-process ranks");
  std::fputs(config.describe().c_str(), stdout);
  std::fflush(stdout);

  if (gpu && config.gpu_memory_limit > 0) {
    // Every device allocation goes through the capped allocator: --gpu_memory_limit 24GiB emulates a 24 GB
    // card.
    zt::set_device_memory_limit(config.gpu_memory_limit);
    std::printf("device memory cap %s\n", zt::format_memory_size(config.gpu_memory_limit).c_str());
  }
  zt::optim::MrpcTrainer trainer(config, model_config);
  const auto epochs = trainer.train();
  if (zt::stop_requested()) return zt::stop_exit_code();  // 130 SIGINT, 143 SIGTERM; checkpoint written
  if (!epochs.empty()) {
    const auto& last = epochs.back();
    std::printf("done: %lld optimizer steps, dev accuracy %.4f, dev F1 %.4f\n",
                static_cast<long long>(last.optimizer_steps), last.eval.accuracy, last.eval.f1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool_main("train_mrpc", argc, argv, run);
}
