#include "app/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <span>
#include <vector>

#include "app/config/engine_options.h"
#include "app/run/checkpoint.h"
#include "app/run/resume_config.h"
#include "app/run/run_directory.h"
#include "app/run/sharded_checkpoint.h"
#include "app/tracking/run_tracker.h"
#include "data/glue_metrics.h"
#include "data/glue_tsv.h"
#include "data/task_data.h"
#include "data/tokenizer.h"
#include "kernels/elementwise.h"
#include "model/deberta.h"
#include "model/init.h"
#include "model/model_file.h"
#include "model/model_source.h"
#include "optim/adamw.h"
#include "optim/epoch_steps.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "optim/zero/engine.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/log.h"
#include "runtime/progress.h"
#include "runtime/rank_device.h"
#include "runtime/signals.h"
#include "runtime/step_profile.h"
#include "runtime/wall_clock_breakdown.h"

#include <exception>
#include <optional>
#include <thread>

namespace zt::optim {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

DType compute_dtype_for_run(const TrainConfig& config) {
  if (config.device != DeviceChoice::cuda) return DType::f32;
  switch (config.dtype) {
    case ComputeDType::bf16:
      return DType::bf16;
    case ComputeDType::f16:
      return DType::f16;
    case ComputeDType::f32:
      return DType::f32;
  }
  ZT_FAIL("unknown --dtype");
}

namespace {
// --gradient_checkpointing turns it on in the model's config whatever the caller built (a config already
// asking for it keeps it).
DebertaConfig checkpointed_if_asked(DebertaConfig model, const TrainConfig& config) {
  model.gradient_checkpointing = model.gradient_checkpointing || config.gradient_checkpointing;
  return model;
}
}  // namespace

DebertaConfig model_config_for_run(const TrainConfig& config, int64_t num_labels, const std::string& task) {
  // The embedded default: the full xlarge architecture (random init) on the GPU, a small model on the CPU.
  if (config.model_name_or_path.empty()) {
    return checkpointed_if_asked(
        config.device == DeviceChoice::cuda ? deberta_v2_xlarge_config() : deberta_small_cpu_config(),
        config);
  }
  DebertaConfig model =
      checkpointed_if_asked(ModelFile(resolve_model_path(config.model_name_or_path)).config(), config);
  if (model.num_labels != num_labels) {
    ZT_CHECK(
        config.ignore_mismatched_sizes, "--model_name_or_path ", config.model_name_or_path, " has ",
        model.num_labels, " labels but ", task, " has ", num_labels,
        ": pass --ignore_mismatched_sizes to re-initialize the classifier (or convert with convert_hf import "
        "--num_labels ",
        num_labels, ")");
    model.num_labels = num_labels;
    model.id2label.clear();
    model.label2id.clear();
    for (int64_t i = 0; i < num_labels; ++i) {
      model.id2label.push_back(str("LABEL_", i));
      model.label2id[str("LABEL_", i)] = i;
    }
  }
  return model;
}

data::TaskDataRequest task_data_request(const TrainConfig& config, const DebertaConfig& model) {
  data::TaskDataRequest request;
  request.task_name = config.task_name;
  request.data_dir = config.data_dir;
  request.train_file = config.train_file;
  request.validation_file = config.validation_file;
  request.test_file = config.test_file;
  // The shipped MRPC when nothing else is named (TrainConfig::resolve fills the same paths).
  if (request.task_name == "mrpc" && request.data_dir.empty()) request.data_dir = ZT_DATA_DIR;
  if (!config.model_name_or_path.empty()) request.model_label2id = model.label2id;
  return request;
}

namespace {
// A new head for `task`: its label count, its names as id2label (run_glue sets label2id from the data's
// label list), MSE for regression.
void set_task_head(DebertaConfig& model, const data::TaskData& task) {
  model.num_labels = task.num_labels();
  model.id2label.clear();
  model.label2id.clear();
  for (int64_t i = 0; i < model.num_labels; ++i) {
    const std::string name = task.regression || static_cast<size_t>(i) >= task.label_names.size()
                                 ? str("LABEL_", i)
                                 : task.label_names[static_cast<size_t>(i)];
    model.id2label.push_back(name);
    model.label2id[name] = i;
  }
  if (task.regression) {
    model.problem_type = "regression";
  } else if (model.problem_type == "regression") {
    model.problem_type.reset();
  }
}
}  // namespace

DebertaConfig model_config_for_task(const TrainConfig& config, const data::TaskData& task) {
  DebertaConfig model;
  if (config.model_name_or_path.empty()) {
    model = model_config_for_run(config);
    // The embedded default's head is MRPC's; any other task gets its own.
    if (task.task_name != "mrpc") set_task_head(model, task);
  } else {
    model = model_config_for_run(config, task.num_labels(), task.display_name());
    const int64_t stored = ModelFile(resolve_model_path(config.model_name_or_path)).config().num_labels;
    if (stored != task.num_labels()) set_task_head(model, task);
  }
  ZT_CHECK(model.is_regression() == task.regression, "--model_name_or_path ", config.model_name_or_path,
           " has a ", model.is_regression() ? "regression" : "classification", " head but ",
           task.display_name(), " is ", task.regression ? "regression" : "classification",
           " (pass --ignore_mismatched_sizes with a head of another size, or another checkpoint)");
  return model;
}

std::string hf_conversion_cache(const std::string& hf_dir) {
  // One folder per checkpoint path: HF's own cache convention (~/.cache/...), overridable for CI and tests.
  const char* override_dir = std::getenv("ZT_HF_CACHE");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root =
      override_dir != nullptr && *override_dir != '\0'
          ? std::filesystem::path(override_dir)
          : std::filesystem::path(home != nullptr ? home : "/tmp") / ".cache" / "zerotrain" / "hf";
  const std::string absolute = std::filesystem::absolute(hf_dir).lexically_normal().string();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a of the absolute path
  for (unsigned char ch : absolute) hash = (hash ^ ch) * 1099511628211ull;
  char name[17];
  std::snprintf(name, sizeof(name), "%016llx", static_cast<unsigned long long>(hash));
  return (root / (std::filesystem::path(absolute).filename().string() + "-" + name)).string();
}

std::string resolve_model_path(const std::string& file_or_dir) {
  const std::filesystem::path path(file_or_dir);
  if (is_hf_checkpoint_dir(file_or_dir)) {
    return resolve_model_source(file_or_dir, hf_conversion_cache(file_or_dir)).model_file;
  }
  if (std::filesystem::is_directory(path)) {
    const auto file = path / "model.h5";
    ZT_CHECK(std::filesystem::exists(file), "--model_name_or_path ", file_or_dir,
             ": the directory holds no model.h5 (convert a HuggingFace checkpoint with convert_hf import)");
    return file.string();
  }
  ZT_CHECK(std::filesystem::exists(path), "--model_name_or_path ", file_or_dir,
           ": no such file or directory");
  return path.string();
}

namespace {

// "%.4f", as the epoch line prints every metric.
std::string format_fixed4(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4f", value);
  return text;
}

data::Batcher make_eval_batcher(const data::EncodedDataset& dataset, int64_t batch_size) {
  data::BatcherOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.drop_last = false;
  return data::Batcher(dataset, options);
}

ArenaLayout flat_f32_layout(int64_t n) {
  return ArenaLayout({{"values", {n}, DType::f32}});
}

ArenaLayout batch_layout(int64_t max_batch, int64_t max_length) {
  return ArenaLayout({{"input_ids", {max_batch, max_length}, DType::i64},
                      {"attention_mask", {max_batch, max_length}, DType::i64},
                      {"labels", {max_batch}, DType::i64}});
}

// Where a run computes: --device cuda puts parameters, gradients, Adam state and activations on the GPU.
DeviceKind training_device(const TrainConfig& config) {
  if (config.device != DeviceChoice::cuda) return DeviceKind::cpu;
  ZT_CHECK(cuda_available(), "--device cuda: ", describe_devices());
  return DeviceKind::cuda;
}

ArenaOptions state_arena(DeviceKind device, MemoryCategory category, bool zero) {
  return {.kind = device == DeviceKind::cuda ? MemoryKind::device : MemoryKind::host,
          .category = category,
          .zero_fill = zero};
}

}  // namespace

// The optimizer steps since the last logged one: their mean loss and throughput are what a step line shows.
struct StepLogWindow {
  double loss_sum = 0;
  int64_t steps = 0;
  int64_t samples = 0;
  Clock::time_point since = Clock::now();
  void add(const StepRecord& record, int64_t window_samples) {
    loss_sum += record.loss;
    ++steps;
    samples += window_samples;
  }
};

// One rank of the data-parallel group: its communicator, optimizer-state engine, model activations and
// batch buffer. In-process ranks are threads of this process (world_size > 1); rank r's state is built,
// used and destroyed on rank r's thread only. Ranks sharing one GPU each have a RankDevice (own capped
// allocator and compute stream) that their thread enters around all of its work.
struct RankState {
  std::unique_ptr<RankDevice> gpu;  // GPU and world_size > 1 only; destroyed last, after what it allocated
  Communicator* comm = nullptr;
  // The model before the engine: destroyed after it, as the engine's gradients may live in the model's
  // activation arena (ZeroEngineOptions::gradient_memory).
  std::unique_ptr<DebertaForSequenceClassification> model;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<Arena> batch_arena;          // GPU: the current batch (ids, mask [B, L], labels [B])
  LossScaler scaler = LossScaler::disabled();  // identical on every rank (they see the same overflow)
};

struct MrpcTrainer::Impl {
  TrainConfig config;
  DebertaConfig model_config;
  ParameterTable table;
  DeviceKind device;
  DType compute;    // storage dtype of the model's parameters and activations
  int world;        // ranks in the run
  int first_rank;   // the first of this process's ranks
  int local_count;  // ranks this process runs (threads): the world, or 1 in a process group
  // --host_memory_limit: every rank's engine charges its offload buffers; declared before the ranks so that
  // it outlives their engines.
  HostMemoryBudget host_budget;
  std::vector<RankState> ranks;
  // Declared after `ranks`, so destroyed before them: a device group's scratch buffer belongs to its rank's
  // allocator, which ends with the rank's state.
  std::vector<std::unique_ptr<Communicator>> comms;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::EncodedDataset> train_set;
  // The task's evaluation splits (MNLI: matched, mismatched) and test splits, encoded in task order.
  std::vector<std::unique_ptr<data::EncodedDataset>> eval_sets, test_sets;
  std::optional<data::TaskData> task;  // set_task_data, or read by load_data
  std::unique_ptr<data::Batcher> train_batcher;
  int64_t optimizer_step = 0;  // optimizer steps taken so far, fp16 overflow-skipped ones included
  int64_t scheduler_step = 0;  // learning-rate schedule steps: applied updates only (DeepSpeed)
  int64_t micro_step = 0;      // micro-batches consumed so far over all ranks (keys the dropout masks)
  std::vector<StepRecord> steps;
  std::function<void(const StepRecord&)> step_callback;
  bool group_stop = false;                            // a process group agreed to stop (see should_stop)
  std::optional<data::GlueDataset> given_train_rows;  // set_train_rows: the train file as already read
  std::string resumed_from;                           // the checkpoint load_checkpoint loaded, if any
  double epoch_loss_sum = 0;          // of the epoch under way: step losses summed, for its train_loss
  int64_t epoch_optimizer_steps = 0;  // optimizer steps of the epoch under way
  // wall_clock_breakdown: marked on rank 0's thread (runtime/wall_clock_breakdown.h); null when off.
  std::unique_ptr<WallClockBreakdown> wall_clock;

