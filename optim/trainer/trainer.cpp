#include "optim/trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>

#include "data/glue_metrics.h"
#include "data/glue_tsv.h"
#include "data/tokenizer.h"
#include "kernels/elementwise.h"
#include "model/deberta.h"
#include "model/init.h"
#include "model/model_file.h"
#include "optim/adamw.h"
#include "optim/checkpoint.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "optim/run_directory.h"
#include "optim/zero/engine.h"
#include "optim/zero/sharded_checkpoint.h"
#include "optim/zero/swapped_host_optimizer_store.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/progress.h"
#include "runtime/signals.h"
#include "runtime/step_profile.h"

#include <exception>
#include <thread>

#ifdef ZT_WITH_CUDA
#endif

namespace zt::optim {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// DeepSpeed's schedules (runtime/lr_schedules.py semantics, documented in train_config.h), s = step.
double deepspeed_lr_at(const DeepSpeedSchedule& d, double optimizer_lr, int64_t s) {
  const double W = static_cast<double>(std::max<int64_t>(d.warmup_num_steps, 1));
  auto warmup_gamma = [&] {
    return d.warmup_log ? std::log(static_cast<double>(s) + 1.0) / std::log(W) : static_cast<double>(s) / W;
  };
  switch (d.type) {
    case DeepSpeedSchedule::Type::warmup_lr:
      if (s < d.warmup_num_steps)
        return d.warmup_min_lr + (d.warmup_max_lr - d.warmup_min_lr) * warmup_gamma();
      return d.warmup_max_lr;
    case DeepSpeedSchedule::Type::warmup_decay_lr: {
      if (s < d.warmup_num_steps)
        return d.warmup_min_lr + (d.warmup_max_lr - d.warmup_min_lr) * warmup_gamma();
      const double T = static_cast<double>(d.total_num_steps);
      const double frac = std::max(0.0, (T - static_cast<double>(s)) / std::max(1.0, T - W));
      return d.warmup_max_lr * frac;
    }
    case DeepSpeedSchedule::Type::warmup_cosine_lr: {
      if (s < d.warmup_num_steps) {
        const double ratio = d.warmup_min_ratio + (1.0 - d.warmup_min_ratio) * warmup_gamma();
        return optimizer_lr * ratio;
      }
      const double T = static_cast<double>(d.total_num_steps);
      const double progress = std::clamp((static_cast<double>(s) - W) / std::max(1.0, T - W), 0.0, 1.0);
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
      return optimizer_lr * (d.cos_min_ratio + (1.0 - d.cos_min_ratio) * cosine);
    }
  }
  ZT_FAIL("unknown DeepSpeed schedule");
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

DebertaConfig model_config_for_run(const TrainConfig& config, int64_t num_labels) {
  // The embedded default: the full xlarge architecture (random init) on the GPU, a small model on the CPU.
  if (config.model_name_or_path.empty())
    return config.device == DeviceChoice::cuda ? deberta_v2_xlarge_config() : deberta_small_cpu_config();
  DebertaConfig model = ModelFile(resolve_model_path(config.model_name_or_path)).config();
  if (model.num_labels != num_labels) {
    ZT_CHECK(
        config.ignore_mismatched_sizes, "--model_name_or_path ", config.model_name_or_path, " has ",
        model.num_labels, " labels but MRPC has ", num_labels,
        ": pass --ignore_mismatched_sizes to re-initialize the classifier (or convert with convert_hf import "
        "--num_labels 2)");
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

std::string resolve_model_path(const std::string& file_or_dir) {
  const std::filesystem::path path(file_or_dir);
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

data::Batcher make_eval_batcher(const data::EncodedDataset& dataset, int64_t batch_size) {
  data::BatcherOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.drop_last = false;
  return data::Batcher(dataset, options);
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

// One rank of the data-parallel group: its communicator, optimizer-state engine, model activations and
// batch buffer. In-process ranks are threads of this process (world_size > 1); rank r's state is built,
// used and destroyed on rank r's thread only.
struct RankState {
  Communicator* comm = nullptr;
  std::unique_ptr<ZeroEngine> engine;
  std::unique_ptr<DebertaForSequenceClassification> model;
  std::unique_ptr<Arena> batch_arena;          // GPU: the current batch (ids, mask [B, L], labels [B])
  LossScaler scaler = LossScaler::disabled();  // identical on every rank (they see the same overflow)
};

struct MrpcTrainer::Impl {
  TrainConfig config;
  DebertaConfig model_config;
  ParameterTable table;
  DeviceKind device;
  DType compute;  // storage dtype of the model's parameters and activations
  int world;
  // --host_memory_limit: every rank's engine charges its offload buffers; declared before the ranks so that
  // it outlives their engines.
  HostMemoryBudget host_budget;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<RankState> ranks;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::EncodedDataset> train_set, dev_set, test_set;
  std::unique_ptr<data::Batcher> train_batcher;
  int64_t optimizer_step = 0;  // optimizer steps taken so far, fp16 overflow-skipped ones included
  int64_t scheduler_step = 0;  // learning-rate schedule steps: applied updates only (DeepSpeed)
  int64_t micro_step = 0;      // micro-batches consumed so far over all ranks (keys the dropout masks)
  std::vector<StepRecord> steps;
  std::function<void(const StepRecord&)> step_callback;

  Impl(TrainConfig c, DebertaConfig mc)
      : config(std::move(c)),
        model_config(std::move(mc)),
        table(model_config),
        device(training_device(config)),
        compute(compute_dtype_for_run(config)),
        world(std::max(1, config.world_size)),
        host_budget(config.host_memory_limit) {
    ZT_CHECK(config.resolved, "MrpcTrainer needs a resolved TrainConfig");
    ZT_CHECK(
        world == 1 || device == DeviceKind::cpu, "--world_size ", world,
        " on the GPU: in-process ranks over one GPU are not wired into the trainer yet; use --world_size 1 "
        "(any ZeRO stage) or --device cpu");
    // A rank stuck longer than --collective_timeout in a collective aborts the group, naming the ranks that
    // never arrived.
    comms = make_in_process_group(
        world, {.timeout = std::chrono::milliseconds(config.collective_timeout_seconds * 1000)});
    // --debug_collectives: ranks compare each collective (op, dtype, size) before running it and fail with
    // both sequences instead of hanging.
    if (config.debug_collectives)
      for (auto& comm : comms) comm = make_checked_communicator(std::move(comm));
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
    ranks.resize(static_cast<size_t>(world));
    // Initialize (and load) on the host; every rank keeps its part.
    Arena staging("parameters (host)", table.layout(DType::f32));
    init_parameters(model_config, table, staging, config.seed);
    if (!config.model_name_or_path.empty()) load_pretrained(staging);
    run_ranks([&](int r) {
      RankState& rank = ranks[static_cast<size_t>(r)];
      rank.comm = comms[static_cast<size_t>(r)].get();
      rank.engine = std::make_unique<ZeroEngine>(
          table, model_config, *rank.comm,
          ZeroEngineOptions{.stage = config.zero.stage,
                            .device = device,
                            .compute = compute,
                            .reduce_scatter = config.zero.reduce_scatter,
                            .hyper = AdamWHyper{config.learning_rate, config.adam_beta1, config.adam_beta2,
                                                config.adam_epsilon, config.weight_decay},
                            .max_grad_norm = config.max_grad_norm,
                            .offload = {.optimizer = config.zero.offload_optimizer.enabled,
                                        .param = config.zero.offload_param.enabled,
                                        .pipelined = true,
                                        .delayed_update = config.offload_delayed_update},
                            .pin_memory = config.zero.offload_optimizer.pin_memory,
                            .ranks_sharing_host = world,
                            .host_memory_limits = std::nullopt,
                            .disk = zero_disk_tier(config),
                            .host_budget = &host_budget});
      rank.model = std::make_unique<DebertaForSequenceClassification>(model_config, max_batch(),
                                                                      config.max_length, device, compute);
      if (device == DeviceKind::cuda)
        rank.batch_arena = std::make_unique<Arena>("batch", batch_layout(max_batch(), config.max_length),
                                                   state_arena(device, MemoryCategory::activations, false));
      rank.scaler = compute == DType::f16 ? LossScaler(config.fp16) : LossScaler::disabled();
      rank.engine->load_full_parameters(staging);
    });
  }

  ~Impl() {
    // Rank state is torn down on the rank threads that own it.
    if (world > 1) run_ranks([&](int r) { ranks[static_cast<size_t>(r)] = RankState{}; });
  }

  // Runs fn(rank) for every rank: inline for one rank, else on one thread per rank. A rank that throws
  // aborts the group (the others leave their collectives with "group aborted"); the first error that is not
  // such a consequence is rethrown.
  void run_ranks(const std::function<void(int)>& fn) {
    if (world == 1) {
      fn(0);
      return;
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          AbortGroupOnException guard(*comms[static_cast<size_t>(r)]);
          fn(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
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

  RankState& rank0() { return ranks.front(); }

  int64_t max_batch() const {
    return std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size);
  }

  // The batch as the model wants it: views of the host batch on the CPU, a copy in the rank's batch arena on
  // the GPU.
  DebertaBatch upload(RankState& rank, data::Batch& batch) {
    if (device == DeviceKind::cpu) {
      return {batch.input_ids_tensor(), batch.attention_mask_tensor(), batch.labels_tensor()};
    }
    auto slot = [&](const char* name, Shape shape) {
      return Tensor(rank.batch_arena->tensor(name).data(), shape, DType::i64, DeviceKind::cuda);
    };
    DebertaBatch out{slot("input_ids", {batch.batch_size, batch.seq_len}),
                     slot("attention_mask", {batch.batch_size, batch.seq_len}),
                     slot("labels", {batch.batch_size})};
    copy_tensor(batch.input_ids_tensor(), out.input_ids);
    copy_tensor(batch.attention_mask_tensor(), out.attention_mask);
    copy_tensor(batch.labels_tensor(), out.labels);
    return out;
  }

  // The full f32 parameters on the host (collective over the ranks' shards).
  Arena consolidated_parameters() {
    // Zero-filled: the padding between tensors compares equal between runs.
    Arena host("parameters (host)", table.layout(DType::f32), {.zero_fill = true});
    run_ranks(
        [&](int r) { ranks[static_cast<size_t>(r)].engine->gather_full_master(r == 0 ? &host : nullptr); });
    return host;
  }

  // Loads --model_name_or_path over the random init. With --ignore_mismatched_sizes a classifier whose label
  // count differs from the run's is left at its fresh init (HF's N(0, 0.02^2), bias 0); the pooler is kept.
  void load_pretrained(const Arena& into) {
    const ModelFile file(resolve_model_path(config.model_name_or_path));
    const DebertaConfig& stored = file.config();
    for (const ParameterInfo& info : table.entries()) {
      const bool head = info.name.rfind("classifier.", 0) == 0;
      if (head && stored.num_labels != model_config.num_labels) continue;
      file.read_param(info.name, into.tensor(info.name));
    }
    std::printf("loaded %s (%lld tensors)%s\n", file.path().c_str(), static_cast<long long>(table.size()),
                stored.num_labels != model_config.num_labels
                    ? str("; classifier re-initialized for ", model_config.num_labels,
                          " labels (checkpoint had ", stored.num_labels, ")")
                          .c_str()
                    : "");
  }

  double lr_at(int64_t step) const {
    if (config.deepspeed_schedule)
      return deepspeed_lr_at(*config.deepspeed_schedule, config.learning_rate, step);
    return config.hf_schedule().lr_at(step);
  }

  void load_data() {
    // A converted model brings its own spm.model (beside the model file); the default model uses the shipped
    // one.
    std::string spm = (std::filesystem::path(config.data_dir) / "spm8k.model").string();
    if (!config.model_name_or_path.empty()) {
      const auto beside =
          std::filesystem::path(resolve_model_path(config.model_name_or_path)).parent_path() / "spm.model";
      if (std::filesystem::exists(beside)) spm = beside.string();
    }
    tokenizer = std::make_unique<data::Tokenizer>(spm);
    ZT_CHECK(tokenizer->vocab_size() <= model_config.vocab_size, "tokenizer ", spm, " has ",
             tokenizer->vocab_size(), " pieces but the model's vocabulary holds ", model_config.vocab_size);
    train_set = std::make_unique<data::EncodedDataset>(data::read_glue_mrpc_tsv(config.train_file),
                                                       *tokenizer, config.max_length);
    dev_set = std::make_unique<data::EncodedDataset>(data::read_glue_mrpc_tsv(config.validation_file),
                                                     *tokenizer, config.max_length);
    if (!config.test_file.empty() && std::filesystem::exists(config.test_file)) {
      test_set = std::make_unique<data::EncodedDataset>(data::read_glue_mrpc_tsv(config.test_file),
                                                        *tokenizer, config.max_length);
    }
    data::BatcherOptions options;
    options.batch_size = config.per_device_train_batch_size;
    options.shuffle = true;
    options.seed = config.seed;
    options.padding = config.pad_to_max_length ? data::Padding::max_length : data::Padding::none;
    train_batcher = std::make_unique<data::Batcher>(*train_set, options);
  }
};

MrpcTrainer::MrpcTrainer(TrainConfig config, DebertaConfig model_config)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(model_config))) {}

MrpcTrainer::~MrpcTrainer() = default;

void MrpcTrainer::load_parameters(const Arena& host) {
  Impl& s = *impl_;
  ZT_CHECK(host.device() == DeviceKind::cpu && host.bytes() == s.table.layout(DType::f32).total_bytes(),
           "load_parameters: expected a host arena laid out by table().layout(f32)");
  s.run_ranks([&](int r) { s.ranks[static_cast<size_t>(r)].engine->load_full_parameters(host); });
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
  record.loss_scale = s.rank0().scaler.scale();
  StepProfile::global().mark_start();
  s.run_ranks([&](int r) {
    RankState& rank = s.ranks[static_cast<size_t>(r)];
    const float loss_scale =
        static_cast<float>(rank.scaler.scale()) / static_cast<float>(s.config.gradient_accumulation_steps);
    for (int64_t j = 0; j < per_rank; ++j) {
      const size_t i = static_cast<size_t>(j * W + r);
      const DebertaBatch inputs = s.upload(rank, micro_batches[i]);
      const float loss = rank.model->forward(
          rank.engine->parameter_handles(), inputs,
          {.training = true, .seed = s.config.seed, .step = static_cast<uint64_t>(s.micro_step) + i},
          rank.engine.get());
      ZT_CHECK(std::isfinite(loss), "training loss is not finite at optimizer step ", s.optimizer_step,
               " (micro-batch ", s.micro_step + static_cast<int64_t>(i), ", rank ", r, ")");
      rank.engine->begin_backward(j == 0, j + 1 == per_rank);
      rank.model->backward(rank.engine->parameter_handles(), rank.engine->gradient_handles(), loss_scale,
                           rank.engine.get());
      losses[i] = loss;
    }
    results[static_cast<size_t>(r)] = rank.engine->step(record.lr, rank.scaler);
  });
  s.micro_step += static_cast<int64_t>(micro_batches.size());
  double loss_sum = 0;
  for (double l : losses) loss_sum += l;
  record.loss = loss_sum / static_cast<double>(micro_batches.size());
  record.grad_norm = results[0].grad_norm;
  record.skipped = !results[0].applied;
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
  s.run_ranks([&](int r) { s.ranks[static_cast<size_t>(r)].engine->finish_delayed_update(); });
  EvalResult result;
  data::Batcher batcher = make_eval_batcher(dataset, s.config.per_device_eval_batch_size);
  data::Batch batch;
  std::vector<int64_t> labels;
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
      RankState& rank = s.ranks[static_cast<size_t>(r)];
      const float rank_loss = rank.model->forward(rank.engine->parameter_handles(), s.upload(rank, batch),
                                                  {.training = false}, rank.engine.get());
      if (r != 0) return;
      loss = rank_loss;
      const Tensor logits = rank.model->logits();
      logits_shape = logits.shape();
      host.resize(static_cast<size_t>(logits.numel()));
      copy_tensor(logits, Tensor(host.data(), logits.shape(), DType::f32));
    });
    for (int64_t p : data::argmax_predictions(Tensor(host.data(), logits_shape, DType::f32))) {
      result.predictions.push_back(p);
    }
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    const int64_t batch_labeled =
        std::count_if(batch.labels.begin(), batch.labels.end(), [](int64_t l) { return l >= 0; });
    loss_sum += static_cast<double>(loss) * batch_labeled;  // the batch loss is a mean over its labeled rows
    labeled += batch_labeled;
  }
  result.examples = static_cast<int64_t>(result.predictions.size());
  if (labeled > 0) {
    const data::GlueMetrics metrics = data::glue_metrics(result.predictions, labels);
    result.loss = loss_sum / static_cast<double>(labeled);
    result.accuracy = metrics.accuracy;
    result.f1 = metrics.f1;
  }
  return result;
}

std::vector<EpochRecord> MrpcTrainer::train() {
  Impl& s = *impl_;
  if (!s.train_set) s.load_data();
  const TrainConfig& c = s.config;
  // The first SIGINT/SIGTERM finishes the current optimizer step, writes a checkpoint and returns.
  ScopedStopSignals stop_signals("train_mrpc");
  if (!c.output_dir.empty()) {
    // A directory of another run is refused unless --overwrite_output_dir or resuming; temp files of dead
    // writers are removed.
    const OutputDirReport report =
        prepare_output_dir(c.output_dir, c.overwrite_output_dir, !c.resume_from_checkpoint.empty());
    for (const std::string& f : report.removed_stale_temp_files)
      std::printf("removed %s (left by a writer that died)\n", f.c_str());
    for (const std::string& f : report.removed_for_overwrite)
      std::printf("removed %s (--overwrite_output_dir)\n", f.c_str());
  }
  if (!c.resume_from_checkpoint.empty() && s.optimizer_step == 0) load_checkpoint(c.resume_from_checkpoint);
  std::vector<EpochRecord> epochs;
  std::ofstream metrics;
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
    const std::string path = (std::filesystem::path(c.output_dir) / "metrics.jsonl").string();
    metrics.open(path, std::ios::app);
    ZT_CHECK(metrics.good(), "cannot write ", path);
  }
  const int64_t batches_per_epoch = s.train_batcher->batches_per_epoch();
  const int64_t accumulation = c.gradient_accumulation_steps;
  std::vector<data::Batch> window;
  for (int64_t epoch = s.train_batcher->position().epoch; epoch < c.num_train_epochs; ++epoch) {
    if (s.optimizer_step >= c.num_training_steps) break;
    if (s.train_batcher->position().epoch != epoch) s.train_batcher->set_epoch(epoch);
    const auto start = Clock::now();
    Progress progress(str("epoch ", epoch + 1, "/", c.num_train_epochs),
                      batches_per_epoch * c.per_device_train_batch_size);
    progress.update(s.train_batcher->position().batch * c.per_device_train_batch_size);
    double epoch_loss = 0;
    int64_t epoch_steps = 0, samples = 0;
    data::Batch batch;
    while (s.optimizer_step < c.num_training_steps && s.train_batcher->next(batch)) {
      samples += batch.batch_size;
      window.push_back(std::move(batch));
      const bool last_of_epoch = s.train_batcher->position().batch >= batches_per_epoch;
      // A window is `accumulation` micro-batches per rank. At the end of an epoch a window too short to give
      // every rank the same number of micro-batches drops its remainder (DistributedSampler's drop_last).
      if (static_cast<int64_t>(window.size()) < accumulation * s.world && !last_of_epoch) continue;
      if (last_of_epoch && window.size() % static_cast<size_t>(s.world) != 0) {
        for (size_t k = window.size() - window.size() % static_cast<size_t>(s.world); k < window.size(); ++k)
          samples -= window[k].batch_size;
        window.resize(window.size() - window.size() % static_cast<size_t>(s.world));
        if (window.empty()) continue;
      }
      const StepRecord record = train_step(window);
      int64_t window_samples = 0;
      for (const data::Batch& b : window) window_samples += b.batch_size;
      window.clear();
      epoch_loss += record.loss;
      ++epoch_steps;
      progress.update(window_samples, {{"loss", record.loss}, {"lr", record.lr}});
      if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::steps &&
          s.optimizer_step % c.checkpointing_steps.every == 0 && !c.output_dir.empty()) {
        save_checkpoint(c.output_dir);
        if (stop_requested()) {
          stop_now(true);
          return epochs;
        }
      }
      if (stop_requested()) {
        stop_now(false);
        return epochs;
      }
    }
    progress.finish();
    EpochRecord record;
    record.epoch = epoch;
    record.seconds = seconds_since(start);
    record.train_loss = epoch_steps > 0 ? epoch_loss / epoch_steps : 0;
    record.train_samples_per_s = samples / std::max(record.seconds, 1e-9);
    record.eval = evaluate(*s.dev_set);
    record.optimizer_steps = s.optimizer_step;
    epochs.push_back(record);
    std::printf(
        "epoch %lld: train_loss %.4f  dev_accuracy %.4f  dev_f1 %.4f  dev_loss %.4f  %.1f samples/s  %.1f "
        "s\n",
        static_cast<long long>(epoch + 1), record.train_loss, record.eval.accuracy, record.eval.f1,
        record.eval.loss, record.train_samples_per_s, record.seconds);
    if (s.compute == DType::f16) {
      std::printf("  fp16 loss scale %g, %lld overflow-skipped steps so far\n", s.rank0().scaler.scale(),
                  static_cast<long long>(s.rank0().scaler.skipped_steps()));
    }
    std::fflush(stdout);
    if (metrics.is_open()) {
      nlohmann::json line = {{"epoch", epoch + 1},
                             {"step", s.optimizer_step},
                             {"train_loss", record.train_loss},
                             {"eval_accuracy", record.eval.accuracy},
                             {"eval_f1", record.eval.f1},
                             {"eval_loss", record.eval.loss},
                             {"train_samples_per_s", record.train_samples_per_s},
                             {"epoch_seconds", record.seconds}};
      if (s.compute == DType::f16) {
        line["loss_scale"] = s.rank0().scaler.scale();
        line["skipped_steps"] = s.rank0().scaler.skipped_steps();
      }
      metrics << line.dump() << "\n";
      metrics.flush();
    }
    if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::epoch && !c.output_dir.empty()) {
      s.train_batcher->set_epoch(epoch + 1);  // resume starts the next epoch, not this one's evaluation again
      save_checkpoint(c.output_dir);
    }
  }
  if (!c.output_dir.empty()) {
    const std::string path = (std::filesystem::path(c.output_dir) / "model.h5").string();
    const Arena host = s.consolidated_parameters();
    save_model_file(path, s.model_config, s.table, host);
    std::printf("model: %s (load with --model_name_or_path, export with convert_hf export)\n", path.c_str());
  }
  if (s.test_set) {
    const EvalResult test = evaluate(*s.test_set);
    if (test.loss > 0) {  // a labeled test file (the shipped test.tsv is GLUE's labeled test set)
      std::printf("test: accuracy %.4f  F1 %.4f  (%lld examples)\n", test.accuracy, test.f1,
                  static_cast<long long>(test.examples));
    }
    if (!c.output_dir.empty()) {
      std::vector<int64_t> indices(test.predictions.size());
      for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
      const std::string path = (std::filesystem::path(c.output_dir) / "MRPC.tsv").string();
      data::write_glue_submission(path, indices, test.predictions);
      std::printf("GLUE test predictions: %s\n", path.c_str());
    }
  }
  return epochs;
}

