#include "optim/zero/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>
#include <vector>

#include "kernels/disentangled_attention.h"
#include "model/deberta.h"
#include "runtime/check.h"
#include "runtime/device_allocator.h"
#include "runtime/env_switch.h"
#include "runtime/memory_size.h"

namespace zt::optim {

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // per stream, kernels/cuda/gemm.cu

// The largest per-call scratch of a step: the disentangled attention's (kernels/disentangled_attention.h,
// kernels/cuda/disentangled_attention.cu), taken from the allocator for one call and given back after it,
// so the larger of forward and backward counts. With P = B N L L and the positional scores [N, B L, W8]
// (W = the table rows reached, min(2 att_span, 2L - 1), padded to a multiple of 8):
//   forward   none where the forward is one kernel (kernels::short_attention_forward_shape: 16-bit heads of
//             64 at L <= 128); else C2P and P2C scores in f32 (2 x 4 N B L W8) + the content scores in f32
//             when P is stored in a 16-bit T (4 P) + the dropped probabilities P~ in T (with dropout);
//   backward  G in T (16-bit T) + P~ in T (with dropout; the softmax backward writes it beside G) + the
//             bucket sums Gc, Gp in T (2 x N B L W8 T) + during a term's table gradient its padded table
//             window (W8 x D T) and, B*L split into s > 1 slices, the f32 partials (N s W8 d 4), all live
//             at once; + dP / G in f32 (4 P) unless the short backward (the forward's shapes, L % 8 == 0)
//             writes Gc and Gp itself, which it does when every window row holds one distance (W = 2L - 1).
// The flash path (DebertaForSequenceClassification::uses_flash_attention) keeps only the positional terms.
// At xlarge, seq 128, bf16 with dropout: the backward's G, P~, Gc and Gp, 4.5 MiB per sample (0.56 GiB at
// batch 128), and the table gradient's few MiB. The other per-call scratch is not live at the same time: the
// larger of the two counts (conv1d_scratch_bytes; LayerNorm's partials are smaller than either).
size_t attention_scratch_bytes(const DebertaConfig& model, int64_t batch, int64_t length, DType compute,
                               const std::function<size_t(size_t)>& held) {
  if (!model.relative_attention) return 0;
  const auto t = dtype_size(compute);
  const int64_t window = std::min(model.rel_embedding_rows(), 2 * length - 1);
  const int64_t pitch = (window + 7) / 8 * 8;
  const auto probs = static_cast<size_t>(batch * model.num_attention_heads * length * length);
  const auto positional = static_cast<size_t>(model.num_attention_heads * batch * length * pitch);
  if (DebertaForSequenceClassification::uses_flash_attention(model, length, compute)) {
    // The flash path: nothing [L, L]. Forward: C2P and P2C in f32. Backward: both recomputed, the f32 bucket
    // sums Gc, Gp beside them, and flash_backward_scratch_bytes (dQ's f32 sum, D); after the kernels the
    // scores go back before Gc, Gp are rounded to T (2 x 4 + 2 bytes a positional element, under the 4 x 4
    // peak).
    const size_t backward = kernels::flash_backward_scratch_bytes(batch, model.num_attention_heads, length);
    return std::max(2 * held(positional * 4), 4 * held(positional * 4) + held(backward));
  }
  const bool dropout = model.attention_probs_dropout_prob > 0;
  const bool low_precision = compute != DType::f32;
  // Forward: the content scores in f32 apart from P when P is stored in T; P~ only with dropout.
  const size_t forward = kernels::short_attention_forward_shape(compute, model.head_size(), length)
                             ? 0
                             : 2 * held(positional * 4) + (low_precision ? held(probs * 4) : 0) +
                                   (dropout ? held(probs * t) : 0);
  // Backward: G in f32 (unless the short backward gathers itself) and in T with 16-bit storage, P~ in T with
  // dropout, Gc and Gp, all live to the end; beside them during a term's table gradient, the padded table
  // window and (B*L split in slices) the f32 partials.
  const int64_t slices = kernels::attention_table_grad_slices(batch * length);
  const size_t table_grad =
      held(static_cast<size_t>(pitch * model.hidden_size) * t) +
      (slices > 1
           ? held(static_cast<size_t>(model.num_attention_heads * slices * pitch * model.head_size()) * 4)
           : 0);
  const bool short_backward =
      kernels::short_attention_forward_shape(compute, model.head_size(), length) && length % 8 == 0;
  const bool short_gathers = short_backward && window == 2 * length - 1;
  // The short backward's unrun candidates, switched as kernels/cuda/disentangled_attention.cu switches them:
  // its own dV / dQ / dK (no G or P~ in T) and the gathers as bands of L + 8 entries a row.
  const bool short_products = short_backward && read_env_switch("ZT_SHORT_BACKWARD_PRODUCTS");
  const bool banded = short_gathers && read_env_switch("ZT_GATHER_BANDS") &&
                      kernels::positional_kernel_shape(compute, model.head_size(), pitch, batch * length);
  const size_t score_grads =
      (short_gathers ? 0 : held(probs * 4)) +
      (short_products ? 0 : (low_precision ? held(probs * t) : 0) + (dropout ? held(probs * t) : 0));
  const auto gathers = banded ? static_cast<size_t>(model.num_attention_heads * batch * length *
                                                    kernels::gathers_band_width(length))
                              : positional;
  const size_t backward = score_grads + 2 * held(gathers * t) + table_grad;
  return std::max(forward, backward);
}

// The encoder conv's per-call scratch (kernels/cuda/conv1d.cu), with rows R = B L, K = kernel x hidden:
//   forward   the unfolded input cols [R, K] and the regrouped weight [hidden, K] in T;
//   backward  the same two, then dcols [R, K] f32 (freed) and dWr [hidden, K] f32, one after the other.
// It is the larger one for wide models at small batches: the 6.23 B shape (hidden 4096, batch 8) peaks at
// 24 + 96 + 192 MiB in the conv's backward, against 0.17 GiB in the attention's forward (H200-measured
// scratch 0.336 GiB with the GEMM workspace; 0.203 when only the attention was modelled).
size_t conv1d_scratch_bytes(const DebertaConfig& model, int64_t batch, int64_t length, DType compute,
                            const std::function<size_t(size_t)>& held) {
  if (!model.has_conv()) return 0;
  const auto t = dtype_size(compute);
  const auto rows = static_cast<size_t>(batch * length);
  const auto unfolded = static_cast<size_t>(model.conv_kernel_size * model.hidden_size);
  const auto features = static_cast<size_t>(model.hidden_size);
  return held(rows * unfolded * t) + held(features * unfolded * t) +
         std::max(held(rows * unfolded * 4), held(features * unfolded * 4));
}
}  // namespace

