// MrpcTrainer's setup: the ranks (threads or a process group), their engines and models, the initial
// parameters and the task's data; the trainer's accessors.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <span>
#include <string_view>
#include <thread>

#include "app/config/engine_options.h"
#include "app/trainer/trainer.h"
#include "app/trainer/trainer_impl.h"
#include "model/init.h"
#include "model/model_file.h"
#include "optim/adamw.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/step_profile.h"

namespace zt::optim {

namespace {

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

}  // namespace

MrpcTrainer::Impl::Impl(TrainConfig c, DebertaConfig mc, std::unique_ptr<Communicator> process_group)
    : config(std::move(c)),
      model_config(trainer_internal::checkpointed_if_asked(std::move(mc), config)),
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
    reports.wall_clock =
        std::make_unique<WallClockBreakdown>(/*synchronize_device=*/device == DeviceKind::cuda);
  // A rank stuck longer than --collective_timeout in a collective aborts the group, naming the ranks that
  // never arrived.
  const InProcessGroupOptions group{.timeout =
                                        std::chrono::milliseconds(config.collective_timeout_seconds * 1000)};
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
    const int64_t live =
        partition.units().front().numel + partition.units().back().numel + 2 * partition.largest_layer_unit();
    ZT_CHECK(config.zero.stage3_max_live_parameters >= live, "zero_optimization.stage3_max_live_parameters ",
             config.zero.stage3_max_live_parameters, " is below what stage 3 keeps gathered at once (", live,
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
      rank.batch_arena =
          std::make_unique<Arena>("batch", batch_layout(max_batch(), config.max_length),
                                  trainer_internal::state_arena(device, MemoryCategory::activations, false));
    rank.scaler = compute == DType::f16 ? LossScaler(config.fp16) : LossScaler::disabled();
  });
  initialize_parameters();
}

MrpcTrainer::Impl::~Impl() {
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

void MrpcTrainer::Impl::run_ranks(const std::function<void(int)>& fn) {
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

void MrpcTrainer::Impl::check_same_config_on_every_process() {
  // FNV-1a over the text, split into 16-bit pieces so each is exact in an f32 (the collectives' dtype).
  uint64_t hash = 1469598103934665603ull;
  for (const unsigned char c : config.describe()) hash = (hash ^ c) * 1099511628211ull;
  std::vector<float> mine(4);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>((hash >> (16 * i)) & 0xffff);
  const auto n = static_cast<int64_t>(mine.size());
  Arena buffer("config fingerprints", trainer_internal::flat_f32_layout(n * (world + 1)),
               trainer_internal::state_arena(device, MemoryCategory::communication, false));
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

void MrpcTrainer::Impl::initialize_parameters() {
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

void MrpcTrainer::Impl::load_data() {
  // The input.tokenizer belongs to the model: spm.model beside a converted model, else the embedded
  // default's.
  std::string spm = std::string(ZT_DATA_DIR) + "/spm8k.model";
  if (!config.model_name_or_path.empty()) {
    const auto beside =
        std::filesystem::path(resolve_model_path(config.model_name_or_path)).parent_path() / "spm.model";
    if (std::filesystem::exists(beside)) spm = beside.string();
  }
  input.tokenizer = std::make_unique<data::Tokenizer>(spm);
  ZT_CHECK(input.tokenizer->vocab_size() <= model_config.vocab_size, "input.tokenizer ", spm, " has ",
           input.tokenizer->vocab_size(), " pieces but the model's vocabulary holds ",
           model_config.vocab_size);
  // Each input is read once: rows given by set_train_rows / set_task_data are not read again (a FIFO has
  // them only once).
  if (!input.task) {
    data::TaskDataRequest request = task_data_request(config, model_config);
    if (input.given_train_rows) request.train_rows = std::move(*input.given_train_rows);
    input.task = data::load_task_data(request);
    if (main_process())
      for (const std::string& note : input.task->notes) std::printf("%s\n", note.c_str());
  }
  input.given_train_rows.reset();
  data::require_labels(input.task->train, "--train_file");
  for (const data::TaskSplit& split : input.task->eval) data::require_labels(split.rows, "--validation_file");
  ZT_CHECK(input.task->num_labels() == model_config.num_labels &&
               input.task->regression == model_config.is_regression(),
           input.task->display_name(), " has ",
           input.task->regression ? "a regression target" : str(input.task->num_labels(), " labels"),
           " but the model's head has ", model_config.num_labels,
           model_config.is_regression() ? " (regression)" : "",
           " (model_config_for_task builds the head a input.task needs)");
  input.train_set =
      std::make_unique<data::EncodedDataset>(input.task->train, *input.tokenizer, config.max_length);
  for (const data::TaskSplit& split : input.task->eval)
    input.eval_sets.push_back(
        std::make_unique<data::EncodedDataset>(split.rows, *input.tokenizer, config.max_length));
  for (const data::TaskSplit& split : input.task->test)
    input.test_sets.push_back(
        std::make_unique<data::EncodedDataset>(split.rows, *input.tokenizer, config.max_length));
  data::BatcherOptions options;
  options.batch_size = config.per_device_train_batch_size;
  options.shuffle = true;
  options.seed = config.seed;
  options.padding = config.pad_to_max_length ? data::Padding::max_length : data::Padding::none;
  input.train_batcher = std::make_unique<data::Batcher>(*input.train_set, options);
}

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
  return impl_->reports.steps;
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

double MrpcTrainer::offloaded_update_ms() const {
  return impl_->ranks.front().engine->offloaded_update_ms();
}

void MrpcTrainer::reset_memory_peaks() {
  Impl& s = *impl_;
  if (s.device != DeviceKind::cuda) return;
  for (RankState& rank : s.ranks) (rank.gpu ? rank.gpu->allocator() : device_allocator()).reset_peaks();
}

void MrpcTrainer::set_train_rows(data::GlueDataset rows) {
  impl_->input.given_train_rows = std::move(rows);
}

void MrpcTrainer::set_task_data(data::TaskData task) {
  impl_->input.task = std::move(task);
}

void MrpcTrainer::set_step_callback(std::function<void(const StepRecord&)> callback) {
  impl_->reports.callback = std::move(callback);
}

}  // namespace zt::optim
