// train_mrpc: fine-tunes DeBERTa-v2 on GLUE MRPC, with run_glue_no_trainer.py's flags and an optional
// DeepSpeed JSON (--deepspeed_config). With no flags it trains the embedded default: a small DeBERTa-v2 from
// a seeded random init on the shipped MRPC: on a GPU the full xlarge architecture in bf16, on a CPU a small
// model in f32 (about two minutes on two cores).
//
//   train_mrpc                                   # embedded default
//   train_mrpc --output_dir out --num_train_epochs 3 --learning_rate 1e-4
//   train_mrpc --help
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "app/config/engine_options.h"
#include "app/config/train_config.h"
#include "app/plan/auto_plan.h"
#include "app/plan/calibrate.h"
#include "app/trainer/trainer.h"
#include "data/glue_tsv.h"
#include "data/task_data.h"
#include "model/config.h"
#include "model/deberta.h"
#include "model/model_file.h"
#include "model/model_source.h"
#include "model/parameters.h"
#include "optim/zero/memory_estimate.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/host_memory.h"
#include "runtime/memory_size.h"
#include "runtime/mpi_launch.h"
#include "runtime/signals.h"

namespace {

using zt::optim::ComputeDType;
using zt::optim::DeviceChoice;
using zt::optim::Origin;
using zt::optim::TrainConfig;

// The defaults that depend on the device and on the embedded model (lr, batch sizes, dtype): one table in
// app/config/train_config, which --help prints too. Flags and the DeepSpeed JSON still override every value.
void apply_embedded_defaults(TrainConfig& config, bool default_model) {
  zt::optim::apply_run_defaults(config, default_model);
}

// Picks the backend: --device auto (the default) trains on the GPU when one is present. The GPU computes in
// --dtype (bf16 by default, f16 with loss scaling, or f32); the CPU backend computes in f32 only, so a 16-bit
// --dtype given explicitly for a CPU run is an error rather than silently ignored.
void choose_device(TrainConfig& config) {
  const bool gpu = zt::cuda_available();
  if (config.device == DeviceChoice::cuda) {
    // --estimate_memory plans a GPU run on a machine without one (a login node).
    ZT_CHECK(gpu || config.estimate_memory, "--device cuda: ", zt::describe_devices());
  } else if (config.device == DeviceChoice::auto_detect) {
    config.device = gpu ? DeviceChoice::cuda : DeviceChoice::cpu;
  }
  if (config.device == DeviceChoice::cpu && config.dtype != ComputeDType::f32) {
    ZT_CHECK(config.origin_of("dtype") != Origin::accelerate, "accelerate config '", config.config_file, "' ",
             config.origin_notes["dtype"], " ", zt::optim::compute_dtype_name(config.dtype),
             ": the CPU backend computes in f32 only; set it to 'no', or train on a GPU");
    ZT_CHECK(config.origin_of("dtype") == Origin::default_value, "--dtype ",
             zt::optim::compute_dtype_name(config.dtype),
             ": the CPU backend computes in f32 only; pass --dtype f32, leave it out, or train on a GPU");
    config.dtype = ComputeDType::f32;
  }
  if (config.device == DeviceChoice::cpu && config.gpu_memory_limit > 0) {
    std::printf(
        "note: --gpu_memory_limit %s has no effect: the run is on the CPU, and the flag caps device "
        "memory only\n",
        zt::format_memory_size(config.gpu_memory_limit).c_str());
  }
}

// --auto_plan: the planner (app/plan) chooses how the step is computed for the resolved global batch, under
// --gpu_memory_limit or the device's free memory (a CPU run: the host's available memory).
// Under mpirun the ranks are one process per GPU (NCCL); else --world_size ranks share this process's GPU.
void apply_auto_plan(TrainConfig& config, const zt::DebertaConfig& model, bool gpu,
                     bool one_rank_per_process) {
  const bool device_present = gpu && zt::cuda_available();
  ZT_CHECK(config.gpu_memory_limit > 0 || !gpu || device_present,
           "--auto_plan without a GPU present needs --gpu_memory_limit (the card to plan for)");
  size_t cap = config.gpu_memory_limit;
  if (cap == 0) {
    cap = device_present
              ? zt::device_allocator().backend().free_memory() / static_cast<size_t>(config.world_size)
              : zt::read_host_memory_limits().available;
  }
  const zt::plan::PlanningFigures figures = zt::plan::planning_figures(config.machine_figures);
  const zt::plan::AutoPlan plan = zt::plan::choose_auto_plan(
      config, model, zt::optim::compute_dtype_for_run(config), cap, gpu, figures.figures,
      one_rank_per_process ? zt::plan::CollectiveTransport::nccl
                           : zt::plan::CollectiveTransport::shared_device);
  std::printf("machine figures from %s\n", figures.source.c_str());
  std::fputs(plan.report.c_str(), stdout);
  zt::plan::apply_plan(plan.plan, config);
}

// --calibrate: this host's figures for the planner, written to --machine_figures, else to the cache every
// later --auto_plan reads (zt::plan::default_machine_figures_path()).
void calibrate(const TrainConfig& config) {
  const std::string path =
      config.machine_figures.empty() ? zt::plan::default_machine_figures_path() : config.machine_figures;
  const zt::plan::MachineFigures base =
      std::filesystem::exists(path) ? zt::plan::MachineFigures::load(path) : zt::plan::MachineFigures{};
  const zt::plan::HostCalibration host = zt::plan::calibrate_host(base);
  zt::plan::MachineFigures measured = host.figures;
  if (zt::cuda_available()) {
    // The GPU's rates at the run's layer shapes (batch 40 x 128 tokens) and the encoder the run trains (the
    // flags' or the checkpoint's model), recorded as that model's: the planner uses them for it alone.
    const zt::DebertaConfig shapes = zt::optim::model_config_for_calibration(config, /*gpu=*/true);
    std::printf("calibrating for %s: %s\n", shapes.name_or_path.value_or("deberta-v2").c_str(),
                zt::plan::LayerDims::of(shapes).describe().c_str());
    const zt::plan::GpuFigures gpu =
        zt::plan::measure_gpu_figures(shapes.hidden_size, shapes.intermediate_size, 40 * 128);
    std::printf("calibrated: %s\n", gpu.describe().c_str());
    measured = zt::plan::with_gpu_figures(measured, gpu);
    // The collectives' rates: in-process ranks on this GPU, and NCCL across the visible GPUs (>= 2). A
    // failure keeps the figures as they were, said so.
    try {
      const zt::plan::CollectiveFigures collectives = zt::plan::measure_collective_figures();
      std::printf("calibrated: %s\n", collectives.describe().c_str());
      measured = zt::plan::with_collective_figures(measured, collectives);
    } catch (const zt::Error& e) {
      std::printf("calibrated: no collective figures (%s): NCCL %.0f GB/s bus, in-process %.0f GB/s kept\n",
                  e.what(), measured.nccl_bus_gbps, measured.device_group_gbps);
    }
    // The encoder's own forward + backward at the run's dims, per layer (the planner's compute part). A fit
    // the timings do not determine (noise) keeps the formulas, said so, with the timings shown.
    const auto start = std::chrono::steady_clock::now();
    const std::vector<zt::plan::LayerTimingPoint> points = zt::plan::layer_timing_points();
    const std::vector<int64_t> depths = zt::plan::layer_timing_depths();
    std::printf(
        "calibrating: the encoder at %zu shapes x %lld and %lld layers, each the best of three runs "
        "(about 8 s on an H100 at 2 and 4)\n",
        points.size(), static_cast<long long>(depths.front()), static_cast<long long>(depths.back()));
    std::fflush(stdout);
    const std::vector<zt::plan::LayerTiming> timings = zt::plan::time_encoder_layers(shapes, points);
    std::string shown;
    for (const zt::plan::LayerTiming& t : timings)
      shown += zt::str(shown.empty() ? "" : "; ", t.layers, "L ", t.batch, "x", t.length, " ", t.pair_ms, "/",
                       t.forward_ms, "/", t.checkpointed_pair_ms);
    std::printf(
        "calibrated: model forward + backward / forward / checkpointed forward + backward ms: %s (%.1f s)\n",
        shown.c_str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    try {
      const zt::plan::MeasuredLayerCost layer =
          zt::plan::fit_layer_cost(timings, shapes.num_attention_heads, zt::plan::layer_score_lengths());
      // "<fixed> us + <per token> ns/token + ps/score {<length>: <ps>, ...}"
      auto terms = [&](const zt::plan::LayerTerms& t) {
        char head[96];
        std::snprintf(head, sizeof head, "%.1f us + %.4f ns/token + ps/score {", t.fixed_us, t.token_ns);
        std::string text = head;
        for (size_t i = 0; i < layer.score_lengths.size(); ++i)
          text += zt::str(i ? ", " : "", layer.score_lengths[i], ": ", t.score_ps[i]);
        return text + "}";
      };
      std::printf(
          "calibrated: encoder layer %s; its forward %s; checkpointing's recompute %s; embeddings + head "
          "%.1f us + %.4f ns/token\n",
          terms(layer.pair).c_str(), terms(layer.forward).c_str(), terms(layer.recompute).c_str(),
          layer.head_fixed_us, layer.head_token_ns);
      measured = zt::plan::with_layer_cost(measured, layer, shapes);
    } catch (const zt::Error& e) {
      std::printf("calibrated: no encoder layer costs (%s): the step's compute stays the formulas'\n",
                  e.what());
    }
  } else {
    std::printf("no GPU: the GPU figures keep their values (%s)\n", measured.name.c_str());
  }
  if (const std::filesystem::path dir = std::filesystem::path(path).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir);
  measured.save(path);
  std::printf("calibrated: CPU AdamW %.2f G parameters/s, norm pass %.1f GB/s -> %s\n",
              measured.cpu_adamw_gparams, host.host_norm_gbps, path.c_str());
}

// A process started by mpirun: refused before anything is read (N ranks on the CPU backend, a build without
// NCCL or MPI, more ranks on a node than it has GPUs); else it takes its GPU, and ranks other than 0 are
// silent (DeepSpeed's and Accelerate's convention; errors still reach stderr).
void join_mpi_launch(const zt::LaunchInfo& launch, bool gpu) {
  if (const std::string p =
          zt::launch_support_problem(launch, gpu ? zt::DeviceKind::cuda : zt::DeviceKind::cpu,
                                     zt::built_with_cuda(), zt::built_with_nccl(), zt::built_with_mpi());
      !p.empty())
    ZT_FAIL(p);
  if (gpu) {
    if (const std::string p = zt::gpu_assignment_problem(launch, zt::cuda_device_count()); !p.empty())
      ZT_FAIL(p);
    zt::use_cuda_device(launch.local_rank);
  }
  if (launch.rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    ZT_FAIL("rank ", launch.rank, ": cannot silence stdout");
}

// The last line: steps and the last epoch's dev metrics (MRPC's accuracy and F1 as before).
void print_done(const TrainConfig& config, const zt::optim::EpochRecord& last) {
  if (config.task_name == "mrpc") {
    std::printf("done: %lld optimizer steps, dev accuracy %.4f, dev F1 %.4f\n",
                static_cast<long long>(last.optimizer_steps), last.eval.accuracy, last.eval.f1);
    return;
  }
  std::string shown;
  for (const auto& [name, value] : last.eval.metrics) shown += zt::str(", dev ", name, " ", value);
  std::printf("done: %lld optimizer steps%s\n", static_cast<long long>(last.optimizer_steps), shown.c_str());
}

int run(int argc, char** argv) {
  TrainConfig config = TrainConfig::from_args(argc, argv);
  // Under mpirun (-np N, one process per GPU) this process is rank launch.rank of launch.world_size.
  const zt::LaunchInfo launch = zt::detect_launch();
  if (config.show_help) {
    std::fputs(TrainConfig::help_text().c_str(), stdout);
    return 0;
  }
  if (config.calibrate) {
    calibrate(config);
    return 0;
  }
  const bool default_model = config.model_name_or_path.empty();
  choose_device(config);
  const bool gpu = config.device == DeviceChoice::cuda;
  if (launch.under_mpi) join_mpi_launch(launch, gpu);
  // --model_name_or_path may name an HF checkpoint directory (config.json + weights + spm.model): it is
  // converted once with convert_hf's reader and the cached copy is used from then on.
  if (!config.model_name_or_path.empty() && zt::is_hf_checkpoint_dir(config.model_name_or_path)) {
    const std::string cache = zt::optim::hf_conversion_cache(config.model_name_or_path);
    const zt::ModelSource source = zt::resolve_model_source(config.model_name_or_path, cache);
    std::printf("HF checkpoint %s: %s %s\n", config.model_name_or_path.c_str(),
                source.converted ? "converted to" : "using the converted copy", source.model_file.c_str());
  }
  // The data decides the head (labels, regression) and the step counts, so the task's files are read
  // before resolving; the trainer gets them rather than reading the files again (a FIFO reads once).
  // The checkpoint's own config (its label2id names user labels when they match).
  const zt::DebertaConfig base_model =
      config.model_name_or_path.empty()
          ? zt::DebertaConfig{}
          : zt::ModelFile(zt::optim::resolve_model_path(config.model_name_or_path)).config();
  TrainConfig probe = config;
  if (probe.origin_of("task_name") != zt::optim::Origin::flag &&
      (probe.train_file.ends_with(".csv") || probe.train_file.ends_with(".json") ||
       probe.train_file.ends_with(".jsonl")))
    probe.task_name.clear();  // run_glue without --task_name (TrainConfig::resolve decides the same)
  zt::data::TaskData task = zt::data::load_task_data(zt::optim::task_data_request(probe, base_model));
  zt::data::require_labels(task.train, "--train_file");
  if (launch.rank == 0)
    for (const std::string& note : task.notes) std::printf("%s\n", note.c_str());
  zt::DebertaConfig model_config = zt::optim::model_config_for_task(config, task);
  apply_embedded_defaults(config, default_model);
  config.resolve({.world_size = launch.world_size,
                  .hidden_size = model_config.hidden_size,
                  .num_train_examples = static_cast<int64_t>(task.train.rows.size())});

  const zt::DType compute = zt::optim::compute_dtype_for_run(config);
  if (config.auto_plan) {
    // The plan is for the model this run trains (the task's head and loss); its checkpointing choice
    // lands in the model config.
    apply_auto_plan(config, model_config, gpu, launch.under_mpi);
    model_config = zt::optim::model_config_for_task(config, task);
  }
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
                 zt::optim::zero_offload(config), gpu, config.gradient_accumulation_steps)
                 .c_str(),
             stdout);
  if (config.estimate_memory) return 0;
  const char* backend = launch.under_mpi         ? (gpu ? "processes started by mpirun, one GPU each, NCCL"
                                                        : "processes started by mpirun: one, on the CPU")
                        : config.world_size == 1 ? "single process"
                        : gpu ? "in-process ranks sharing one GPU, each its own stream and allocator"
                              : "in-process ranks";
  std::printf("ZeRO stage %d, %d rank%s (%s)\n", config.zero.stage, config.world_size,
              config.world_size == 1 ? "" : "s", backend);
  std::fputs(config.describe().c_str(), stdout);
  std::fflush(stdout);

  if (gpu && config.gpu_memory_limit > 0) {
    // Every device allocation goes through the capped allocator: --gpu_memory_limit 24GiB emulates a 24 GB
    // card.
    zt::set_device_memory_limit(config.gpu_memory_limit);
    std::printf("device memory cap %s%s\n", zt::format_memory_size(config.gpu_memory_limit).c_str(),
                config.world_size > 1 ? " per rank" : "");
  }
  // Out of device memory: the allocator's message says what was allocated and what is in use; the
  // estimator adds which batch sizes and stages fit this cap.
  const size_t rank_cap = config.gpu_memory_limit > 0 ? static_cast<size_t>(config.gpu_memory_limit)
                          : gpu                       ? zt::device_allocator().backend().free_memory() /
                                      static_cast<size_t>(launch.under_mpi ? 1 : config.world_size)
                                : 0;
  auto with_fitting_settings = [&](const zt::Error& e) {
    const std::string& what = e.message();
    if (!gpu || what.rfind("out of device memory", 0) != 0) return e;
    return zt::Error(what + "\n" +
                     zt::optim::fitting_settings_hint(
                         model_config, config.zero.stage, config.world_size, compute,
                         config.per_device_train_batch_size, config.max_length, rank_cap,
                         zt::optim::zero_offload(config), config.gradient_accumulation_steps));
  };
  std::vector<zt::optim::EpochRecord> epochs;
  // The stop handlers from here to the exit, not only inside train() (which installs its own scope, nested
  // in this one): a SIGINT / SIGTERM while the trainer is built makes train() stop after its first step with
  // a checkpoint, and one after train() returned (the ranks' teardown, the summary) lets the finished run
  // exit 0 instead of dying by the signal's default action.
  const zt::ScopedStopSignals stop_signals("train_mrpc");
  try {
    auto make_trainer = [&]() {
      if (!launch.under_mpi) return std::make_unique<zt::optim::MrpcTrainer>(config, model_config);
      // One rank per process: NCCL between the processes' GPUs (MPI only carries NCCL's id).
      zt::NcclOptions nccl;
      nccl.timeout = std::chrono::seconds(config.collective_timeout_seconds);
      return std::make_unique<zt::optim::MrpcTrainer>(
          config, model_config,
          zt::make_launch_communicator(launch, gpu ? zt::DeviceKind::cuda : zt::DeviceKind::cpu, nccl));
    };
    const std::unique_ptr<zt::optim::MrpcTrainer> trainer_ptr = make_trainer();
    zt::optim::MrpcTrainer& trainer = *trainer_ptr;
    trainer.set_task_data(std::move(task));
    epochs = trainer.train();
  } catch (const zt::Error& e) {
    throw with_fitting_settings(e);
  }
  if (zt::stop_requested()) return zt::stop_exit_code();  // 130 SIGINT, 143 SIGTERM; checkpoint written
  if (!epochs.empty()) print_done(config, epochs.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool_main("train_mrpc", argc, argv, run);
}