MemoryEstimate estimate_memory(const DebertaConfig& model, int stage, int world_size, DType compute,
                               int64_t max_batch, int64_t max_length, ZeroOffload offload, bool device,
                               int64_t micro_batches_per_step) {
  const ParameterTable table(model);
  const ZeroPartition partition(table, world_size);
  const auto& units = partition.units();
  // What each buffer the run allocates takes: on the GPU the caching allocator hands out its size class
  // (up to ~6 % more than asked, runtime/device_allocator.h), so each buffer is rounded on its own, as the
  // engine (optim/zero/engine.cpp) and the model allocate them.
  auto held = [&](size_t bytes) { return device && bytes > 0 ? DeviceAllocator::size_class(bytes) : bytes; };
  MemoryEstimate e;
  e.stage = stage;
  e.world_size = world_size;
  e.offload = offload;
  // The engine's buffers, each rounded as the allocator holds it (host and disk bytes exact).
  // ZeroEngineOptions::split_master is on by default: the master as the run will hold it.
  e.state = zero_state_bytes(partition, stage, compute, offload, held,
                             device && split_master_applies(DeviceKind::cuda, stage, compute, offload));
  // Stage 0 reduces whole units with all_reduce, which in-process GPU ranks run through a per-rank scratch
  // as large as the largest unit's f32 gradients (stage 1 reduce-scatters into place).
  if (world_size > 1 && stage == 0) {
    int64_t largest = 0;
    for (const ZeroUnit& u : units) largest = std::max(largest, u.numel);
    e.comm_scratch = held(static_cast<size_t>(largest) * 4);
  }
  if (device)
    e.scratch =
        kGemmWorkspaceBytes + std::max(attention_scratch_bytes(model, max_batch, max_length, compute, held),
                                       conv1d_scratch_bytes(model, max_batch, max_length, compute, held));
  // The batch arena: ids and mask [B, L] and labels [B], i64.
  const auto batch_bytes = static_cast<size_t>((2 * max_batch * max_length + max_batch) * 8);
  // Stage 0 with one micro-batch per step: the gradient buffer inside the activation arena.
  std::optional<GradientLayout> on_activations;
  if (gradients_on_activations(model, stage, micro_batches_per_step)) {
    on_activations = stage0_gradient_layout(partition);
    e.state.gradients = 0;
  }
  e.activations = held(DebertaForSequenceClassification::plan_activations(
                           model, max_batch, max_length, compute, on_activations ? &*on_activations : nullptr)
                           .total_bytes()) +
                  held(batch_bytes);
  return e;
}