void MrpcTrainer::save_checkpoint(const std::string& output_dir) {
  Impl& s = *impl_;
  TrainingState state;
  state.optimizer_step = s.optimizer_step;
  state.micro_step = s.micro_step;
  state.adam_step = s.rank0().engine->adamw().step_count();
  state.scheduler_step = s.scheduler_step;
  state.loss_scaler = s.rank0().scaler.state();
  if (s.train_batcher) state.next_batch = s.train_batcher->position();
  state.seed = s.config.seed;
  state.last_lr = s.steps.empty() ? 0.0 : s.steps.back().lr;
  const std::string text = s.config.describe();
  std::string path;
  if (s.config.zero.stage == 0) {
    // Every rank holds the whole state: rank 0 writes the single-file format (the fp32 master is written
    // as the params group in f32 runs; a 16-bit copy is re-derived from the master on load).
    path = checkpoint_path(output_dir, s.optimizer_step);
    Arena master = s.consolidated_parameters();
    Arena m("adam_m (host)", s.table.layout(DType::f32)), v("adam_v (host)", s.table.layout(DType::f32));
    ZeroEngine& engine = *s.rank0().engine;
    for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
      const Tensor tm = m.tensor(engine.tensor_name(piece.tensor)),
                   tv = v.tensor(engine.tensor_name(piece.tensor));
      engine.read_state(1, piece, {static_cast<float*>(tm.data()), static_cast<size_t>(piece.numel)});
      engine.read_state(2, piece, {static_cast<float*>(tv.data()), static_cast<size_t>(piece.numel)});
    }
    save_training_checkpoint(path, s.model_config, s.table, {master, master, m, v}, state, text);
  } else {
    path = sharded_checkpoint_path(output_dir, s.optimizer_step);
    s.run_ranks([&](int r) {
      RankState& rank = s.ranks[static_cast<size_t>(r)];
      save_sharded_checkpoint(path, *rank.engine, *rank.comm, s.model_config, state, text);
    });
  }
  ZT_LOG(info) << "checkpoint: " << path << " (step " << s.optimizer_step << ")";
}

void MrpcTrainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  if (!s.train_set) s.load_data();
  const std::string file = resolve_checkpoint_path(path);
  std::vector<TrainingState> states(static_cast<size_t>(s.world));
  s.run_ranks([&](int r) {
    states[static_cast<size_t>(r)] =
        load_engine_checkpoint(file, *s.ranks[static_cast<size_t>(r)].engine, s.model_config);
  });
  const TrainingState& state = states.front();
  ZT_CHECK(state.seed == s.config.seed, "checkpoint ", file, " was trained with --seed ", state.seed,
           "; resuming with --seed ", s.config.seed, " would change the data order and dropout masks");
  s.optimizer_step = state.optimizer_step;
  s.micro_step = state.micro_step;
  s.scheduler_step = state.scheduler_step;
  for (RankState& rank : s.ranks) {
    rank.engine->adamw().set_step_count(state.adam_step);
    if (s.compute == DType::f16) rank.scaler.load_state(state.loss_scaler);
  }
  s.train_batcher->seek(state.next_batch);
  std::printf("resumed from %s: step %lld, epoch %lld, batch %lld\n", file.c_str(),
              static_cast<long long>(state.optimizer_step),
              static_cast<long long>(state.next_batch.epoch + 1),
              static_cast<long long>(state.next_batch.batch));
}

}  // namespace zt::optim