  // process_group: this process is one rank of that group (mpirun, one process per GPU); null: every rank
  // of config.world_size is a thread of this process.
  Impl(TrainConfig c, DebertaConfig mc, std::unique_ptr<Communicator> process_group)
      : config(std::move(c)),
        model_config(checkpointed_if_asked(std::move(mc), config)),
        table(model_config),
        device(training_device(config)),
        compute(compute_dtype_for_run(config)),
        world(process_group ? process_group->world_size() : std::max(1, config.world_size)),
        first_rank(process_group ? process_group->rank() : 0),
        local_count(process_group ? 1 : world),
        host_budget(config.host_memory_limit) {
    ZT_CHECK(config.resolved, "MrpcTrainer needs a resolved TrainConfig");
    ZT_CHECK(local_count == world || config.world_size == world, "the configuration was resolved for ",
             config.world_size, " ranks but the process group has ", world,
             " (resolve with the launch's world size: one rank per process)");
    if (config.wall_clock_breakdown)
      wall_clock = std::make_unique<WallClockBreakdown>(/*synchronize_device=*/device == DeviceKind::cuda);
    // A rank stuck longer than --collective_timeout in a collective aborts the group, naming the ranks that
    // never arrived.
    const InProcessGroupOptions group{
        .timeout = std::chrono::milliseconds(config.collective_timeout_seconds * 1000)};
    const bool shared_gpu = device == DeviceKind::cuda && local_count > 1;
    if (process_group) {
      comms.push_back(std::move(process_group));
    } else {
      comms = shared_gpu ? make_in_process_device_group(world, kSharedGpu, group)
                         : make_in_process_group(world, group);
    }
    // --debug_collectives: ranks compare each collective (op, dtype, size) before running it and fail with
    // both sequences instead of hanging.
    if (config.debug_collectives)
      for (auto& comm : comms) comm = make_checked_communicator(std::move(comm));
    // Processes started with different settings would train different things and hang or diverge:
    // every process compares its resolved configuration with the others' before anything is allocated.
    if (local_count < world) check_same_config_on_every_process();
    // Stage 3 keeps at most the embeddings, the shared unit and two layers gathered at once.
    if (config.zero.stage == 3) {
      const ZeroPartition partition(table, world);
      const int64_t live = partition.units().front().numel + partition.units().back().numel +
                           2 * partition.largest_layer_unit();
      ZT_CHECK(config.zero.stage3_max_live_parameters >= live,
               "zero_optimization.stage3_max_live_parameters ", config.zero.stage3_max_live_parameters,
               " is below what stage 3 keeps gathered at once (", live,
               " parameters: the embeddings, the shared tensors and two layers)");
    }
    ranks.resize(static_cast<size_t>(local_count));
    if (shared_gpu) {
      // Each rank gets --gpu_memory_limit as if it had its own card; without one, an equal share of what the
      // device has free now.
      const size_t cap = config.gpu_memory_limit > 0 ? static_cast<size_t>(config.gpu_memory_limit)
                                                     : device_allocator(kSharedGpu).backend().free_memory() /
                                                           static_cast<size_t>(local_count);
      for (RankState& rank : ranks) rank.gpu = std::make_unique<RankDevice>(kSharedGpu, cap);
    } else if (device == DeviceKind::cuda && world == 1) {
      // One rank alone on the GPU: its work on a stream of its own with the device's greatest priority, so
      // that the side streams' kernels (the early gradient norm, an overlapped AdamW) take the SMs the step's
      // own kernels leave, instead of competing with them as equals on the legacy default stream.
      const size_t cap = config.gpu_memory_limit > 0 ? static_cast<size_t>(config.gpu_memory_limit)
                                                     : DeviceAllocator::kNoLimit;
      ranks.front().gpu = std::make_unique<RankDevice>(kSharedGpu, cap, RankDevice::StreamPriority::greatest);
    }
    // Stage 0 with one micro-batch per step: the gradients live in the model's activation arena, on the
    // slots backward has finished with (GradientLayout).
    std::optional<GradientLayout> on_activations;
    if (gradients_on_activations(model_config, config.zero.stage, config.gradient_accumulation_steps))
      on_activations = stage0_gradient_layout(ZeroPartition(table, world));
    run_ranks([&](int r) {
      RankState& rank = at(r);
      rank.comm = comms[static_cast<size_t>(r - first_rank)].get();
      rank.model = std::make_unique<DebertaForSequenceClassification>(
          model_config, max_batch(), config.max_length, device, compute,
          on_activations ? &*on_activations : nullptr);
      rank.engine = std::make_unique<ZeroEngine>(
          table, model_config, *rank.comm,
          ZeroEngineOptions{.stage = config.zero.stage,
                            .device = device,
                            .compute = compute,
                            .reduce_scatter = config.zero.reduce_scatter,
                            .overlap_comm = config.zero.overlap_comm,
                            .overlap_optimizer = config.overlap_optimizer,
                            .gradient_memory = rank.model->gradient_memory(),
                            .hyper = AdamWHyper{config.learning_rate, config.adam_beta1, config.adam_beta2,
                                                config.adam_epsilon, config.weight_decay},
                            .max_grad_norm = config.max_grad_norm,
                            .offload = zero_offload(config),
                            .pin_memory = config.zero.offload_optimizer.pin_memory,
                            .pin_param_memory = config.zero.offload_param.pin_memory,
                            .ranks_sharing_host = world,
                            .host_memory_limits = std::nullopt,
                            .disk = zero_disk_tier(config),
                            .param_disk = zero_param_disk_tier(config),
                            .host_budget = &host_budget});
      if (device == DeviceKind::cuda)
        rank.batch_arena = std::make_unique<Arena>("batch", batch_layout(max_batch(), config.max_length),
                                                   state_arena(device, MemoryCategory::activations, false));
      rank.scaler = compute == DType::f16 ? LossScaler(config.fp16) : LossScaler::disabled();
    });
    initialize_parameters();
  }