namespace {

// The largest batch in [1, limit] whose estimate fits `budget`, or 0 when none does (the estimate grows
// with the batch, so a binary search).
int64_t largest_fitting_batch(const DebertaConfig& model, int stage, int world_size, DType compute,
                              int64_t max_length, ZeroOffload offload, double budget, int64_t limit,
                              int64_t micro_batches_per_step) {
  auto fits = [&](int64_t b) {
    return static_cast<double>(estimate_memory(model, stage, world_size, compute, b, max_length, offload,
                                               true, micro_batches_per_step)
                                   .total()) <= budget;
  };
  if (!fits(1)) return 0;
  int64_t lo = 1, hi = limit;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace

// The run's offload as it would apply at `stage`: nothing at stage 0, parameters only at stage 3, the
// streamed gradients only at stages 2/3 (the disk tier and the delayed update change only the host side).
namespace {
ZeroOffload offload_at_stage(const ZeroOffload& run, int stage) {
  if (stage == 0) return {};
  ZeroOffload at = run;
  at.param = run.param && stage == 3;
  at.stream_gradients = run.optimizer && run.stream_gradients && stage >= 2;
  return at;
}
}  // namespace

std::string fitting_settings_hint(const DebertaConfig& model, int stage, int world_size, DType compute,
                                  int64_t batch, int64_t max_length, size_t cap_bytes, ZeroOffload offload,
                                  int64_t micro_batches_per_step) {
  const double budget = oom_budget_bytes(cap_bytes);
  std::ostringstream out;
  out << "  settings that fit " << format_memory_size(cap_bytes) << " per rank (estimated, "
      << format_memory_size(oom_headroom_bytes(cap_bytes)) << " headroom; world size " << world_size
      << ", max_length " << max_length << "):";
  const int64_t limit = std::max<int64_t>(4 * batch, 1024);
  int64_t previous = -1, at_run_stage = 0;
  for (int s = stage; s <= 3; ++s) {
    const ZeroOffload at_stage = offload_at_stage(offload, s);
    const int64_t b = largest_fitting_batch(model, s, world_size, compute, max_length, at_stage, budget,
                                            limit, micro_batches_per_step);
    if (s == stage) at_run_stage = b;
    if (s > stage && b <= previous) continue;  // a higher stage that allows no larger batch is no advice
    out << "\n    stage " << s << ": per_device_train_batch_size <= " << b
        << (b == 0 ? " (nothing fits: the state alone exceeds the cap)" : "");
    previous = b;
  }
  if (!model.gradient_checkpointing) {  // activations, not state: one more encoder forward a step
    DebertaConfig checkpointed = model;
    checkpointed.gradient_checkpointing = true;
    const int64_t b =
        largest_fitting_batch(checkpointed, stage, world_size, compute, max_length,
                              offload_at_stage(offload, stage), budget, limit, micro_batches_per_step);
    if (b > at_run_stage) {
      out << "\n    stage " << stage << " with --gradient_checkpointing (one more encoder forward a step): "
          << "batch <= " << b;
    }
  }
  for (int s = 0; s <= 3; ++s) {
    const ZeroOffload at_stage = offload_at_stage(offload, s);
    if (static_cast<double>(estimate_memory(model, s, world_size, compute, batch, max_length, at_stage, true,
                                            micro_batches_per_step)
                                .total()) <= budget) {
      if (s != stage) out << "\n    batch " << batch << " fits from ZeRO stage " << s;
      return out.str();
    }
  }
  out << "\n    batch " << batch << " fits no stage at world size " << world_size
      << ": lower the batch or max_length, or add ranks";
  return out.str();
}

std::string describe_memory_estimates(const DebertaConfig& model, int run_stage, int world_size,
                                      DType compute, int64_t max_batch, int64_t max_length,
                                      ZeroOffload run_offload, bool device, int64_t micro_batches_per_step) {
  std::ostringstream out;
  out << "memory per rank (" << dtype_name(compute) << ", world size " << world_size << ", batch "
      << max_batch << " x " << max_length << "; device columns, then host with CPU offload):\n";
  char line[320];
  std::snprintf(line, sizeof line, "  %-22s %11s %11s %11s %11s %11s %11s %11s %11s\n", "stage", "params",
                "grads", "master", "adam m,v", "buffers", "activations", "device", "host");
  out << line;
  struct Row {
    int stage;
    ZeroOffload offload;
    const char* label;
  };
  // The disk tier's row (offload_optimizer and/or offload_param nvme) only for a run that uses it: its host
  // column depends on the run's buffer counts.
  const bool param_disk = run_offload.param_disk_buffers > 0;
  const std::string disk_label = !param_disk                    ? str(run_stage, " +offload nvme")
                                 : run_offload.disk_buffers > 0 ? str(run_stage, " +nvme both")
                                                                : str(run_stage, " +nvme params");
  const Row disk_row{run_stage, run_offload, disk_label.c_str()};
  // The offload rows stream gradients as the run would (no accumulation).
  const ZeroOffload opt{.optimizer = true, .stream_gradients = run_offload.stream_gradients};
  ZeroOffload both = opt;
  both.param = true;
  const Row rows[] = {{0, {}, "0"},
                      {1, {}, "1"},
                      {2, {}, "2"},
                      {3, {}, "3"},
                      {1, offload_at_stage(opt, 1), "1 +offload opt"},
                      {2, offload_at_stage(opt, 2), "2 +offload opt"},
                      {3, offload_at_stage(opt, 3), "3 +offload opt"},
                      {3, offload_at_stage(both, 3), "3 +offload both"}};
  std::vector<Row> all(std::begin(rows), std::end(rows));
  if (run_offload.disk_buffers > 0 || param_disk) all.push_back(disk_row);
  // A partial offload's row for the run: (1 - ratio) of the state on the device, ratio on the host.
  const std::string partial_label = str(run_stage, " +offload ", run_offload.ratio);
  if (run_offload.optimizer && run_offload.ratio < 1.0 && run_stage >= 1)
    all.push_back({run_stage, offload_at_stage(run_offload, run_stage), partial_label.c_str()});
  for (const Row& row : all) {
    const MemoryEstimate e = estimate_memory(model, row.stage, world_size, compute, max_batch, max_length,
                                             row.offload, device, micro_batches_per_step);
    const bool is_run = row.stage == run_stage && row.offload.optimizer == run_offload.optimizer &&
                        (!row.offload.optimizer || row.offload.ratio == run_offload.ratio) &&
                        row.offload.param == run_offload.param &&
                        row.offload.disk_buffers == run_offload.disk_buffers &&
                        row.offload.param_disk_buffers == run_offload.param_disk_buffers;
    std::snprintf(line, sizeof line, "  %-22s %11s %11s %11s %11s %11s %11s %11s %11s\n",
                  (std::string(row.label) + (is_run ? " (run)" : "")).c_str(),
                  format_memory_size(e.state.compute_copy).c_str(),
                  format_memory_size(e.state.gradients).c_str(), format_memory_size(e.state.master).c_str(),
                  format_memory_size(e.state.optimizer).c_str(),
                  format_memory_size(e.state.buffers + e.comm_scratch + e.scratch).c_str(),
                  format_memory_size(e.activations).c_str(), format_memory_size(e.total()).c_str(),
                  format_memory_size(e.host()).c_str());
    out << line;
  }
  if (gradients_on_activations(model, 0, micro_batches_per_step)) {
    out << "  stage 0, one micro-batch per step: the f32 gradients live in the activation arena, on the "
           "slots\n"
           "  each layer's backward is done with (grads column: nothing of their own)\n";
  }
  return out.str();
}

}  // namespace zt::optim
