// The estimator's out-of-memory advice (optim/zero/memory_estimate.h): the batch it names is the largest
// whose estimate fits the cap minus the headroom, and the stage it names is the lowest that fits the batch.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/zero/engine.h"
#include "optim/zero/memory_estimate.h"
#include "optim/zero/partition.h"
#include "runtime/check.h"
#include "runtime/device_allocator.h"
#include "tests/support/scoped_env.h"

namespace zt::optim {
namespace {

constexpr size_t kGiB = size_t{1} << 30;

int64_t advised_batch(const std::string& hint, int stage) {
  std::smatch m;
  const std::regex re("stage " + std::to_string(stage) + ": per_device_train_batch_size <= ([0-9]+)");
  if (!std::regex_search(hint, m, re)) return -1;
  return std::stoll(m[1]);
}

// The device bytes the split master (optim/split_master.h, on for GPU stage-0 bf16 runs) saves over an f32
// master, as the allocator holds each buffer: the rows below measured with the f32 master expect that much
// less now. (Computed from zero_state_bytes, which the engine's state_bytes() also reports: the split
// master's own GPU test checks the engine holds less than 4 bytes a parameter; the peaks measured with it
// are the ninth session's.)
double split_master_saving_gib(const DebertaConfig& model) {
  const ParameterTable table(model);
  const ZeroPartition partition(table, 1);
  auto held = [](size_t bytes) { return DeviceAllocator::size_class(bytes); };
  const size_t f32 = zero_state_bytes(partition, 0, DType::bf16, {}, held, false).master;
  const size_t split = zero_state_bytes(partition, 0, DType::bf16, {}, held, true).master;
  return static_cast<double>(f32 - split) / static_cast<double>(kGiB);
}

bool fits(const DebertaConfig& model, int stage, int64_t batch, size_t cap) {
  return static_cast<double>(estimate_memory(model, stage, 2, DType::bf16, batch, 128).total()) <=
         oom_budget_bytes(cap);
}

// The headroom kept below a cap: 1 % of it, at least 256 MiB, never over 5 %.
TEST(MemoryEstimateHint, HeadroomIsOnePercentAtLeast256MiBAtMostFivePercent) {
  constexpr size_t kMiB = size_t{1} << 20;
  EXPECT_EQ(oom_headroom_bytes(24 * kGiB), 256 * kMiB);  // 1 % is 245.8 MiB
  EXPECT_EQ(oom_headroom_bytes(80 * kGiB), 80 * kGiB / 100);
  EXPECT_EQ(oom_headroom_bytes(200 * kMiB), 10 * kMiB);  // 5 % of a small cap
  EXPECT_EQ(oom_headroom_bytes(5 * kGiB + 128 * kMiB), 256 * kMiB);
  EXPECT_DOUBLE_EQ(oom_budget_bytes(24 * kGiB), static_cast<double>(24 * kGiB - 256 * kMiB));
}

TEST(MemoryEstimateHint, NamesTheLargestFittingBatchAndTheLowestFittingStage) {
  const DebertaConfig model = deberta_v2_xlarge_config();
  const size_t cap = 24 * kGiB;
  const std::string hint = fitting_settings_hint(model, 0, 2, DType::bf16, 96, 128, cap);
  const int64_t b0 = advised_batch(hint, 0);
  ASSERT_GT(b0, 0) << hint;
  EXPECT_TRUE(fits(model, 0, b0, cap));
  EXPECT_FALSE(fits(model, 0, b0 + 1, cap));
  // Higher stages shard the state: the hint names one that fits a larger batch than stage 0 (each stage it
  // names only where its batch beats the stages below), with that stage's largest fitting batch.
  int named = 0;
  for (int stage = 1; stage <= 3; ++stage)
    if (advised_batch(hint, stage) > 0) named = stage;
  ASSERT_GT(named, 0) << hint;
  const int64_t b = advised_batch(hint, named);
  EXPECT_GT(b, b0) << hint;
  EXPECT_TRUE(fits(model, named, b, cap));
  EXPECT_FALSE(fits(model, named, b + 1, cap));
  int lowest = -1;
  for (int s = 3; s >= 0; --s)
    if (fits(model, s, 96, cap)) lowest = s;
  if (lowest > 0) {
    EXPECT_NE(hint.find("batch 96 fits from ZeRO stage " + std::to_string(lowest)), std::string::npos)
        << hint;
  } else {
    EXPECT_NE(hint.find("fits no stage"), std::string::npos) << hint;
  }
}

// Gradient checkpointing trades a forward for activations: the hint names the batch it fits at the run's
// stage (more than without), and says nothing of it when the run already checkpoints.
TEST(MemoryEstimateHint, NamesTheBatchGradientCheckpointingFits) {
  DebertaConfig model = deberta_v2_xlarge_config();
  const size_t cap = 24 * kGiB;
  const std::string hint = fitting_settings_hint(model, 0, 1, DType::bf16, 96, 128, cap);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      hint, m,
      std::regex(
          "stage 0 with --gradient_checkpointing \\(one more encoder forward a step\\): batch <= ([0-9]+)")))
      << hint;
  const int64_t b = std::stoll(m[1]);
  EXPECT_GT(b, advised_batch(hint, 0)) << hint;
  model.gradient_checkpointing = true;
  const double budget = oom_budget_bytes(cap);
  EXPECT_LE(static_cast<double>(estimate_memory(model, 0, 1, DType::bf16, b, 128).total()), budget);
  EXPECT_GT(static_cast<double>(estimate_memory(model, 0, 1, DType::bf16, b + 1, 128).total()), budget);
  EXPECT_EQ(fitting_settings_hint(model, 0, 1, DType::bf16, 400, 128, cap).find("--gradient_checkpointing"),
            std::string::npos);
}