  ~Impl() {
    // Rank state is torn down on the rank threads that own it; the ranks' devices after everything
    // allocated from them.
    if (local_count > 1) {
      run_ranks([&](int r) {
        RankState& rank = at(r);
        rank.batch_arena.reset();
        rank.engine.reset();  // before the model, whose arena may hold its gradients
        rank.model.reset();
      });
    }
    comms.clear();  // their scratch returns to the ranks' allocators, which end next
    ranks.clear();
  }

  static constexpr int kSharedGpu = 0;  // in-process GPU ranks all run on device 0

  // Runs fn(rank) for every rank of this process (global rank numbers): inline for one, else on one thread
  // per rank. A rank that throws aborts the group (the others leave their collectives with "group
  // aborted"; in a process group the peers' NCCL calls fail instead of hanging); the first error that is not
  // such a consequence is rethrown.
  void run_ranks(const std::function<void(int)>& fn) {
    if (local_count == 1) {
      if (world == 1) {
        RankDevice* gpu = at(first_rank).gpu.get();
        std::optional<RankDevice::Enter> on_rank_device;
        if (gpu != nullptr) on_rank_device.emplace(*gpu);
        fn(first_rank);
        if (gpu != nullptr) gpu->synchronize();  // the caller reads results after this returns
      } else {
        AbortGroupOnException guard(*comms.front());
        fn(first_rank);
      }
      return;
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(local_count));
    std::vector<std::thread> threads;
    for (int i = 0; i < local_count; ++i) {
      threads.emplace_back([&, i] {
        const int r = first_rank + i;
        try {
          AbortGroupOnException guard(*comms[static_cast<size_t>(i)]);
          RankDevice* gpu = at(r).gpu.get();
          std::optional<RankDevice::Enter> on_rank_device;
          if (gpu != nullptr) on_rank_device.emplace(*gpu);
          if (r != 0) StepProfile::disable_on_this_thread();  // rank 0's segments stand for the step
          fn(r);
          // The caller's thread reads results after this returns; the rank's stream is not ordered with
          // it otherwise.
          if (gpu != nullptr) gpu->synchronize();
        } catch (...) {
          errors[static_cast<size_t>(i)] = std::current_exception();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    // Prefer the error that started it over the "group aborted" errors it caused on the other ranks.
    std::exception_ptr first, cause;
    for (const std::exception_ptr& e : errors) {
      if (!e) continue;
      if (!first) first = e;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        if (!cause && std::string_view(ex.what()).find("group aborted") == std::string_view::npos) cause = e;
      } catch (...) {
        if (!cause) cause = e;
      }
    }
    if (cause) std::rethrow_exception(cause);
    if (first) std::rethrow_exception(first);
  }

  // Global rank r's state; r must be one of this process's ranks.
  RankState& at(int r) { return ranks[static_cast<size_t>(r - first_rank)]; }
  // Any of this process's ranks, for what every rank holds alike (the loss scaler, Adam's step count).
  RankState& local_rank() { return ranks.front(); }
  // Process 0 (rank 0) evaluates below stage 3, prints the results and writes the run's files.
  bool main_process() const { return first_rank == 0; }

  // Whether to stop after this step (SIGINT/SIGTERM): in a process group the agreed answer of the last
  // step, so every process stops after the same one.
  bool should_stop() const { return local_count < world ? group_stop : stop_requested(); }

  // Each process's fingerprint of its resolved configuration (TrainConfig::describe()), gathered by all: a
  // mismatch is an error naming the processes that differ from rank 0, on every process alike.
  void check_same_config_on_every_process() {
    // FNV-1a over the text, split into 16-bit pieces so each is exact in an f32 (the collectives' dtype).
    uint64_t hash = 1469598103934665603ull;
    for (const unsigned char c : config.describe()) hash = (hash ^ c) * 1099511628211ull;
    std::vector<float> mine(4);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>((hash >> (16 * i)) & 0xffff);
    const auto n = static_cast<int64_t>(mine.size());
    Arena buffer("config fingerprints", flat_f32_layout(n * (world + 1)),
                 state_arena(device, MemoryCategory::communication, false));
    const Tensor all = buffer.tensor("values");
    const Tensor gathered(all.data(), {n * world}, DType::f32, all.device());
    const Tensor own(static_cast<float*>(all.data()) + n * world, {n}, DType::f32, all.device());
    copy_tensor(Tensor(mine.data(), {n}, DType::f32), own);
    comms.front()->all_gather(own, gathered);
    std::vector<float> host(static_cast<size_t>(n * world));
    copy_tensor(gathered, Tensor(host.data(), {n * world}, DType::f32));
    std::string differing;
    for (int r = 1; r < world; ++r)
      if (!std::equal(host.begin(), host.begin() + n, host.begin() + n * r)) differing += str(" ", r);
    ZT_CHECK(differing.empty(), "ranks", differing, " were started with settings other than rank 0's (every ",
             "process of a launch needs the same flags, DeepSpeed config and files); rank ", first_rank,
             " resolved:\n", config.describe());
  }

  // Element-wise sum of `values` over the processes of a process group (one rank each), in place.
  void sum_over_processes(std::vector<float>& values) {
    const auto n = static_cast<int64_t>(values.size());
    const Tensor host(values.data(), {n}, DType::f32);
    Arena buffer("process exchange", flat_f32_layout(n),
                 state_arena(device, MemoryCategory::communication, false));
    const Tensor on_device = buffer.tensor("values");
    copy_tensor(host, on_device);
    comms.front()->all_reduce_sum(on_device);
    copy_tensor(on_device, host);
  }

  // Note [Optimizer steps of an epoch] for the train set as read; a configuration resolved for another
  // number of rows would plan another schedule, so that is an error.
  EpochSteps epoch_plan() const {
    const EpochSteps plan =
        epoch_steps(static_cast<int64_t>(train_set->size()), config.per_device_train_batch_size,
                    config.gradient_accumulation_steps, world);
    ZT_CHECK(config.num_update_steps_per_epoch == 0 || config.num_update_steps_per_epoch == plan.steps,
             "the configuration was resolved for ", config.num_update_steps_per_epoch,
             " optimizer steps an epoch, but the ", train_set->size(), " rows of ", config.train_file,
             " make ", plan.steps, " (resolve with num_train_examples = the train file's rows)");
    return plan;
  }

  // "; the step before it (N) had loss ..." for a divergence message; step numbers are metrics.jsonl's
  // (1-based).
  std::string last_finite_step() const {
    if (steps.empty()) return "";
    const StepRecord& last = steps.back();
    return str("; the step before it (", last.step + 1, ") had loss ", last.loss, ", gradient norm ",
               last.grad_norm, " and learning rate ", last.lr);
  }

  int64_t max_batch() const {
    return std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size);
  }

  // The batch as the model wants it: views of the host batch on the CPU, a copy in the rank's batch arena on
  // the GPU.
  DebertaBatch upload(RankState& rank, data::Batch& batch) {
    // A regression head reads f32 targets (NaN: unlabeled), a classifier i64 labels.
    const bool regression = model_config.is_regression();
    if (device == DeviceKind::cpu) {
      return {batch.input_ids_tensor(), batch.attention_mask_tensor(),
              regression ? batch.scores_tensor() : batch.labels_tensor()};
    }
    auto slot = [&](const char* name, Shape shape) {
      return Tensor(rank.batch_arena->tensor(name).data(), shape, DType::i64, DeviceKind::cuda);
    };
    // The labels slot holds i64 labels or, in its first half, f32 targets.
    DebertaBatch out{slot("input_ids", {batch.batch_size, batch.seq_len}),
                     slot("attention_mask", {batch.batch_size, batch.seq_len}),
                     Tensor(rank.batch_arena->tensor("labels").data(), {batch.batch_size},
                            regression ? DType::f32 : DType::i64, DeviceKind::cuda)};
    copy_tensor(batch.input_ids_tensor(), out.input_ids);
    copy_tensor(batch.attention_mask_tensor(), out.attention_mask);
    copy_tensor(regression ? batch.scores_tensor() : batch.labels_tensor(), out.labels);
    return out;
  }

  // The full f32 parameters on the host (collective over the ranks' shards).
  Arena consolidated_parameters() {
    // Zero-filled: the padding between tensors compares equal between runs.
    Arena host("parameters (host)", table.layout(DType::f32), {.zero_fill = true});
    run_ranks([&](int r) { at(r).engine->gather_full_master(r == 0 ? &host : nullptr); });
    return host;
  }

  // Initializes every tensor on the host (init_parameter: a pure function of seed, name and index), loads
  // --model_name_or_path over it, and hands it to the ranks' engines, one tensor at a time: the host stages
  // the largest tensor (the word embeddings), never the whole model, which would sit next to the offloaded
  // state. With --ignore_mismatched_sizes a classifier whose label count differs from the run's is left at
  // its fresh init (HF's N(0, 0.02^2), bias 0); the pooler is kept.
  void initialize_parameters() {
    std::optional<ModelFile> file;
    if (!config.model_name_or_path.empty()) file.emplace(resolve_model_path(config.model_name_or_path));
    int64_t largest = 0;
    for (const ParameterInfo& info : table.entries()) largest = std::max(largest, info.numel());
    std::vector<float> staging(static_cast<size_t>(largest));
    // With the disk tier the loading writes the whole optimizer state to disk (tens of GiB for billions of
    // parameters: minutes at a disk's 1-2 GB/s), so it shows its progress.
    std::optional<Progress> progress;
    if (config.zero.offload_optimizer.nvme.enabled || config.zero.offload_param.nvme.enabled) {
      ProgressOptions shown;
      shown.unit = "params";
      progress.emplace("loading the parameters into the disk tier", table.total_numel(), shown);
    }
    for (size_t k = 0; k < table.size(); ++k) {
      const ParameterInfo& info = table.entries()[k];
      const Tensor values(staging.data(), info.shape, DType::f32);
      init_parameter(model_config, info, values, config.seed);
      const bool head = info.name.rfind("classifier.", 0) == 0;
      if (file && !(head && file->config().num_labels != model_config.num_labels))
        file->read_param(info.name, values);
      const std::span<const float> span(staging.data(), static_cast<size_t>(info.numel()));
      run_ranks([&](int r) { at(r).engine->load_parameter(k, span); });
      if (progress) progress->update(info.numel());
    }
    run_ranks([&](int r) { at(r).engine->finish_loading(); });
    if (progress) progress->finish();
    if (!file) return;
    const DebertaConfig& stored = file->config();
    std::printf("loaded %s (%lld tensors)%s\n", file->path().c_str(), static_cast<long long>(table.size()),
                stored.num_labels != model_config.num_labels
                    ? str("; classifier re-initialized for ", model_config.num_labels,
                          " labels (checkpoint had ", stored.num_labels, ")")
                          .c_str()
                    : "");
  }

  // The scalars of a logged step (metrics.jsonl "step" lines, TensorBoard): the mean loss and samples/s of
  // the steps since the last logged one; learning rate, gradient norm and fp16 loss scale of this step; the
  // device memory in use by category (GPU); the wall_clock_breakdown segments, mean ms per step.
  std::vector<tracking::Scalar> step_scalars(const StepRecord& record, const StepLogWindow& window) {
    std::vector<tracking::Scalar> scalars = {
        {"train/loss", window.loss_sum / static_cast<double>(std::max<int64_t>(window.steps, 1))},
        {"train/learning_rate", record.lr}};
    if (std::isfinite(record.grad_norm)) scalars.push_back({"train/grad_norm", record.grad_norm});
    if (compute == DType::f16) {
      scalars.push_back({"train/loss_scale", record.loss_scale});
      scalars.push_back({"train/skipped_steps", static_cast<double>(local_rank().scaler.skipped_steps())});
    }
    scalars.push_back({"train/samples_per_s",
                       static_cast<double>(window.samples) / std::max(seconds_since(window.since), 1e-9)});
    if (device == DeviceKind::cuda) {
      // Rank 0's allocator: the one its thread allocates from (a rank's scoped allocator, if any).
      DeviceMemoryStats memory;
      run_ranks([&](int r) {
        if (r == 0) memory = device_allocator().stats();
      });
      for (int k = 0; k < kMemoryCategoryCount; ++k) {
        const std::string name(memory_category_name(static_cast<MemoryCategory>(k)));
        scalars.push_back({"memory/" + name + "_mib", static_cast<double>(memory.in_use[k]) / (1 << 20)});
      }
      scalars.push_back({"memory/cached_mib", static_cast<double>(memory.cached) / (1 << 20)});
    }
    if (wall_clock) {
      shown_wall_clock.clear();
      for (const auto& [segment, ms] : wall_clock->take_mean_ms()) {
        scalars.push_back({"time/" + segment + "_ms", ms});
        shown_wall_clock.emplace_back(segment + "_ms", ms);
      }
    }
    return scalars;
  }
  ProgressMetrics shown_wall_clock;  // the last logged segment times, shown on the progress line

  double lr_at(int64_t step) const {
    if (config.deepspeed_schedule) return config.deepspeed_schedule->lr_at(step, config.learning_rate);
    return config.hf_schedule().lr_at(step);
  }

  void load_data() {
    // The tokenizer belongs to the model: spm.model beside a converted model, else the embedded default's.
    std::string spm = std::string(ZT_DATA_DIR) + "/spm8k.model";
    if (!config.model_name_or_path.empty()) {
      const auto beside =
          std::filesystem::path(resolve_model_path(config.model_name_or_path)).parent_path() / "spm.model";
      if (std::filesystem::exists(beside)) spm = beside.string();
    }
    tokenizer = std::make_unique<data::Tokenizer>(spm);
    ZT_CHECK(tokenizer->vocab_size() <= model_config.vocab_size, "tokenizer ", spm, " has ",
             tokenizer->vocab_size(), " pieces but the model's vocabulary holds ", model_config.vocab_size);
    // Each input is read once: rows given by set_train_rows / set_task_data are not read again (a FIFO has
    // them only once).
    if (!task) {
      data::TaskDataRequest request = task_data_request(config, model_config);
      if (given_train_rows) request.train_rows = std::move(*given_train_rows);
      task = data::load_task_data(request);
      if (main_process())
        for (const std::string& note : task->notes) std::printf("%s\n", note.c_str());
    }
    given_train_rows.reset();
    data::require_labels(task->train, "--train_file");
    for (const data::TaskSplit& split : task->eval) data::require_labels(split.rows, "--validation_file");
    ZT_CHECK(
        task->num_labels() == model_config.num_labels && task->regression == model_config.is_regression(),
        task->display_name(), " has ",
        task->regression ? "a regression target" : str(task->num_labels(), " labels"),
        " but the model's head has ", model_config.num_labels,
        model_config.is_regression() ? " (regression)" : "",
        " (model_config_for_task builds the head a task needs)");
    train_set = std::make_unique<data::EncodedDataset>(task->train, *tokenizer, config.max_length);
    for (const data::TaskSplit& split : task->eval)
      eval_sets.push_back(std::make_unique<data::EncodedDataset>(split.rows, *tokenizer, config.max_length));
    for (const data::TaskSplit& split : task->test)
      test_sets.push_back(std::make_unique<data::EncodedDataset>(split.rows, *tokenizer, config.max_length));
    data::BatcherOptions options;
    options.batch_size = config.per_device_train_batch_size;
    options.shuffle = true;
    options.seed = config.seed;
    options.padding = config.pad_to_max_length ? data::Padding::max_length : data::Padding::none;
    train_batcher = std::make_unique<data::Batcher>(*train_set, options);
  }
};

MrpcTrainer::MrpcTrainer(TrainConfig config, DebertaConfig model_config)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(model_config), nullptr)) {}

MrpcTrainer::MrpcTrainer(TrainConfig config, DebertaConfig model_config,
                         std::unique_ptr<Communicator> process_group)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(model_config), std::move(process_group))) {
  ZT_CHECK(impl_->comms.size() == 1, "MrpcTrainer: a process group needs its communicator");
}

