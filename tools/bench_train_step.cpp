// bench_train_step: times zerotrain's training step on synthetic batches, the zerotrain side of
// scripts/bench_vs_torch.py (which runs HF DebertaV2ForSequenceClassification eager and torch.compile with
// the same settings and prints the ratios). Prints one JSON line:
//
//   bench_train_step --batch 40 --seq 128 --dtype bf16 [--steps 12] [--dropout 0.1] [--layers N]
//   {"impl": "zerotrain", "dtype": "bf16", "batch": 40, "seq": 128, "params": ..., "first_step_s": ...,
//    "step_ms": ..., "samples_per_s": ..., "approx_tflops": ..., "peak_gib": ..., "peak_reserved_gib": ...}
//
// The step is the real one (MrpcTrainer::train_step): forward, backward, global-norm clipping at 1.0 and the
// fused AdamW with its 16-bit parameter copy, on the xlarge architecture (random init, 2 labels) — what
// torch_baseline.py times: random ids in [5, 128000), a full attention mask, random labels, weight decay 0.
// 3 warm-up steps (plans, caches, first allocations) then --steps timed ones; step_ms is their median.
// peak_gib is the caching allocator's peak of live bytes (the counterpart of
// torch.cuda.max_memory_allocated); peak_reserved_gib adds what it kept cached. With --profile (or
// ZT_PROFILE=1) a per-segment device-time table of the timed steps goes to stderr (with CPU offload it has
// the offload's segments: optimizer.grad_norm, optimizer.offload_download_wait, optimizer.offload_cpu_adamw;
// delayed: optimizer.offload_delayed_wait (the stream idle while the host waits for the CPU update),
// optimizer.offload_delayed_land (the uploads and all-gather after it), optimizer.offload_delayed_start),
// and the JSON has segments_ms (the table per step) and forward_backward_ms (its fwd.* and bwd.* sum);
// cpu_update_ms is the CPU AdamW's host time per update with any offload. CPU offload: --offload optimizer
// (stages 1-3) or both (stage 3: the parameter shard too), --offload_ratio R for a partial offload (that
// fraction of the optimizer state on the host, the rest updated on the device at the same time),
// --pin_memory for page-locked host buffers, --delayed_update for ZeRO-Offload's one-step-stale update
// (landing unit by unit beside the CPU update); the exact update overlapping the next forward is on where it
// applies (as in train_mrpc),
// --overlap_update asks for it (an error where it cannot run), --no_overlap_update turns it off (the JSON's
// overlap_update says what ran). --nvme_path DIR
// (with --offload) puts the offloaded optimizer state on the disk tier (offload_optimizer device nvme;
// --nvme_buffers, --nvme_pipeline for buffer_count and pipeline_read/write; --sub_group_size for
// zero_optimization.sub_group_size, the disk tier's record): issue 15's "step with the disk tier vs the
// floor" (bench_disk measures the disk). --nvme_param (with
// --offload both --nvme_path DIR) puts the stage-3 parameter shard on disk too (offload_param device nvme
// in DIR, --nvme_param_buffers for its buffer_count, DeepSpeed's default 5). --host_memory_limit caps
// the trainer's host buffers as train_mrpc's flag does (a plan over it fails before allocating).
//
// --world_size N runs N in-process ranks over this one GPU (each its own stream and allocator, capped at
// --gpu_memory_limit like a card of that size; ZeRO stage --zero_stage), each rank taking a batch of --batch:
// --overlap_comm sets zero_optimization.overlap_comm (reductions on a communication stream, overlapping
// backward; off by default here at every stage, so that the two can be timed side by side);
// samples_per_s counts all ranks, and "ranks" lists every rank's peak bytes by category beside the
// estimator's per-rank figures (optim/zero/memory_estimate.h), measured over the timed steps. A batch that
// does not fit ends with the allocator's out-of-memory error (exit 1): scripts search the largest batch so.
//
// --hidden H widens the model (heads of 64, FFN 4H) and --layers N deepens it: the largest model that trains
// with ZeRO-3 and both offloads. --estimate_only prints the estimator's plan (device and host GiB; "disk":
// the swap file with --nvme_path) for the flags and exits, without a GPU. --repeat_batch trains every step
// on the same batch and --lr sets the learning rate, so a few steps of a big model show its loss falling
// ("losses" lists every step's loss); --lr_warmup N ramps the rate up linearly over the first N steps
// (constant_with_warmup).
//
// --accumulation K: each step accumulates K micro-batches of --batch per rank (gradient_accumulation_steps),
// so a global batch can be timed as any micro-batch x accumulation. --auto_plan: --batch is the global batch
// per rank, and the planner (app/plan, as train_mrpc --auto_plan; figures from --machine_figures) chooses the
// stage, offload, checkpointing and micro-batch x accumulation for --gpu_memory_limit (else the device's
// free memory); the JSON's "plan" is its choice with the predicted step. With --estimate_only it prints
// {"plan": chosen, "candidates": every plan ranked, with predicted ms, planned GiB and whether it fits}
// without a GPU (a cap is needed then), so a script can pick the plausible winners of a grid.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "app/config/engine_options.h"
#include "app/config/train_config.h"
#include "app/plan/auto_plan.h"
#include "app/trainer/trainer.h"
#include "data/batcher.h"
#include "model/config.h"
#include "model/deberta.h"
#include "model/parameters.h"
#include "optim/zero/memory_estimate.h"
#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/dtype.h"
#include "runtime/flag_table.h"
#include "runtime/memory_size.h"
#include "runtime/step_profile.h"