TEST(MemoryEstimateHint, SaysWhenTheStateAloneExceedsTheCap) {
  const std::string hint = fitting_settings_hint(deberta_v2_xlarge_config(), 0, 1, DType::bf16, 8, 128, kGiB);
  EXPECT_EQ(advised_batch(hint, 0), 0) << hint;
  EXPECT_NE(hint.find("nothing fits"), std::string::npos) << hint;
  EXPECT_NE(hint.find("fits no stage"), std::string::npos) << hint;
}

// The estimate against the H200's per-category peaks (bench_train_step on one H200, xlarge, seq 128, bf16,
// dropout 0.1, attention probabilities stored in bf16; docs/bench/2026-12-03-h200-acceptance/ validate/ and
// limits/ steps.jsonl, and docs/bench/2026-12-03-h200-session3/): the scratch peak is the GEMM workspace plus
// the larger of the attention's and the encoder conv's per-call scratch; totals equal to the MiB at every
// stage, offload and world size measured. (Before the attention scratch was modelled the estimate was
// 0.26-0.84 GiB short; before the conv's, the 6.23 B model's was 0.13 GiB short.) The offload rows without
// stream_gradients are the path with gradient accumulation (a device f32 gradient shard); the trainer streams
// the gradients to the host at stages 2-3 without accumulation (zero_offload), which the session-3 rows are.
// Since the stored path's forward became one kernel at L <= 128 (2026-12-07) the attention's per-call scratch
// at seq 128 is its backward's, smaller: these rows hold every category but the scratch (total - scratch),
// and EqualsTheH100PeakWithTheShortAttentionKernels the scratch.
TEST(MemoryEstimate, EqualsTheH200PeaksIncludingTheAttentionScratch) {
  DebertaConfig model = deberta_v2_xlarge_config();
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = 0.1;
  const ZeroOffload none{}, optimizer{.optimizer = true}, both{.optimizer = true, .param = true};
  const ZeroOffload streamed{.optimizer = true, .stream_gradients = true},
      streamed_both{.optimizer = true, .param = true, .stream_gradients = true},
      streamed_delayed{.optimizer = true, .delayed_update = true, .stream_gradients = true};
  const struct {
    int stage, world;
    ZeroOffload offload;
    int64_t batch;
    double scratch_gib, total_gib;
  } measured[] = {{0, 1, none, 40, 0.354, 21.041},
                  {0, 1, none, 56, 0.482, 23.170},
                  {2, 1, none, 48, 0.418, 22.106},
                  {2, 2, none, 40, 0.354, 15.299},
                  {3, 2, none, 40, 0.354, 14.959},
                  {2, 1, optimizer, 40, 0.354, 10.916},
                  {2, 1, optimizer, 128, 1.063, 23.125},
                  {3, 1, both, 40, 0.354, 9.733},
                  {3, 1, both, 120, 1.020, 20.899},
                  {3, 1, both, 136, 1.149, 23.028},
                  {2, 1, streamed, 128, 1.063, 20.758},
                  {2, 1, streamed, 144, 1.191, 22.887},
                  {3, 1, streamed_both, 128, 1.063, 19.575},
                  {2, 1, streamed_delayed, 40, 0.354, 8.549},
                  {0, 1, none, 8, 0.096, 16.471}};
  for (const auto& m : measured) {
    // The stage-0 rows were measured before stage 0 put its gradients on the activations with one
    // micro-batch per step: they are the layout with gradient accumulation (two micro-batches).
    const MemoryEstimate e = estimate_memory(model, m.stage, m.world, DType::bf16, m.batch, 128, m.offload,
                                             true, m.stage == 0 ? 2 : 1);
    const std::string row = str("stage ", m.stage, ", world ", m.world, ", batch ", m.batch);
    const double split_saving =
        m.stage == 0 && m.offload.optimizer == false ? split_master_saving_gib(model) : 0;
    EXPECT_NEAR(static_cast<double>(e.total() - e.scratch) / kGiB, m.total_gib - m.scratch_gib - split_saving,
                0.0015)
        << row;
  }
}