MrpcTrainer::~MrpcTrainer() = default;

void MrpcTrainer::load_parameters(const Arena& host) {
  Impl& s = *impl_;
  ZT_CHECK(host.device() == DeviceKind::cpu && host.bytes() == s.table.layout(DType::f32).total_bytes(),
           "load_parameters: expected a host arena laid out by table().layout(f32)");
  s.run_ranks([&](int r) { s.at(r).engine->load_full_parameters(host); });
}

Arena MrpcTrainer::params() const {
  return impl_->consolidated_parameters();
}
const ParameterTable& MrpcTrainer::table() const {
  return impl_->table;
}
const DebertaConfig& MrpcTrainer::model_config() const {
  return impl_->model_config;
}
const std::vector<StepRecord>& MrpcTrainer::steps() const {
  return impl_->steps;
}
std::vector<DeviceMemoryStats> MrpcTrainer::rank_memory() const {
  const Impl& s = *impl_;
  std::vector<DeviceMemoryStats> out;
  if (s.device != DeviceKind::cuda) return out;
  for (const RankState& rank : s.ranks)
    out.push_back(rank.gpu ? rank.gpu->allocator().stats() : device_allocator().stats());
  return out;
}

bool MrpcTrainer::overlaps_offloaded_update() const {
  // One decision for every rank: the overlap runs at world size 1 only.
  return impl_->ranks.front().engine->overlaps_offloaded_update();
}

