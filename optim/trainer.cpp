#include "optim/trainer.h"

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
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/progress.h"
#include "runtime/step_profile.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/grad_norm.cuh"
#endif

namespace zt::optim {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::span<float> float_span(const Arena& arena) {
  return {static_cast<float*>(arena.data()), arena.bytes() / sizeof(float)};
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

struct MrpcTrainer::Impl {
  TrainConfig config;
  DebertaConfig model_config;
  ParameterTable table;
  DeviceKind device;
  DType compute;  // storage dtype of the model's parameters and activations
  // params: the fp32 master weights AdamW updates; params16: their 16-bit copy the model reads (bf16/f16
  // training only), written by the same fused AdamW pass. Gradients and Adam moments are f32.
  Arena params, grads, exp_avg, exp_avg_sq;
  std::unique_ptr<Arena> params16;
  Arena batch_arena;  // the current batch where the model runs: ids, mask [B, L], labels [B]
  std::vector<TensorRange> ranges;
  AdamW adamw;
  LossScaler scaler;  // fp16: DeepSpeed's dynamic loss scaling; otherwise disabled (scale 1)
  DebertaForSequenceClassification model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::EncodedDataset> train_set, dev_set, test_set;
  std::unique_ptr<data::Batcher> train_batcher;
  int64_t optimizer_step = 0;  // optimizer steps taken so far, fp16 overflow-skipped ones included
  int64_t scheduler_step = 0;  // learning-rate schedule steps: applied updates only (DeepSpeed)
  int64_t micro_step = 0;      // micro-batches consumed so far (keys the dropout masks)
  std::vector<StepRecord> steps;
  std::function<void(const StepRecord&)> step_callback;

  Impl(TrainConfig c, DebertaConfig mc)
      : config(std::move(c)),
        model_config(std::move(mc)),
        table(model_config),
        device(training_device(config)),
        compute(compute_dtype_for_run(config)),
        params("parameters", table.layout(DType::f32),
               state_arena(device, MemoryCategory::parameters, false)),
        grads("gradients", table.layout(DType::f32), state_arena(device, MemoryCategory::gradients, true)),
        exp_avg("adam_m", table.layout(DType::f32), state_arena(device, MemoryCategory::optimizer, true)),
        exp_avg_sq("adam_v", table.layout(DType::f32), state_arena(device, MemoryCategory::optimizer, true)),
        batch_arena("batch", batch_layout(max_batch(), config.max_length),
                    state_arena(device, MemoryCategory::activations, false)),
        adamw(AdamWHyper{config.learning_rate, config.adam_beta1, config.adam_beta2, config.adam_epsilon,
                         config.weight_decay}),
        scaler(compute == DType::f16 ? LossScaler(config.fp16) : LossScaler::disabled()),
        model(model_config, max_batch(), config.max_length, device, compute) {
    ZT_CHECK(config.resolved, "MrpcTrainer needs a resolved TrainConfig");
    for (const ParameterInfo& info : table.entries()) {
      const ArenaSlot& slot = params.layout().slot(info.name);
      ranges.push_back({static_cast<int64_t>(slot.offset / sizeof(float)), info.numel(), info.weight_decay});
    }
    // Initialize (and load) on the host, then move the parameters where training runs.
    Arena staging("parameters (host)", table.layout(DType::f32));
    init_parameters(model_config, table, staging, config.seed);
    if (!config.model_name_or_path.empty()) load_pretrained(staging);
    copy_tensor(staging.flat(DType::f32), params.flat(DType::f32));
    if (compute != DType::f32) {
      params16 = std::make_unique<Arena>("parameters (16-bit)", table.layout(compute),
                                         state_arena(device, MemoryCategory::parameters, false));
      refresh_params16();
    }
  }

  // What the model reads: the 16-bit copy in mixed precision, else the master weights themselves.
  const Arena& model_params() const { return params16 ? *params16 : params; }

  // params16 = round(master), element for element (the layouts share element offsets).
  void refresh_params16() {
    if (params16) kernels::copy(params.flat(DType::f32), params16->flat(compute));
  }

  int64_t max_batch() const {
    return std::max(config.per_device_train_batch_size, config.per_device_eval_batch_size);
  }

  // The batch as the model wants it: views of the host batch on the CPU, a copy in batch_arena on the GPU.
  DebertaBatch upload(data::Batch& batch) {
    if (device == DeviceKind::cpu) {
      return {batch.input_ids_tensor(), batch.attention_mask_tensor(), batch.labels_tensor()};
    }
    auto slot = [&](const char* name, Shape shape) {
      return Tensor(batch_arena.tensor(name).data(), shape, DType::i64, DeviceKind::cuda);
    };
    DebertaBatch out{slot("input_ids", {batch.batch_size, batch.seq_len}),
                     slot("attention_mask", {batch.batch_size, batch.seq_len}),
                     slot("labels", {batch.batch_size})};
    copy_tensor(batch.input_ids_tensor(), out.input_ids);
    copy_tensor(batch.attention_mask_tensor(), out.attention_mask);
    copy_tensor(batch.labels_tensor(), out.labels);
    return out;
  }