namespace {

// The ZT_* environment switches of this run (experiments, ZT_PROFILE, ...): a
// timing line says which code it timed.
nlohmann::json zt_switches() {
  nlohmann::json out = nlohmann::json::object();
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const size_t equals = text.find('=');
    if (text.starts_with("ZT_") && equals != std::string_view::npos)
      out[std::string(text.substr(0, equals))] = std::string(text.substr(equals + 1));
  }
  return out;
}

struct Options {
  int64_t batch = 40;
  int64_t seq = 128;
  std::string dtype = "bf16";
  int64_t steps = 12;
  int64_t warmup = 3;  // untimed steps first (plans, caches, first allocations)
  double dropout = 0.1;
  int64_t layers = 0;  // 0: the xlarge depth (24)
  int64_t hidden = 0;  // 0: the xlarge width (1536); else heads of 64, FFN 4x (a DeBERTa-v2-shaped model)
  bool estimate_only = false;
  bool repeat_batch = false;  // every step trains on the first batch: a few steps show the loss falling
  double learning_rate = 2e-5;
  int64_t lr_warmup = 0;        // steps of linear warm-up (constant_with_warmup); 0 = constant
  int64_t accumulation = 1;     // micro-batches of --batch per rank and step
  bool auto_plan = false;       // --batch is the global batch per rank; app/plan chooses how to compute it
  std::string machine_figures;  // the cost model's figures for --auto_plan; "" = the built-in ones
  int zero_stage = 0;           // ZeRO stage of the engine (world 1: its overhead over stage 0)
  int world_size = 1;
  std::string gpu_memory_limit;   // per rank; "" = none
  std::string host_memory_limit;  // --host_memory_limit: the trainer's host buffers; "" = none
  std::string offload = "none";   // none | optimizer | both
  bool pin_memory = false;
  bool delayed_update = false;
  double offload_ratio = 1.0;      // offload_optimizer.ratio: the fraction of the state on the host (partial)
  bool overlap_update = false;     // --offload_overlap_update (asked: refused where it cannot run)
  bool no_overlap_update = false;  // --no_offload_overlap_update (it is on by default where it applies)
  bool overlap_optimizer = false;  // --overlap_optimizer
  bool gradient_checkpointing = false;  // --gradient_checkpointing: each layer recomputed in the backward
  std::string attention = "auto";       // --attention auto|stored|flash (DebertaConfig::attention_kernel)
  bool back_to_back = false;  // timed steps without a device sync between them: step_ms = window / steps
  bool overlap_comm = false;  // zero_optimization.overlap_comm (world > 1)
  bool profile = false;
  std::string nvme_path;  // the disk tier's directory; empty: the offloaded state stays in host memory
  int nvme_buffers = 4;
  bool nvme_param = false;  // offload_param device nvme (with --offload both and --nvme_path)
  int nvme_param_buffers = 5;
  bool nvme_pipeline = false;              // pipeline_read and pipeline_write
  int64_t sub_group_size = 1'000'000'000;  // zero_optimization.sub_group_size (offloaded state's sub-groups)
};