void MrpcTrainer::reset_memory_peaks() {
  Impl& s = *impl_;
  if (s.device != DeviceKind::cuda) return;
  for (RankState& rank : s.ranks) (rank.gpu ? rank.gpu->allocator() : device_allocator()).reset_peaks();
}

void MrpcTrainer::set_train_rows(data::GlueDataset rows) {
  impl_->given_train_rows = std::move(rows);
}

void MrpcTrainer::set_task_data(data::TaskData task) {
  impl_->task = std::move(task);
}

void MrpcTrainer::set_step_callback(std::function<void(const StepRecord&)> callback) {
  impl_->step_callback = std::move(callback);
}

StepRecord MrpcTrainer::train_step(std::vector<data::Batch>& micro_batches) {
  Impl& s = *impl_;
  const int W = s.world;
  ZT_CHECK(!micro_batches.empty() && micro_batches.size() % static_cast<size_t>(W) == 0, "train_step needs ",
           "a positive multiple of the world size (", W, ") of micro-batches, got ", micro_batches.size());
  // Micro-batch i of the window goes to rank i % W as its (i / W)-th micro-batch and draws the dropout masks
  // of global micro-step micro_step + i: world W with accumulation k sees the batches and masks of world 1
  // with accumulation W k, in the same order.
  const int64_t per_rank = static_cast<int64_t>(micro_batches.size()) / W;
  // run_glue_no_trainer divides each micro-batch loss by gradient_accumulation_steps (also on a short last
  // window at the end of an epoch), so the gradient is the mean over the configured window; the ranks'
  // gradients are then averaged. fp16 multiplies by the current loss scale as well.
  std::vector<double> losses(micro_batches.size(), 0.0);
  std::vector<ZeroStepResult> results(static_cast<size_t>(W));
  StepRecord record;
  record.step = s.optimizer_step;
  record.lr = s.lr_at(s.scheduler_step);
  record.loss_scale = s.local_rank().scaler.scale();
  StepProfile::global().mark_start();
  s.run_ranks([&](int r) {
    RankState& rank = s.at(r);
    // Segment marks (mark_wall_clock) anywhere below charge rank 0's breakdown; no-ops on other ranks.
    WallClockScope wall_clock(r == 0 ? s.wall_clock.get() : nullptr);
    if (r == 0 && s.wall_clock) s.wall_clock->start_step();
    const float loss_scale =
        static_cast<float>(rank.scaler.scale()) / static_cast<float>(s.config.gradient_accumulation_steps);
    for (int64_t j = 0; j < per_rank; ++j) {
      const size_t i = static_cast<size_t>(j * W + r);
      const DebertaBatch inputs = s.upload(rank, micro_batches[i]);
      const float loss = rank.model->forward(
          rank.engine->parameter_handles(), inputs,
          {.training = true, .seed = s.config.seed, .step = static_cast<uint64_t>(s.micro_step) + i},
          rank.engine.get());
      ZT_CHECK(std::isfinite(loss), "training diverged at optimizer step ", s.optimizer_step + 1,
               ": the loss of its micro-batch ", s.micro_step + static_cast<int64_t>(i), " (rank ", r,
               ") is ", loss, s.last_finite_step());
      mark_wall_clock("forward");
      rank.engine->begin_backward(j == 0, j + 1 == per_rank);
      rank.model->backward(rank.engine->parameter_handles(), rank.engine->gradient_handles(), loss_scale,
                           rank.engine.get());
      mark_wall_clock("backward");
      losses[i] = loss;
    }
    results[static_cast<size_t>(r)] = rank.engine->step(record.lr, rank.scaler);
    mark_wall_clock("optimizer");
  });
  s.micro_step += static_cast<int64_t>(micro_batches.size());
  if (s.local_count < W) {
    // A process group: every process learns every micro-batch's loss (each nonzero on exactly one rank, so
    // the sum is exact) and whether any process was asked to stop, so all stop after the same step.
    std::vector<float> values(losses.begin(), losses.end());
    values.push_back(stop_requested() ? 1.0f : 0.0f);
    s.sum_over_processes(values);
    for (size_t i = 0; i < losses.size(); ++i) losses[i] = values[i];
    s.group_stop = values.back() > 0;
  }
  double loss_sum = 0;
  for (double l : losses) loss_sum += l;
  record.loss = loss_sum / static_cast<double>(micro_batches.size());
  // Every rank computes the same norm and overflow verdict.
  record.grad_norm = results[static_cast<size_t>(s.first_rank)].grad_norm;
  record.skipped = !results[static_cast<size_t>(s.first_rank)].applied;
  // fp16 skips an overflowing step and lowers its loss scale; in f32 and bf16 a gradient norm that is not
  // finite has already been applied to the weights.
  ZT_CHECK(std::isfinite(record.grad_norm) || s.compute == DType::f16, "training diverged at optimizer step ",
           s.optimizer_step + 1, ": its gradient norm is ", record.grad_norm, " (loss ", record.loss, ")",
           s.last_finite_step());
  StepProfile::global().mark("optimizer");
  ++s.optimizer_step;
  if (!record.skipped) ++s.scheduler_step;
  s.steps.push_back(record);
  if (s.step_callback) s.step_callback(record);
  return record;
}