// Stage 0 with one micro-batch per step, its gradients on the activations (GradientLayout): the H200's peaks
// (docs/bench/2026-12-04-h200-session7/vs_torch/vs_torch.json, xlarge bf16 seq 128, dropout 0.1) to the MiB.
TEST(MemoryEstimate, EqualsTheH200PeaksWithTheGradientsOnTheActivations) {
  DebertaConfig model = deberta_v2_xlarge_config();
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = 0.1;
  const struct {
    int64_t batch;
    double scratch_gib, total_gib;
  } measured[] = {{40, 0.354, 17.666}, {64, 0.547, 21.360}, {8, 0.096, 15.408}};
  for (const auto& m : measured) {
    const MemoryEstimate e = estimate_memory(model, 0, 1, DType::bf16, m.batch, 128);
    EXPECT_EQ(e.state.gradients, 0u);
    // Every category but the scratch (see EqualsTheH200PeaksIncludingTheAttentionScratch).
    EXPECT_NEAR(static_cast<double>(e.total() - e.scratch) / kGiB,
                m.total_gib - m.scratch_gib - split_master_saving_gib(model), 0.0015)
        << "batch " << m.batch;
  }
}

// The one-kernel forward and the short backward at seq 128 (kernels/cuda/short_disentangled_attention.cu):
// the attention's scratch is its backward's (G and P~ in T, Gc and Gp, a term's table window and f32
// partials; no f32 dP~) beside the GEMM workspace. Measured on one H100
// (docs/bench/2026-12-07-h100-session28/ call2_bs40_new.json, xlarge bf16 seq 128 dropout 0.1, stage 0, batch
// 40): peak 15.96 GiB, as the JSON gives it (two decimals); session 26's 16.022 with the f32 dP~ buffer,
// 0.060 GiB more, is what the model drops.
TEST(MemoryEstimate, EqualsTheH100PeakWithTheShortAttentionKernels) {
  DebertaConfig model = deberta_v2_xlarge_config();
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = 0.1;
  const MemoryEstimate e = estimate_memory(model, 0, 1, DType::bf16, 40, 128);
  EXPECT_NEAR(static_cast<double>(e.total()) / kGiB, 15.96, 0.005);
}