using V = const std::string&;
using F = std::string_view;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
int64_t integer(F f, V v) {
  return zt::parse_integer_flag(f, v, kMin);
}
int small_integer(F f, V v) {
  return static_cast<int>(
      zt::parse_integer_flag(f, v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

const auto kFlags = std::to_array<zt::Flag<Options>>({
    {"batch", "B", "batch per rank", [](Options& o, F f, V v) { o.batch = integer(f, v); },
     [](const Options& o) { return std::to_string(o.batch); }},
    {"seq", "L", "sequence length", [](Options& o, F f, V v) { o.seq = integer(f, v); },
     [](const Options& o) { return std::to_string(o.seq); }},
    {"dtype", "bf16|fp16|fp32", "compute dtype", [](Options& o, F, V v) { o.dtype = v; },
     [](const Options& o) { return o.dtype; }},
    {"steps", "N", "timed steps (step_ms is their median)",
     [](Options& o, F f, V v) { o.steps = integer(f, v); },
     [](const Options& o) { return std::to_string(o.steps); }},
    {"warmup", "N", "untimed steps first (plans, caches, first allocations)",
     [](Options& o, F f, V v) { o.warmup = integer(f, v); },
     [](const Options& o) { return std::to_string(o.warmup); }},
    {"dropout", "P", "dropout of the model",
     [](Options& o, F f, V v) { o.dropout = zt::parse_number_flag(f, v, 0.0); },
     [](const Options& o) { return zt::str(o.dropout); }},
    {"layers", "N", "encoder layers; 0 = the xlarge depth (24)",
     [](Options& o, F f, V v) { o.layers = integer(f, v); },
     [](const Options& o) { return std::to_string(o.layers); }},
    {"hidden", "H", "hidden size (a multiple of 64; heads of 64, FFN 4H); 0 = the xlarge width (1536)",
     [](Options& o, F f, V v) { o.hidden = integer(f, v); },
     [](const Options& o) { return std::to_string(o.hidden); }},
    {"estimate_only", "", "print the estimator's plan for the flags and exit (no GPU needed)",
     [](Options& o, F, V) { o.estimate_only = true; }, nullptr},
    {"repeat_batch", "", "train every step on the same batch (a few steps show the loss falling)",
     [](Options& o, F, V) { o.repeat_batch = true; }, nullptr},
    {"lr", "LR", "learning rate",
     [](Options& o, F f, V v) { o.learning_rate = zt::parse_number_flag(f, v, 0.0); },
     [](const Options& o) { return zt::str(o.learning_rate); }},
    {"lr_warmup", "N", "steps of linear learning-rate warm-up (constant_with_warmup); 0 = constant",
     [](Options& o, F f, V v) { o.lr_warmup = integer(f, v); },
     [](const Options& o) { return std::to_string(o.lr_warmup); }},
    {"accumulation", "K", "micro-batches of --batch accumulated per rank and step",
     [](Options& o, F f, V v) { o.accumulation = integer(f, v); },
     [](const Options& o) { return std::to_string(o.accumulation); }},
    {"auto_plan", "",
     "--batch is the global batch per rank: the planner chooses the stage, offload, checkpointing and "
     "micro-batch x accumulation (with --estimate_only: the ranked plans as JSON)",
     [](Options& o, F, V) { o.auto_plan = true; }, nullptr},
    {"machine_figures", "FILE",
     "the cost model's figures for --auto_plan (train_mrpc --calibrate); default: the cached calibration",
     [](Options& o, F, V v) { o.machine_figures = v; }, [](const Options& o) { return o.machine_figures; }},
    {"zero_stage", "S", "ZeRO stage (0-3)", [](Options& o, F f, V v) { o.zero_stage = small_integer(f, v); },
     [](const Options& o) { return std::to_string(o.zero_stage); }},
    {"world_size", "N", "in-process ranks over this one GPU",
     [](Options& o, F f, V v) { o.world_size = small_integer(f, v); },
     [](const Options& o) { return std::to_string(o.world_size); }},
    {"gpu_memory_limit", "SIZE", "cap on each rank's device memory; empty = none",
     [](Options& o, F, V v) { o.gpu_memory_limit = v; }, [](const Options& o) { return o.gpu_memory_limit; }},
    {"attention", "auto|stored|flash", "the attention kernel (DebertaConfig::attention_kernel)",
     [](Options& o, F, V v) { o.attention = v; }, [](const Options& o) { return o.attention; }},
    {"host_memory_limit", "SIZE", "cap on the trainer's host buffers, as train_mrpc's flag",
     [](Options& o, F, V v) { o.host_memory_limit = v; },
     [](const Options& o) { return o.host_memory_limit; }},
    {"overlap_comm", "", "zero_optimization.overlap_comm: reductions overlap backward (world size > 1)",
     [](Options& o, F, V) { o.overlap_comm = true; }, nullptr},
    {"offload", "none|optimizer|both",
     "CPU offload of the optimizer state (stages 1-3), or of it and the "
     "stage-3 parameter shard",
     [](Options& o, F, V v) { o.offload = v; }, [](const Options& o) { return o.offload; }},
    {"pin_memory", "", "page-locked host buffers for the offload",
     [](Options& o, F, V) { o.pin_memory = true; }, nullptr},
    {"delayed_update", "", "ZeRO-Offload's one-step-stale update",
     [](Options& o, F, V) { o.delayed_update = true; }, nullptr},
    {"offload_ratio", "R",
     "with --offload optimizer: the fraction (0 < R <= 1) of the optimizer state kept and updated on the "
     "host, the rest on the device (offload_optimizer.ratio)",
     [](Options& o, F f, V v) { o.offload_ratio = zt::parse_number_flag(f, v, 0.0); },
     [](const Options& o) { return zt::str(o.offload_ratio); }},
    {"overlap_update", "",
     "ask for the exact update overlapping the next forward (an error where it cannot run)",
     [](Options& o, F, V) { o.overlap_update = true; }, nullptr},
    {"no_overlap_update", "", "turn the overlapped update off",
     [](Options& o, F, V) { o.no_overlap_update = true; }, nullptr},
    {"overlap_optimizer", "", "the GPU AdamW overlapping the next forward",
     [](Options& o, F, V) { o.overlap_optimizer = true; }, nullptr},
    {"back_to_back", "", "no device sync between timed steps (step_ms = window / steps)",
     [](Options& o, F, V) { o.back_to_back = true; }, nullptr},
    {"gradient_checkpointing", "", "each layer recomputed in the backward",
     [](Options& o, F, V) { o.gradient_checkpointing = true; }, nullptr},
    {"profile", "", "a per-segment device-time table of the timed steps on stderr",
     [](Options& o, F, V) { o.profile = true; }, nullptr},
    {"nvme_path", "DIR", "the offloaded optimizer state on the disk tier in DIR (needs --offload)",
     [](Options& o, F, V v) { o.nvme_path = v; }, [](const Options& o) { return o.nvme_path; }},
    {"nvme_buffers", "N", "the disk tier's buffer_count",
     [](Options& o, F f, V v) { o.nvme_buffers = small_integer(f, v); },
     [](const Options& o) { return std::to_string(o.nvme_buffers); }},
    {"nvme_pipeline", "", "pipeline_read and pipeline_write of the disk tier",
     [](Options& o, F, V) { o.nvme_pipeline = true; }, nullptr},
    {"sub_group_size", "N", "zero_optimization.sub_group_size (the disk tier's record; 1e9 accepted)",
     [](Options& o, F f, V v) { o.sub_group_size = static_cast<int64_t>(zt::parse_number_flag(f, v, 1.0)); },
     [](const Options& o) { return std::to_string(o.sub_group_size); }},
    {"nvme_param", "",
     "the stage-3 parameter shard on disk too (--zero_stage 3 --offload both --nvme_path DIR)",
     [](Options& o, F, V) { o.nvme_param = true; }, nullptr},
    {"nvme_param_buffers", "N", "buffer_count of the parameter swap",
     [](Options& o, F f, V v) { o.nvme_param_buffers = small_integer(f, v); },
     [](const Options& o) { return std::to_string(o.nvme_param_buffers); }},
});

Options parse(int argc, char** argv) {
  Options o;
  if (zt::parse_flags<Options>(kFlags, std::vector<std::string>(argv + 1, argv + argc), o).help) {
    std::fputs(
        zt::flags_help<Options>(kFlags, Options{}, "usage: bench_train_step [--flag value] ...\n").c_str(),
        stdout);
    std::exit(0);
  }
  ZT_CHECK(o.batch > 0 && o.seq > 1 && o.steps >= 1 && o.layers >= 0 && o.world_size >= 1 && o.hidden >= 0 &&
               o.hidden % 64 == 0,
           "sizes must be positive (--hidden a multiple of 64)");
  ZT_CHECK(o.warmup >= 0 && o.lr_warmup >= 0, "--warmup and --lr_warmup must be >= 0");
  ZT_CHECK(o.accumulation >= 1, "--accumulation must be at least 1");
  ZT_CHECK(!o.auto_plan ||
               (o.accumulation == 1 && o.zero_stage == 0 && o.offload == "none" && o.offload_ratio == 1.0 &&
                !o.gradient_checkpointing && !o.delayed_update && o.nvme_path.empty()),
           "--auto_plan chooses the stage, offload, checkpointing and accumulation: leave --zero_stage, "
           "--offload, --offload_ratio, --gradient_checkpointing, --accumulation, --delayed_update and "
           "--nvme_path out");
  ZT_CHECK(!o.auto_plan || !o.estimate_only || !o.gpu_memory_limit.empty(),
           "--estimate_only --auto_plan needs --gpu_memory_limit (the card to plan for)");
  ZT_CHECK(o.dtype == "bf16" || o.dtype == "fp16" || o.dtype == "fp32", "--dtype must be bf16, fp16 or fp32");
  ZT_CHECK(o.attention == "auto" || o.attention == "stored" || o.attention == "flash",
           "--attention must be auto, stored or flash, got ", o.attention);
  ZT_CHECK(o.offload == "none" || o.offload == "optimizer" || o.offload == "both",
           "--offload must be none, optimizer or both");
  ZT_CHECK(o.nvme_path.empty() || o.offload != "none",
           "--nvme_path puts the offloaded optimizer state on disk: it "
           "needs --offload optimizer or both");
  ZT_CHECK(!o.nvme_param || (o.offload == "both" && !o.nvme_path.empty() && o.zero_stage == 3),
           "--nvme_param puts the stage-3 parameter shard on disk: it needs --zero_stage 3, --offload both "
           "and --nvme_path DIR");
  ZT_CHECK(o.offload_ratio == 1.0 || o.offload != "none",
           "--offload_ratio keeps part of the offloaded optimizer state on the device: it needs --offload "
           "optimizer");
  ZT_CHECK(o.nvme_param_buffers >= 1, "--nvme_param_buffers must be at least 1, got ", o.nvme_param_buffers);
  return o;
}

// torch_baseline.py's batch: ids uniform in [5, 128000), mask all ones, labels uniform in {0, 1}.
zt::data::Batch synthetic_batch(int64_t batch, int64_t seq, std::mt19937_64& rng) {
  zt::data::Batch b;
  b.batch_size = batch;
  b.seq_len = seq;
  std::uniform_int_distribution<int64_t> id(5, 127999), label(0, 1);
  b.input_ids.resize(static_cast<size_t>(batch * seq));
  for (int64_t& x : b.input_ids) x = id(rng);
  b.attention_mask.assign(static_cast<size_t>(batch * seq), 1);
  for (int64_t r = 0; r < batch; ++r) b.labels.push_back(label(rng));
  return b;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
double round_to(double x, double unit) {
  return std::round(x / unit) * unit;
}
double gib(
    size_t bytes) {  // to the MiB (rounded and divided, so the JSON shows 3.304, not 3.3040000000000003)
  return std::round(static_cast<double>(bytes) / kGiB * 1000) / 1000;
}

// The estimator's per-rank plan for this run (optim/zero/memory_estimate.h), GiB by category.
nlohmann::json estimate_json(const zt::DebertaConfig& model, const Options& o, zt::DType compute,
                             zt::optim::ZeroOffload offload) {
  const zt::optim::MemoryEstimate plan =
      zt::optim::estimate_memory(model, o.zero_stage, o.world_size, compute, o.batch, o.seq, offload,
                                 /*device=*/true, o.accumulation);
  return {{"parameters", gib(plan.state.compute_copy)},
          {"gradients", gib(plan.state.gradients)},
          {"master", gib(plan.state.master)},
          {"optimizer", gib(plan.state.optimizer)},
          {"buffers", gib(plan.state.buffers + plan.comm_scratch)},
          {"scratch", gib(plan.scratch)},
          {"activations", gib(plan.activations)},
          {"total", gib(plan.total())},
          {"host", gib(plan.host())},
          {"host_optimizer", gib(plan.state.host_optimizer)},
          {"host_gradients", gib(plan.state.host_gradients)},
          {"host_parameters", gib(plan.state.host_parameters)},
          {"disk", gib(plan.state.disk_file)}};  // --nvme_path: the swap file (sum of the records)
}

// The zero_optimization section of the DeepSpeed config that the flags stand for.
nlohmann::json deepspeed_zero_json(const Options& o) {
  const std::string device = o.nvme_path.empty() ? "cpu" : "nvme";
  nlohmann::json zero{
      {"stage", o.zero_stage}, {"overlap_comm", o.overlap_comm}, {"sub_group_size", o.sub_group_size}};
  if (o.auto_plan) zero["stage"] = "auto";  // the planner's to choose (the offload devices default to none)
  if (o.offload != "none") {
    zero["offload_optimizer"] = {{"device", device}, {"pin_memory", o.pin_memory}};
    if (o.offload_ratio != 1.0) zero["offload_optimizer"]["ratio"] = o.offload_ratio;
    if (!o.nvme_path.empty()) {
      zero["offload_optimizer"].update({{"nvme_path", o.nvme_path},
                                        {"buffer_count", o.nvme_buffers},
                                        {"pipeline_read", o.nvme_pipeline},
                                        {"pipeline_write", o.nvme_pipeline}});
    }
  }
  if (o.offload == "both") {
    zero["offload_param"] = {{"device", o.nvme_param ? "nvme" : "cpu"}, {"pin_memory", o.pin_memory}};
    if (o.nvme_param)
      zero["offload_param"].update({{"nvme_path", o.nvme_path}, {"buffer_count", o.nvme_param_buffers}});
  }
  return {{"zero_optimization", zero}};
}

// The trainer's configuration for the flags, resolved (checked) as train_mrpc's is; needs no GPU.
zt::optim::TrainConfig bench_config(const Options& o, const zt::DebertaConfig& model, zt::DType compute) {
  const std::string dtype_flag(zt::dtype_name(compute));
  zt::optim::TrainConfig config = zt::optim::TrainConfig::from_args(std::vector<std::string>{
      "--device", "cuda", "--dtype", dtype_flag, "--per_device_train_batch_size", std::to_string(o.batch),
      "--gradient_accumulation_steps", std::to_string(o.accumulation),
      // No evaluation here: the arena is
      // planned for the micro-batch alone
      // (--auto_plan: for each plan's).
      "--per_device_eval_batch_size", o.auto_plan ? "1" : std::to_string(o.batch), "--max_length",
      std::to_string(o.seq), "--learning_rate", std::to_string(o.learning_rate), "--weight_decay", "0",
      "--max_grad_norm", "1.0", "--num_train_epochs", "1", "--lr_scheduler_type",
      o.lr_warmup > 0 ? "constant_with_warmup" : "constant", "--num_warmup_steps",
      std::to_string(o.lr_warmup), "--world_size", std::to_string(o.world_size)});
  if (!o.host_memory_limit.empty()) config.host_memory_limit = zt::parse_memory_size(o.host_memory_limit);
  if (!o.gpu_memory_limit.empty()) config.gpu_memory_limit = zt::parse_memory_size(o.gpu_memory_limit);
  config.offload_delayed_update = o.delayed_update;
  config.offload_overlap_update = o.overlap_update;
  config.no_offload_overlap_update = o.no_overlap_update;
  config.overlap_optimizer = o.overlap_optimizer;
  config.gradient_checkpointing = o.gradient_checkpointing;
  // The ZeRO flags as the DeepSpeed JSON a user would write, resolved by the same code as train_mrpc's
  // --deepspeed_config: every check the trainer's users get (stage rules, the disk-tier preflight,
  // --host_memory_limit against what is offloaded) applies to the benchmark too.
  const std::string zero_json = deepspeed_zero_json(o).dump();
  config.resolve_with_json_text(
      zero_json, "bench_train_step's flags",
      {.world_size = 1,
       .hidden_size = model.hidden_size,
       .num_train_examples = o.batch * o.accumulation * (o.warmup + o.steps) * o.world_size});
  return config;
}

nlohmann::json plan_json(const zt::plan::Candidate& c) {
  const zt::plan::Plan& p = c.plan;
  return {{"describe", p.describe()},
          {"zero_stage", p.stage},
          {"offload", p.optimizer_offload == zt::plan::OptimizerOffload::none ? "none"
                      : p.param_offload                                       ? "both"
                                                                              : "optimizer"},
          {"offload_device", zt::plan::optimizer_offload_name(p.optimizer_offload)},
          {"offload_ratio", p.offload_ratio},
          {"gradient_checkpointing", p.gradient_checkpointing},
          {"micro_batch", p.micro_batch},
          {"accumulation", p.accumulation},
          {"predicted_ms", round_to(c.predicted_ms(), 1e-2)},
          {"device_gib", gib(c.memory.device)},
          {"host_gib", gib(c.memory.host)},
          {"fits", c.fits()}};
}

// --auto_plan: the planner's choice for the global batch --batch (per rank) under the cap; `o` becomes the
// flags of the chosen plan, so the run that follows is the one an explicit run of that plan would be.
zt::plan::AutoPlan choose_bench_plan(Options& o, const zt::DebertaConfig& model, zt::DType compute,
                                     const zt::optim::TrainConfig& config) {
  size_t cap = config.gpu_memory_limit;
  if (cap == 0) cap = zt::device_allocator().backend().free_memory() / static_cast<size_t>(o.world_size);
  const zt::plan::PlanningFigures figures = zt::plan::planning_figures(o.machine_figures);
  zt::plan::AutoPlan chosen =
      zt::plan::choose_auto_plan(config, model, compute, cap, /*gpu=*/true, figures.figures,
                                 zt::plan::CollectiveTransport::shared_device);  // in-process ranks, one GPU
  chosen.report = "machine figures from " + figures.source + "\n" + chosen.report;
  const zt::plan::Plan& p = chosen.plan;
  o.auto_plan = false;
  o.zero_stage = p.stage;
  o.offload = p.optimizer_offload == zt::plan::OptimizerOffload::none ? "none"
              : p.param_offload                                       ? "both"
                                                                      : "optimizer";
  o.pin_memory = o.pin_memory || p.optimizer_offload != zt::plan::OptimizerOffload::none;
  o.offload_ratio = p.optimizer_offload == zt::plan::OptimizerOffload::none ? 1.0 : p.offload_ratio;
  // --host_memory_limit was the planner's host cap; a plan without offload has no host state to cap (and the
  // explicit flags refuse a cap over nothing).
  if (p.optimizer_offload == zt::plan::OptimizerOffload::none) o.host_memory_limit.clear();
  o.gradient_checkpointing = p.gradient_checkpointing;
  o.batch = p.micro_batch;
  o.accumulation = p.accumulation;
  return chosen;
}

// The architecture timed: xlarge, optionally shallower (--layers) or wider (--hidden).
zt::DebertaConfig bench_model(const Options& o) {
  zt::DebertaConfig model = zt::deberta_v2_xlarge_config();
  if (o.layers > 0) model.num_hidden_layers = o.layers;
  if (o.hidden > 0) {  // wider: heads of 64, FFN 4x, as xlarge is at 1536
    model.hidden_size = model.embedding_size = model.pooler_hidden_size = o.hidden;
    model.num_attention_heads = o.hidden / 64;
    model.intermediate_size = 4 * o.hidden;
  }
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = o.dropout;
  model.gradient_checkpointing = o.gradient_checkpointing;  // the estimate plans what the trainer builds
  using AttentionKernel = zt::DebertaConfig::AttentionKernel;
  model.attention_kernel = o.attention == "stored"  ? AttentionKernel::stored
                           : o.attention == "flash" ? AttentionKernel::flash
                                                    : AttentionKernel::automatic;
  return model;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2),
                   values.end());
  return values[values.size() / 2];
}

struct TimedSteps {
  std::vector<double> losses;
  double step_s = 0;         // the median timed step (--back_to_back: the window's mean)
  double first_step_s = 0;   // the first (warm-up) step, set-up included
  double cpu_update_ms = 0;  // the median CPU AdamW host time of the timed steps (offload; delayed: the
                             // previous step's update)
};

// --warmup untimed steps (profile and peaks reset after them), then --steps timed ones on synthetic batches.
TimedSteps time_steps(const Options& o, zt::optim::MrpcTrainer& trainer) {
  std::mt19937_64 rng(0);
  const int64_t warmup = o.warmup;
  TimedSteps out;
  std::vector<double> times, cpu_update_ms;
  std::vector<zt::data::Batch> window;
  std::chrono::steady_clock::time_point window_start;
  for (int64_t step = 0; step < warmup + o.steps; ++step) {
    if (step == 0 || !o.repeat_batch) {
      window.clear();
      for (int64_t r = 0; r < o.world_size * o.accumulation; ++r)
        window.push_back(synthetic_batch(o.batch, o.seq, rng));
    }
    std::vector<zt::data::Batch> micro_batches = window;  // train_step may consume its batches
    // --back_to_back: one sync before the first timed step and one after the last (below), so a step's
    // queued work may overlap the next one's (overlap_optimizer, overlap_update), as in training.
    const bool sync_each = !o.back_to_back || step < warmup;
    if (sync_each || step == warmup) zt::device_synchronize();
    const auto start = std::chrono::steady_clock::now();
    if (step == warmup) window_start = start;
    out.losses.push_back(trainer.train_step(micro_batches).loss);  // the optimizer is queued; the sync waits
    if (sync_each) zt::device_synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step == 0) out.first_step_s = seconds;
    if (step >= warmup) times.push_back(seconds);
    if (step >= warmup) cpu_update_ms.push_back(trainer.offloaded_update_ms());
    zt::StepProfile& profile = zt::StepProfile::global();
    profile.collect();
    if (step + 1 == warmup) {
      profile.reset();  // profile the timed steps only
      trainer.reset_memory_peaks();
    }
  }
  out.step_s = median(times);
  if (o.back_to_back) {  // the mean over the window: per-step host times say little here
    zt::device_synchronize();
    out.step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count() /
                 static_cast<double>(o.steps);
  }
  out.cpu_update_ms = median(cpu_update_ms);
  return out;
}

// Every rank's peaks by category (the estimator's per-rank plan is beside them in the line), and the
// largest rank's figures.
struct RankPeaks {
  nlohmann::json ranks = nlohmann::json::array();
  zt::DeviceMemoryStats largest;
};
RankPeaks rank_peaks(const zt::optim::MrpcTrainer& trainer) {
  const std::vector<zt::DeviceMemoryStats> per_rank = trainer.rank_memory();
  RankPeaks out{.largest = per_rank.front()};  // ranks are near equal
  for (const zt::DeviceMemoryStats& m : per_rank) {
    if (m.peak_in_use_total > out.largest.peak_in_use_total) out.largest = m;
    nlohmann::json peaks;
    for (int c = 0; c < zt::kMemoryCategoryCount; ++c)
      peaks[std::string(zt::memory_category_name(static_cast<zt::MemoryCategory>(c)))] = gib(m.peak[c]);
    out.ranks.push_back({{"peak_gib", gib(m.peak_in_use_total)},
                         {"peak_reserved_gib", gib(m.peak_reserved)},
                         {"peak_by_category_gib", peaks}});
  }
  return out;
}

int run(int argc, char** argv) {
  Options o = parse(argc, argv);
  zt::DebertaConfig model = bench_model(o);
  const zt::DType compute = zt::parse_dtype(o.dtype);  // --dtype was checked: bf16, fp16 or fp32
  // The configuration is checked first, so that a wrong flag is told on any machine; the estimate plans the
  // offload the trainer builds from it (zero_offload: streamed gradients, disk buffers, sub-groups).
  zt::optim::TrainConfig config = bench_config(o, model, compute);
  nlohmann::json chosen_plan;
  if (o.auto_plan) {
    const zt::plan::AutoPlan chosen = choose_bench_plan(o, model, compute, config);
    chosen_plan = plan_json(chosen.choice.ranked[*chosen.choice.chosen]);
    model.gradient_checkpointing = o.gradient_checkpointing;
    config = bench_config(o, model, compute);  // resolved as an explicit run of the chosen plan is
    if (o.estimate_only) {
      nlohmann::json candidates = nlohmann::json::array();
      for (const zt::plan::Candidate& c : chosen.choice.ranked) candidates.push_back(plan_json(c));
      // estimate_gib: the plan of the flags the choice became (its total is the chosen plan's device_gib).
      std::printf("%s\n", nlohmann::json{{"params", zt::ParameterTable(model).total_numel()},
                                         {"global_batch", o.batch * o.accumulation * o.world_size},
                                         {"seq", o.seq},
                                         {"gpu_memory_limit", o.gpu_memory_limit},
                                         {"plan", chosen_plan},
                                         {"estimate_gib",
                                          estimate_json(model, o, compute, zt::optim::zero_offload(config))},
                                         {"candidates", candidates}}
                              .dump()
                              .c_str());
      return 0;
    }
    std::fputs(chosen.report.c_str(), stderr);
  }
  const zt::optim::ZeroOffload offload = zt::optim::zero_offload(config);
  if (o.estimate_only) {
    std::printf("%s\n", nlohmann::json{{"params", zt::ParameterTable(model).total_numel()},
                                       {"layers", model.num_hidden_layers},
                                       {"hidden", model.hidden_size},
                                       {"estimate_gib", estimate_json(model, o, compute, offload)}}
                            .dump()
                            .c_str());
    return 0;
  }
  ZT_CHECK(zt::cuda_available(), "bench_train_step times the GPU step: ", zt::describe_devices());
  if (config.gpu_memory_limit > 0 && o.world_size == 1)
    zt::set_device_memory_limit(config.gpu_memory_limit);  // ranks > 1: per rank, by the trainer
  if (o.profile) zt::StepProfile::global().enable(true);
  zt::optim::MrpcTrainer trainer(config, model);
  const TimedSteps timed = time_steps(o, trainer);

  // What the delayed update's floor, max(forward + backward, CPU update), is made of: the CPU AdamW's host
  // time, and with --profile the device time of the fwd.* and bwd.* segments per step.
  nlohmann::json segments = nlohmann::json::object();
  double forward_backward_ms = 0;
  for (const auto& [name, ms] : zt::StepProfile::global().ms_per_step()) {
    segments[name] = round_to(ms, 1e-3);
    if (name.starts_with("fwd.") || name.starts_with("bwd.")) forward_backward_ms += ms;
  }
  const zt::ParameterTable table(model);
  const int64_t embed = model.vocab_size * model.hidden_size;
  const double samples = static_cast<double>(o.batch * o.accumulation * o.world_size);
  const double flops =
      6.0 * static_cast<double>(table.total_numel() - embed) * samples * static_cast<double>(o.seq);
  const RankPeaks peaks = rank_peaks(trainer);
  const double step_s = timed.step_s;
  nlohmann::json line = {
      {"impl", "zerotrain"},
      {"dtype", o.dtype},
      {"batch", o.batch},
      {"accumulation", o.accumulation},
      {"seq", o.seq},
      {"layers", model.num_hidden_layers},
      {"zero_stage", o.zero_stage},
      {"offload", o.offload},
      {"pin_memory", o.pin_memory},
      {"delayed_update", o.delayed_update},
      {"offload_ratio", o.offload_ratio},
      {"overlap_update", trainer.overlaps_offloaded_update()},  // as the engine decided (on where it applies)
      {"overlap_optimizer", o.overlap_optimizer},
      {"gradient_checkpointing", o.gradient_checkpointing},
      {"attention", zt::DebertaForSequenceClassification::uses_flash_attention(model, o.seq, compute)
                        ? "flash"
                        : "stored"},
      {"back_to_back", o.back_to_back},
      {"overlap_comm", o.overlap_comm},
      {"nvme_path", o.nvme_path},
      {"nvme_param", o.nvme_param},
      {"params", table.total_numel()},
      {"first_step_s", round_to(timed.first_step_s, 1e-3)},
      {"losses", timed.losses},
      {"step_ms", round_to(step_s * 1e3, 1e-2)},
      {"cpu_update_ms", round_to(timed.cpu_update_ms, 1e-2)},
      {"forward_backward_ms",
       o.profile ? nlohmann::json(round_to(forward_backward_ms, 1e-2)) : nlohmann::json()},
      {"segments_ms", segments},
      {"samples_per_s", round_to(samples / step_s, 0.1)},
      {"approx_tflops", round_to(flops / step_s / 1e12, 0.1)},
      {"peak_gib", round_to(static_cast<double>(peaks.largest.peak_in_use_total) / kGiB, 0.01)},
      {"peak_reserved_gib", round_to(static_cast<double>(peaks.largest.peak_reserved) / kGiB, 0.01)},
      {"world_size", o.world_size},
      {"gpu_memory_limit", o.gpu_memory_limit},
      {"ranks", peaks.ranks},
      {"estimate_gib", estimate_json(model, o, compute, offload)},
      {"device", zt::describe_devices()},
      {"switches", zt_switches()}};
  if (!chosen_plan.is_null()) line["plan"] = chosen_plan;  // --auto_plan: the choice, its predicted step
  if (o.profile) std::fputs(zt::StepProfile::global().report().c_str(), stderr);
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool_main("bench_train_step", argc, argv, run);
}