EvalResult MrpcTrainer::evaluate(const data::EncodedDataset& dataset) {
  Impl& s = *impl_;
  // A delayed CPU update (--offload_delayed_update) lands first; collective, so on every rank.
  s.run_ranks([&](int r) { s.at(r).engine->finish_delayed_update(); });
  EvalResult result;
  data::Batcher batcher = make_eval_batcher(dataset, s.config.per_device_eval_batch_size);
  data::Batch batch;
  std::vector<int64_t> labels;
  std::vector<double> targets;
  const bool regression = s.model_config.is_regression();
  double loss_sum = 0;
  int64_t labeled = 0;
  // Stage 3 gathers parameters inside forward (collectives), so every rank runs the evaluation; below stage
  // 3 rank 0 alone does. Rank 0's logits are the result.
  const bool all_ranks = s.config.zero.stage == 3;
  while (batcher.next(batch)) {
    float loss = 0;
    std::vector<float> host;
    Shape logits_shape;
    s.run_ranks([&](int r) {
      if (r != 0 && !all_ranks) return;
      RankState& rank = s.at(r);
      const float rank_loss = rank.model->forward(rank.engine->parameter_handles(), s.upload(rank, batch),
                                                  {.training = false}, rank.engine.get());
      if (r != 0) return;
      loss = rank_loss;
      const Tensor logits = rank.model->logits();
      logits_shape = logits.shape();
      host.resize(static_cast<size_t>(logits.numel()));
      copy_tensor(logits, Tensor(host.data(), logits.shape(), DType::f32));
    });
    if (!s.main_process()) continue;  // rank 0's process holds the logits; the others only joined
    int64_t batch_labeled = 0;
    if (regression) {
      // The head's single logit is the predicted score; NaN targets are unlabeled rows.
      for (int64_t i = 0; i < logits_shape[0]; ++i) result.scores.push_back(host[static_cast<size_t>(i)]);
      targets.insert(targets.end(), batch.scores.begin(), batch.scores.end());
      batch_labeled =
          std::count_if(batch.scores.begin(), batch.scores.end(), [](float t) { return !std::isnan(t); });
    } else {
      for (int64_t p : data::argmax_predictions(Tensor(host.data(), logits_shape, DType::f32))) {
        result.predictions.push_back(p);
      }
      labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
      batch_labeled =
          std::count_if(batch.labels.begin(), batch.labels.end(), [](int64_t l) { return l >= 0; });
    }
    loss_sum += static_cast<double>(loss) * batch_labeled;  // the batch loss is a mean over its labeled rows
    labeled += batch_labeled;
  }
  result.examples = static_cast<int64_t>(regression ? result.scores.size() : result.predictions.size());
  if (labeled > 0) {
    result.loss = loss_sum / static_cast<double>(labeled);
    if (!regression) {
      const data::GlueMetrics metrics = data::glue_metrics(result.predictions, labels);
      result.accuracy = metrics.accuracy;
      result.f1 = metrics.f1;
    }
    if (s.task && labeled == result.examples) {
      result.metrics = data::task_metrics(*s.task, {.classes = result.predictions, .scores = result.scores},
                                          {.classes = labels, .scores = targets});
    } else if (!regression) {
      result.metrics = {{"accuracy", result.accuracy}, {"f1", result.f1}};
    }
  }
  return result;
}