// The short backward's unrun candidates (kernels/cuda/disentangled_attention.cu reads the same switches): its
// own dV / dQ / dK drops G and P~ in T (2 x 2 B N L L bytes: 60 MiB at batch 40), after which the encoder
// conv's backward scratch (~3.5 MB a sample) is the larger per-call scratch at every batch, so the gathers as
// bands (Gc and Gp 3.1 -> 1.7 MB a sample) leave the peak where it is.
TEST(MemoryEstimate, TheShortBackwardCandidatesDropTheirScratch) {
  DebertaConfig model = deberta_v2_xlarge_config();
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = 0.1;
  const auto total = [&](int64_t batch) {
    return estimate_memory(model, 0, 1, DType::bf16, batch, 128).total();
  };
  const size_t base40 = total(40), base128 = total(128);
  const test::ScopedEnv products("ZT_SHORT_BACKWARD_PRODUCTS", "1");
  const size_t products40 = total(40), products128 = total(128);
  EXPECT_LT(products40, base40);
  EXPECT_LT(products128, base128);
  const test::ScopedEnv bands("ZT_GATHER_BANDS", "1");
  EXPECT_EQ(total(40), products40);
  EXPECT_EQ(total(128), products128);
}

// The 6.23 B shape (hidden 4096, 64 heads, FFN 16384, 28 layers; ZeRO-3, both offloads streamed, batch 8):
// 9.703 GiB measured on the H200 (session 3, big/steps.jsonl), scratch 0.336 GiB of it — the encoder conv's
// backward, not the attention, is the largest per-call scratch at this width and batch.
TEST(MemoryEstimate, EqualsTheH200PeakOfTheWideModelWhereTheConvScratchDominates) {
  DebertaConfig model = deberta_v2_xlarge_config();
  model.hidden_dropout_prob = model.attention_probs_dropout_prob = 0.1;
  model.num_hidden_layers = 28;
  model.hidden_size = model.embedding_size = model.pooler_hidden_size = 4096;
  model.num_attention_heads = 64;
  model.intermediate_size = 16384;
  const MemoryEstimate e = estimate_memory(model, 3, 1, DType::bf16, 8, 128,
                                           {.optimizer = true, .param = true, .stream_gradients = true});
  EXPECT_NEAR(static_cast<double>(e.scratch) / kGiB, 0.336, 0.0015);
  EXPECT_NEAR(static_cast<double>(e.total()) / kGiB, 9.703, 0.0015);
}

// Stage 0 with one micro-batch per step keeps its gradients in the activation arena (GradientLayout): at
// xlarge's bs 40 every layer's slots outweigh its gradients, so all but the last layer's gradients and the
// embeddings' (0.74 GiB of word-embedding gradient) sit on dead slots; at any batch it costs no more than a
// buffer of its own, and nothing changes with accumulation or at other stages.
TEST(MemoryEstimate, GradientsOnTheActivationsTakeTheDeadSlots) {
  DebertaConfig model = deberta_v2_xlarge_config();
  auto total = [&](int stage, int64_t batch, int64_t micro) {
    return estimate_memory(model, stage, 1, DType::bf16, batch, 128, {}, true, micro).total();
  };
  const MemoryEstimate own = estimate_memory(model, 0, 1, DType::bf16, 40, 128, {}, true, 2);
  const MemoryEstimate shared = estimate_memory(model, 0, 1, DType::bf16, 40, 128, {}, true, 1);
  EXPECT_EQ(shared.state.gradients, 0u);
  const ParameterTable table(model);  // the partition keeps a reference to it
  const ZeroPartition partition(table, 1);
  const auto bytes = [&](size_t unit) { return static_cast<size_t>(partition.units()[unit].numel) * 4; };
  const size_t overlaid = bytes(partition.embeddings_unit()) + 23 * bytes(partition.layer_unit(0));
  std::printf("xlarge bs 40 bf16 stage 0: %.3f GiB with a gradient buffer, %.3f GiB on the activations\n",
              static_cast<double>(own.total()) / kGiB, static_cast<double>(shared.total()) / kGiB);
  EXPECT_LE(shared.total() + overlaid, own.total() + (size_t{16} << 20));  // allocator rounding
  for (int64_t batch : {1, 8, 16, 64, 128}) EXPECT_LE(total(0, batch, 1), total(0, batch, 2)) << batch;
  for (int stage = 1; stage <= 3; ++stage) EXPECT_EQ(total(stage, 40, 1), total(stage, 40, 2)) << stage;
  model.gradient_checkpointing = true;
  EXPECT_EQ(total(0, 40, 1), total(0, 40, 2));
}

}  // namespace
}  // namespace zt::optim