  // Clips the global gradient norm and applies one AdamW step at `lr`; returns the pre-clip norm of the
  // unscaled gradients. fp16: the gradients hold loss_scale * g; a step whose gradients overflowed is skipped
  // (gradients zeroed, no update, no schedule step), the scaler updated either way, and the norm is +inf.
  double clip_and_update(double lr, bool& applied) {
    applied = true;
    if (device == DeviceKind::cpu) {
      std::span<float> g = float_span(grads);
      const double norm =
          config.max_grad_norm > 0 ? clip_grad_norm(g, config.max_grad_norm) : global_l2_norm(g);
      ZT_CHECK(std::isfinite(norm), "gradient norm is not finite at optimizer step ", optimizer_step);
      adamw.step(buffers(), ranges, lr);
      std::fill(g.begin(), g.end(), 0.0f);
      return norm;
    }
#ifdef ZT_WITH_CUDA
    const Tensor g = grads.flat(DType::f32);
    const gpu::GradStats stats = gpu::grad_stats(g, nullptr);
    const double loss_scale = scaler.scale();
    if (compute == DType::f16) {
      const bool overflow = stats.non_finite > 0 || !std::isfinite(stats.sum_of_squares);
      applied = scaler.update(overflow);
      if (!applied) {
        ZT_LOG(info) << "fp16 overflow at optimizer step " << optimizer_step << ": step skipped, loss scale "
                     << loss_scale << " -> " << scaler.scale();
        kernels::fill(g, 0.0f);
        return std::numeric_limits<double>::infinity();
      }
    }
    const double norm = std::sqrt(stats.sum_of_squares) / loss_scale;
    ZT_CHECK(std::isfinite(norm), "gradient norm is not finite at optimizer step ", optimizer_step);
    // Unscaling and clipping are one factor, applied inside the AdamW pass, which also zeroes the gradients
    // for the next step: one pass over them instead of three.
    double factor = 1.0 / loss_scale;
    if (config.max_grad_norm > 0) factor *= std::min(1.0, clip_coefficient(norm, config.max_grad_norm));
    adamw.begin_step();
    gpu::adamw_update(adamw_step_scalars(adamw.hyper(), lr, adamw.step_count()), params.flat(DType::f32), g,
                      exp_avg.flat(DType::f32), exp_avg_sq.flat(DType::f32), ranges,
                      params16 ? params16->flat(compute) : Tensor(), nullptr, static_cast<float>(factor),
                      /*zero_grads=*/true);
    return norm;
#else
    ZT_FAIL("CUDA training needs a CUDA build");
#endif
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

  AdamWBuffers buffers() {
    return {float_span(params), float_span(grads), float_span(exp_avg), float_span(exp_avg_sq)};
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
  ZT_CHECK(host.bytes() == s.params.bytes() && host.device() == DeviceKind::cpu,
           "load_parameters: expected a host arena of ", s.params.bytes(), " bytes (table().layout(f32))");
  copy_tensor(host.flat(DType::f32), s.params.flat(DType::f32));
  s.refresh_params16();
}

const Arena& MrpcTrainer::params() const {
  return impl_->params;
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
  ZT_CHECK(!micro_batches.empty(), "train_step needs at least one micro-batch");
  // run_glue_no_trainer divides each micro-batch loss by gradient_accumulation_steps (also on a short last
  // accumulation window at the end of an epoch), so the gradient is the mean over the configured window.
  // fp16 multiplies by the current loss scale as well (1 otherwise); clip_and_update divides it out.
  const float loss_scale =
      static_cast<float>(s.scaler.scale()) / static_cast<float>(s.config.gradient_accumulation_steps);
  double loss_sum = 0;
  StepProfile::global().mark_start();
  for (data::Batch& batch : micro_batches) {
    const DebertaBatch inputs = s.upload(batch);
    const float loss = s.model.forward(
        s.model_params(), inputs,
        {.training = true, .seed = s.config.seed, .step = static_cast<uint64_t>(s.micro_step)});
    ZT_CHECK(std::isfinite(loss), "training loss is not finite at optimizer step ", s.optimizer_step,
             " (micro-batch ", s.micro_step, ")");
    s.model.backward(s.model_params(), s.grads, loss_scale);
    loss_sum += loss;
    ++s.micro_step;
  }
  StepRecord record;
  record.step = s.optimizer_step;
  record.loss = loss_sum / static_cast<double>(micro_batches.size());
  record.lr = s.lr_at(s.scheduler_step);
  record.loss_scale = s.scaler.scale();
  bool applied = true;
  record.grad_norm = s.clip_and_update(record.lr, applied);
  StepProfile::global().mark("optimizer");
  record.skipped = !applied;
  ++s.optimizer_step;
  if (applied) ++s.scheduler_step;
  s.steps.push_back(record);
  if (s.step_callback) s.step_callback(record);
  return record;
}

EvalResult MrpcTrainer::evaluate(const data::EncodedDataset& dataset) {
  Impl& s = *impl_;
  EvalResult result;
  data::Batcher batcher = make_eval_batcher(dataset, s.config.per_device_eval_batch_size);
  data::Batch batch;
  std::vector<int64_t> labels;
  double loss_sum = 0;
  int64_t labeled = 0;
  while (batcher.next(batch)) {
    const float loss = s.model.forward(s.model_params(), s.upload(batch), {.training = false});
    const Tensor logits = s.model.logits();
    std::vector<float> host(static_cast<size_t>(logits.numel()));
    copy_tensor(logits, Tensor(host.data(), logits.shape(), DType::f32));
    for (int64_t p : data::argmax_predictions(Tensor(host.data(), logits.shape(), DType::f32))) {
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
  if (!c.resume_from_checkpoint.empty() && s.optimizer_step == 0) load_checkpoint(c.resume_from_checkpoint);
  std::vector<EpochRecord> epochs;
  std::ofstream metrics;
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
      if (static_cast<int64_t>(window.size()) < accumulation && !last_of_epoch) continue;
      const StepRecord record = train_step(window);
      int64_t window_samples = 0;
      for (const data::Batch& b : window) window_samples += b.batch_size;
      window.clear();
      epoch_loss += record.loss;
      ++epoch_steps;
      progress.update(window_samples, {{"loss", record.loss}, {"lr", record.lr}});
      if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::steps &&
          s.optimizer_step % c.checkpointing_steps.every == 0 && !c.output_dir.empty()) {
        save_checkpoint(
            (std::filesystem::path(c.output_dir) / str("step_", s.optimizer_step, ".h5")).string());
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
      std::printf("  fp16 loss scale %g, %lld overflow-skipped steps so far\n", s.scaler.scale(),
                  static_cast<long long>(s.scaler.skipped_steps()));
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
        line["loss_scale"] = s.scaler.scale();
        line["skipped_steps"] = s.scaler.skipped_steps();
      }
      metrics << line.dump() << "\n";
      metrics.flush();
    }
    if (c.checkpointing_steps.kind == CheckpointingSteps::Kind::epoch && !c.output_dir.empty()) {
      s.train_batcher->set_epoch(epoch + 1);  // resume starts the next epoch, not this one's evaluation again
      save_checkpoint(checkpoint_path(c.output_dir, s.optimizer_step));
    }
  }
  if (!c.output_dir.empty()) {
    const std::string path = (std::filesystem::path(c.output_dir) / "model.h5").string();
    Arena host("parameters (host)", s.table.layout(DType::f32));
    copy_tensor(s.params.flat(DType::f32), host.flat(DType::f32));
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

void MrpcTrainer::save_checkpoint(const std::string& path) const {
  const Impl& s = *impl_;
  TrainingState state;
  state.optimizer_step = s.optimizer_step;
  state.micro_step = s.micro_step;
  state.adam_step = s.adamw.step_count();
  state.scheduler_step = s.scheduler_step;
  state.loss_scaler = s.scaler.state();
  if (s.train_batcher) state.next_batch = s.train_batcher->position();
  state.seed = s.config.seed;
  state.last_lr = s.steps.empty() ? 0.0 : s.steps.back().lr;
  // The fp32 master weights are the parameters; a 16-bit copy is re-derived from them on load.
  save_training_checkpoint(path, s.model_config, s.table, {s.params, s.params, s.exp_avg, s.exp_avg_sq},
                           state, s.config.describe());
  ZT_LOG(info) << "checkpoint: " << path << " (step " << s.optimizer_step << ")";
}

void MrpcTrainer::load_checkpoint(const std::string& path) {
  Impl& s = *impl_;
  if (!s.train_set) s.load_data();
  const std::string file = resolve_checkpoint_path(path);
  TrainingState state;
  load_training_checkpoint(file, s.model_config, s.table, {s.params, s.params, s.exp_avg, s.exp_avg_sq},
                           state);
  ZT_CHECK(state.seed == s.config.seed, "checkpoint ", file, " was trained with --seed ", state.seed,
           "; resuming with --seed ", s.config.seed, " would change the data order and dropout masks");
  s.optimizer_step = state.optimizer_step;
  s.micro_step = state.micro_step;
  s.adamw.set_step_count(state.adam_step);
  s.scheduler_step = state.scheduler_step;
  if (s.compute == DType::f16) s.scaler.load_state(state.loss_scaler);
  s.refresh_params16();
  s.train_batcher->seek(state.next_batch);
  std::printf("resumed from %s: step %lld, epoch %lld, batch %lld\n", file.c_str(),
              static_cast<long long>(state.optimizer_step),
              static_cast<long long>(state.next_batch.epoch + 1),
              static_cast<long long>(state.next_batch.batch));
}

}  // namespace zt::optim