std::vector<EpochRecord> MrpcTrainer::train() {
  Impl& s = *impl_;
  if (!s.train_set) s.load_data();
  const TrainConfig& c = s.config;
  // The first SIGINT/SIGTERM finishes the current optimizer step, writes a checkpoint and returns.
  ScopedStopSignals stop_signals("train_mrpc");
  // Held until train() returns: Note [The output directory's lock] (app/run/run_directory.h).
  OutputDirLock output_dir_lock;
  if (!c.output_dir.empty() && s.main_process()) {
    // A directory of another run is refused unless --overwrite_output_dir or resuming that run; temp files
    // of dead writers are removed. (In a process group process 0 alone; the others wait below.)
    const std::string checkpoint =
        c.resume_from_checkpoint.empty() ? std::string() : resolve_checkpoint_path(c.resume_from_checkpoint);
    OutputDirReport report = prepare_output_dir(c.output_dir, c.overwrite_output_dir,
                                                !c.resume_from_checkpoint.empty(), checkpoint);
    output_dir_lock = std::move(report.lock);
    for (const std::string& f : report.removed_stale_temp_files)
      std::printf("removed %s (left by a writer that died)\n", f.c_str());
    for (const std::string& f : report.removed_for_overwrite)
      std::printf("removed %s (--overwrite_output_dir)\n", f.c_str());
  }
  if (s.local_count < s.world) s.comms.front()->barrier();
  if (!c.resume_from_checkpoint.empty() && s.optimizer_step == 0) load_checkpoint(c.resume_from_checkpoint);
  const std::string model_path =
      c.output_dir.empty() ? "" : (std::filesystem::path(c.output_dir) / "model.h5").string();
  if (!s.resumed_from.empty() && s.optimizer_step >= c.num_training_steps) {
    // model.h5 is the run's last output: with it written the run is finished, and nothing is trained,
    // evaluated or written (metrics.jsonl stays as it is). Without it the attempt that reached the last
    // step died before its final evaluation and outputs, which this one writes.
    if (model_path.empty() || std::filesystem::exists(model_path)) {
      std::printf("the run is finished: %s is at optimizer step %lld of %lld%s; nothing to do\n",
                  s.resumed_from.c_str(), static_cast<long long>(s.optimizer_step),
                  static_cast<long long>(c.num_training_steps),
                  model_path.empty() ? "" : str(" and ", model_path, " is written").c_str());
      std::fflush(stdout);
      return {};
    }
    std::printf(
        "training is complete at optimizer step %lld; writing the run's final evaluation and outputs\n",
        static_cast<long long>(s.optimizer_step));
  }
  std::vector<EpochRecord> epochs;
  // metrics.jsonl and, with --with_tracking, TensorBoard (app/tracking/run_tracker.h). A resumed run
  // drops what a killed run logged after its checkpoint and continues the same TensorBoard run. The epoch
  // the checkpoint is in is logged again (also when the checkpoint holds every step: that epoch still ends
  // with its evaluation below), so only the epochs before it keep their lines.
  tracking::RunTracker tracker({.output_dir = s.main_process() ? c.output_dir : std::string(),
                                .tensorboard = c.with_tracking,
                                .resumed = s.optimizer_step > 0,
                                .resumed_step = s.optimizer_step,
                                .finished_epochs = s.train_batcher->position().epoch});
  tracker.log_text("config", c.describe(), s.optimizer_step);
  StepLogWindow log_window;
  // Writes a checkpoint for a stop request (unless this step's was just written) and says how to resume.
  auto stop_now = [&](bool checkpoint_written) {
    if (!c.output_dir.empty() && !checkpoint_written) save_checkpoint(c.output_dir);
    std::printf("stopped by signal %d after optimizer step %lld%s\n", stop_signal(),
                static_cast<long long>(s.optimizer_step),
                c.output_dir.empty() ? " (no --output_dir: nothing saved)"
                                     : str("; resume with --resume_from_checkpoint ", c.output_dir).c_str());
    std::fflush(stdout);
  };
  if (!c.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(c.output_dir, error);
    ZT_CHECK(!error, "--output_dir ", c.output_dir, ": cannot create it (", error.message(), ")");
  }
  // Note [Optimizer steps of an epoch] (optim/epoch_steps.h): the resolved step counts come from the same
  // rule, so the loop ends each epoch after the steps the schedule was planned for.
  const EpochSteps plan = s.epoch_plan();
  const int64_t full_window = plan.world_size * plan.accumulation;
  std::vector<data::Batch> window;
  for (int64_t epoch = s.train_batcher->position().epoch; epoch < c.num_train_epochs; ++epoch) {
    // Past the last step no epoch starts; one under way (resumed from a checkpoint of its last step) still
    // ends with its evaluation, as it does in an uninterrupted run.
    const bool under_way =
        s.train_batcher->position().epoch == epoch && s.train_batcher->position().batch > 0;
    if (s.optimizer_step >= c.num_training_steps && !under_way) break;
    if (s.train_batcher->position().epoch != epoch) s.train_batcher->set_epoch(epoch);
    const auto start = Clock::now();
    Progress progress(str("epoch ", epoch + 1, "/", c.num_train_epochs),
                      std::min(plan.used_micro_batches() * c.per_device_train_batch_size,
                               static_cast<int64_t>(s.train_set->size())));
    progress.update(std::min(s.train_batcher->position().batch, plan.used_micro_batches()) *
                    c.per_device_train_batch_size);
    int64_t samples = 0;
    // Windows start at multiples of W·k micro-batches (checkpoints are written between steps).
    while (s.optimizer_step < c.num_training_steps &&
           s.train_batcher->position().batch < plan.used_micro_batches()) {
      const int64_t window_size = plan.window(s.train_batcher->position().batch / full_window);
      for (int64_t i = 0; i < window_size; ++i) {
        data::Batch batch;
        ZT_CHECK(s.train_batcher->next(batch), "the epoch ended after ", s.train_batcher->position().batch,
                 " micro-batches; its plan has ", plan.used_micro_batches());
        window.push_back(std::move(batch));
      }
      const StepRecord record = train_step(window);
      int64_t window_samples = 0;
      for (const data::Batch& b : window) window_samples += b.batch_size;
      samples += window_samples;
      window.clear();
      s.epoch_loss_sum += record.loss;
      ++s.epoch_optimizer_steps;
      log_window.add(record, window_samples);
      if (s.optimizer_step % c.log_every == 0) {
        tracker.log_step(s.optimizer_step, s.step_scalars(record, log_window));
        log_window = StepLogWindow{};
      }
      ProgressMetrics shown = {{"loss", record.loss}, {"lr", record.lr}};
      shown.insert(shown.end(), s.shown_wall_clock.begin(), s.shown_wall_clock.end());
      progress.update(window_samples, shown);
      if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::steps &&
          s.optimizer_step % c.checkpointing_steps.every == 0 && !c.output_dir.empty()) {
        save_checkpoint(c.output_dir);
        if (s.should_stop()) {
          stop_now(true);
          return epochs;
        }
      }
      if (s.should_stop()) {
        stop_now(false);
        return epochs;
      }
    }
    progress.finish();
    EpochRecord record;
    record.epoch = epoch;
    record.seconds = seconds_since(start);
    record.train_loss =
        s.epoch_optimizer_steps > 0 ? s.epoch_loss_sum / static_cast<double>(s.epoch_optimizer_steps) : 0;
    s.epoch_loss_sum = 0;
    s.epoch_optimizer_steps = 0;
    record.train_samples_per_s = samples / std::max(record.seconds, 1e-9);
    // Every evaluation split (MNLI: matched, then mismatched with keys suffixed _mm, as run_glue's).
    std::string shown_metrics;
    std::vector<tracking::Scalar> eval_scalars;
    for (size_t k = 0; k < s.eval_sets.size(); ++k) {
      const EvalResult eval = evaluate(*s.eval_sets[k]);
      if (k == 0) record.eval = eval;
      const std::string suffix = s.task->eval[k].key_suffix;
      for (const auto& [name, value] : eval.metrics) {
        shown_metrics += str("dev_", name, suffix, " ", format_fixed4(value), "  ");
        eval_scalars.push_back({"eval_" + name + suffix, value});
      }
      shown_metrics += str("dev_loss", suffix, " ", format_fixed4(eval.loss), "  ");
      eval_scalars.push_back({"eval_loss" + suffix, eval.loss});
      record.eval_splits.push_back(eval);
    }
    // The weights of the last step are checked here only: a step whose update overflowed them has finite
    // loss and gradient norm itself. Nothing more is written from them (no model.h5, no MRPC.tsv). In a
    // process group process 0 evaluates; every process learns its verdict, so all stop together.
    if (s.local_count < s.world) {
      std::vector<float> diverged = {std::isfinite(record.eval.loss) ? 0.0f : 1.0f};
      s.sum_over_processes(diverged);
      if (diverged.front() > 0) record.eval.loss = std::numeric_limits<double>::quiet_NaN();
    }
    ZT_CHECK(std::isfinite(record.eval.loss), "training diverged at optimizer step ", s.optimizer_step,
             ": the evaluation of its weights on ", s.task->eval.front().rows.source, " gives loss ",
             record.eval.loss,
             s.steps.empty() ? std::string()
                             : str(" (the step had loss ", s.steps.back().loss, ", gradient norm ",
                                   s.steps.back().grad_norm, " and learning rate ", s.steps.back().lr, ")"),
             "; model.h5 and the predictions are not written");
    record.optimizer_steps = s.optimizer_step;
    epochs.push_back(record);
    std::printf("epoch %lld: train_loss %.4f  %s%.1f samples/s  %.1f s\n", static_cast<long long>(epoch + 1),
                record.train_loss, shown_metrics.c_str(), record.train_samples_per_s, record.seconds);
    if (s.compute == DType::f16) {
      std::printf("  fp16 loss scale %g, %lld overflow-skipped steps so far\n", s.local_rank().scaler.scale(),
                  static_cast<long long>(s.local_rank().scaler.skipped_steps()));
    }
    std::fflush(stdout);
    std::vector<tracking::Scalar> epoch_scalars = {{"train_loss", record.train_loss}};
    epoch_scalars.insert(epoch_scalars.end(), eval_scalars.begin(), eval_scalars.end());
    epoch_scalars.push_back({"train_samples_per_s", record.train_samples_per_s});
    epoch_scalars.push_back({"epoch_seconds", record.seconds});
    if (s.compute == DType::f16) {
      epoch_scalars.push_back({"loss_scale", s.local_rank().scaler.scale()});
      epoch_scalars.push_back({"skipped_steps", static_cast<double>(s.local_rank().scaler.skipped_steps())});
    }
    tracker.log_epoch(epoch + 1, s.optimizer_step, epoch_scalars);
    if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::epoch && !c.output_dir.empty()) {
      s.train_batcher->set_epoch(epoch + 1);  // resume starts the next epoch, not this one's evaluation again
      save_checkpoint(c.output_dir);
    }
  }
  for (size_t k = 0; k < s.test_sets.size(); ++k) {
    const data::TaskSplit& split = s.task->test[k];
    const EvalResult test = evaluate(*s.test_sets[k]);
    if (!test.metrics.empty() && s.task->task_name == "mrpc") {  // the shipped test.tsv is GLUE's labeled set
      std::printf("test: accuracy %.4f  F1 %.4f  (%lld examples)\n", test.accuracy, test.f1,
                  static_cast<long long>(test.examples));
    } else if (!test.metrics.empty()) {
      std::string shown;
      for (const auto& [name, value] : test.metrics) shown += str(name, " ", format_fixed4(value), "  ");
      std::printf("%s: %s(%lld examples)\n", split.name.c_str(), shown.c_str(),
                  static_cast<long long>(test.examples));
    }
    if (!c.output_dir.empty() && s.main_process()) {
      data::write_task_submission(c.output_dir, *s.task, split,
                                  {.classes = test.predictions, .scores = test.scores});
      std::printf("GLUE test predictions: %s\n",
                  (std::filesystem::path(c.output_dir) / split.submission).string().c_str());
    }
  }
  // Written last: a model.h5 says the run finished (a resume of it has nothing to do).
  if (!model_path.empty()) {
    // Collective, tensor by tensor into the file: the host holds one tensor, not a copy of the model.
    std::unique_ptr<ModelFileWriter> writer;
    if (s.main_process()) writer = std::make_unique<ModelFileWriter>(model_path, s.model_config);
    std::vector<float> values;
    s.run_ranks([&](int r) {
      ZeroEngine::TensorSink take;
      if (r == 0 && writer) {
        take = [&](size_t k, const Tensor& on_device) {
          values.resize(static_cast<size_t>(on_device.numel()));
          const Tensor host(values.data(), on_device.shape(), DType::f32);
          copy_tensor(on_device, host);
          writer->write(s.table.entries()[k].name, host);
        };
      }
      s.at(r).engine->gather_full_master(take);
    });
    if (writer) writer->commit();
    std::printf("model: %s (load with --model_name_or_path, export with convert_hf export)\n",
                model_path.c_str());
  }
  return epochs;
}

void MrpcTrainer::save_checkpoint(const std::string& output_dir) {
  Impl& s = *impl_;
  TrainingState state;
  state.optimizer_step = s.optimizer_step;
  state.micro_step = s.micro_step;
  state.adam_step = s.local_rank().engine->adamw().step_count();
  state.scheduler_step = s.scheduler_step;
  state.loss_scaler = s.local_rank().scaler.state();
  if (s.train_batcher) state.next_batch = s.train_batcher->position();
  state.seed = s.config.seed;
  state.last_lr = s.steps.empty() ? 0.0 : s.steps.back().lr;
  state.epoch_loss_sum = s.epoch_loss_sum;
  state.epoch_optimizer_steps = s.epoch_optimizer_steps;
  const std::string text = s.config.describe();
  std::string path;
  if (s.config.zero.stage == 0) {
    // Every rank holds the whole state: rank 0 writes the single-file format (the fp32 master is written
    // as the params group in f32 runs; a 16-bit copy is re-derived from the master on load).
    path = checkpoint_path(output_dir, s.optimizer_step);
    Arena master = s.consolidated_parameters();
    Arena m("adam_m (host)", s.table.layout(DType::f32)), v("adam_v (host)", s.table.layout(DType::f32));
    ZeroEngine& engine = *s.local_rank().engine;
    for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
      const Tensor tm = m.tensor(engine.tensor_name(piece.tensor)),
                   tv = v.tensor(engine.tensor_name(piece.tensor));
      engine.read_state(1, piece, {static_cast<float*>(tm.data()), static_cast<size_t>(piece.numel)});
      engine.read_state(2, piece, {static_cast<float*>(tv.data()), static_cast<size_t>(piece.numel)});
    }
    if (s.main_process())
      save_training_checkpoint(path, s.model_config, s.table, {master, master, m, v}, state, text);
    if (s.local_count < s.world) s.comms.front()->barrier();  // the file exists for every process after this
  } else {
    path = sharded_checkpoint_path(output_dir, s.optimizer_step);
    try {
      s.run_ranks([&](int r) {
        RankState& rank = s.at(r);
        save_sharded_checkpoint(path, *rank.engine, *rank.comm, s.model_config, state, text);
      });
    } catch (...) {
      if (s.main_process()) remove_unfinished_sharded_checkpoint(path);
      throw;
    }
  }
  ZT_LOG(info) << "checkpoint: " << path << " (step " << s.optimizer_step << ")";
}

void MrpcTrainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  const std::string file = resolve_checkpoint_path(path);
  // Note [Resuming with changed settings] (app/run/resume_config.h): before anything is loaded, a change that
  // makes the rest another run is refused; the others are said.
  const CheckpointSummary summary = read_checkpoint_summary(file);
  for (const std::string& line : check_resume_config(file, summary.training_config, s.config.describe()))
    std::printf("%s\n", line.c_str());
  if (!s.train_set) s.load_data();
  std::vector<TrainingState> states(static_cast<size_t>(s.world));
  s.run_ranks([&](int r) {
    states[static_cast<size_t>(r)] = load_engine_checkpoint(file, *s.at(r).engine, s.model_config);
  });
  const TrainingState& state = states[static_cast<size_t>(s.first_rank)];
  ZT_CHECK(state.seed == s.config.seed, "checkpoint ", file, " was trained with --seed ", state.seed,
           "; resuming with --seed ", s.config.seed, " would change the data order and dropout masks");
  s.optimizer_step = state.optimizer_step;
  s.micro_step = state.micro_step;
  s.scheduler_step = state.scheduler_step;
  s.epoch_loss_sum = state.epoch_loss_sum;
  s.epoch_optimizer_steps = state.epoch_optimizer_steps;
  for (RankState& rank : s.ranks) {
    rank.engine->adamw().set_step_count(state.adam_step);
    if (s.compute == DType::f16) rank.scaler.load_state(state.loss_scaler);
  }
  s.train_batcher->seek(state.next_batch);
  s.resumed_from = file;
  std::printf("resumed from %s: step %lld, epoch %lld, batch %lld\n", file.c_str(),
              static_cast<long long>(state.optimizer_step),
              static_cast<long long>(state.next_batch.epoch + 1),
              static_cast<long long>(state.next_batch.batch));
}

}  // namespace zt::optim
