// Training at L 2048 is deterministic run to run: two fresh trainers (DeBERTa-v2-xlarge layers, 2 of them, a
// 1000-token vocabulary; bf16, dropout 0.1 on hidden states and attention probabilities, AdamW) take the same
// 3 steps on the same batches (batch 2, one row padded after 1500 tokens) from the golden init, and must give
// the same loss at every step and the same fp32 master weights, bit for bit. At this length the attention is
// the flash path (nothing [L, L] stored; its dropout masks are counter-based Philox, functions of seed, step,
// layer and site), whose backward sums dK, dV and the position-score gradients in a fixed order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "app/trainer/trainer.h"
#include "data/batcher.h"
#include "model/config.h"
#include "model/deberta.h"
#include "model/golden_init.h"
#include "runtime/arena.h"
#include "tests/support/gpu.h"

namespace zt::optim {
namespace {

constexpr int64_t kBatch = 2, kSeq = 2048, kPaddedRowLength = 1500, kSteps = 3;

DebertaConfig long_model() {
  DebertaConfig c = deberta_v2_xlarge_config();
  c.num_hidden_layers = 2;
  c.vocab_size = 1000;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0.1;
  return c;
}

// Step s's batch: random ids in [5, vocab), [CLS] first; row 1 real for kPaddedRowLength tokens.
data::Batch long_batch(int64_t step, int64_t vocab) {
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(step));
  std::uniform_int_distribution<int64_t> id(5, vocab - 1), label(0, 1);
  data::Batch b;
  b.batch_size = kBatch;
  b.seq_len = kSeq;
  b.input_ids.resize(static_cast<size_t>(kBatch * kSeq));
  b.attention_mask.assign(static_cast<size_t>(kBatch * kSeq), 1);
  for (int64_t& x : b.input_ids) x = id(rng);
  for (int64_t r = 0; r < kBatch; ++r) b.input_ids[static_cast<size_t>(r * kSeq)] = 1;
  for (int64_t t = kPaddedRowLength; t < kSeq; ++t) {
    b.input_ids[static_cast<size_t>(kSeq + t)] = 0;
    b.attention_mask[static_cast<size_t>(kSeq + t)] = 0;
  }
  for (int64_t r = 0; r < kBatch; ++r) b.labels.push_back(label(rng));
  return b;
}

// FNV-1a over the bytes of every parameter, in table order.
uint64_t checksum(const Arena& params, const ParameterTable& table) {
  uint64_t h = 1469598103934665603ull;
  for (const ParameterInfo& p : table.entries()) {
    const Tensor t = params.tensor(p.name);
    const auto* bytes = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

struct TrainingRun {
  std::vector<double> losses;
  uint64_t initial_checksum = 0, final_checksum = 0;
};

TrainingRun train_three_steps() {
  const DebertaConfig model = long_model();
  TrainConfig config = TrainConfig::from_args(std::vector<std::string>{"--device",
                                                                       "cuda",
                                                                       "--dtype",
                                                                       "bf16",
                                                                       "--per_device_train_batch_size",
                                                                       std::to_string(kBatch),
                                                                       "--max_length",
                                                                       std::to_string(kSeq),
                                                                       "--learning_rate",
                                                                       "1e-4",
                                                                       "--weight_decay",
                                                                       "0.01",
                                                                       "--max_grad_norm",
                                                                       "1.0",
                                                                       "--lr_scheduler_type",
                                                                       "constant",
                                                                       "--num_warmup_steps",
                                                                       "0",
                                                                       "--seed",
                                                                       "7"});
  config.resolve({.world_size = 1, .hidden_size = model.hidden_size, .num_train_examples = kBatch * kSteps});
  MrpcTrainer trainer(config, model);
  Arena host("golden init", trainer.table().layout(DType::f32));
  for (const ParameterInfo& p : trainer.table().entries()) {
    const Tensor t = host.tensor(p.name);
    golden_init_fill(p.name, p.kind, std::span<float>(t.data_as<float>(), static_cast<size_t>(t.numel())));
  }
  trainer.load_parameters(host);
  TrainingRun run;
  run.initial_checksum = checksum(trainer.params(), trainer.table());
  for (int64_t s = 0; s < kSteps; ++s) {
    std::vector<data::Batch> window{long_batch(s, model.vocab_size)};
    run.losses.push_back(trainer.train_step(window).loss);
  }
  run.final_checksum = checksum(trainer.params(), trainer.table());
  return run;
}

TEST(LongTrainingGpu, TwoRunsAtL2048GiveTheSameLossesAndWeights) {
  ZT_SKIP_WITHOUT_GPU();
  ASSERT_TRUE(DebertaForSequenceClassification::uses_flash_attention(long_model(), kSeq, DType::bf16));
  const TrainingRun a = train_three_steps();
  const TrainingRun b = train_three_steps();
  ASSERT_EQ(a.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(b.losses.size(), a.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) {
    EXPECT_TRUE(std::isfinite(a.losses[s])) << "step " << s;
    // Bit for bit: the same doubles, not close ones.
    EXPECT_EQ(std::memcmp(&a.losses[s], &b.losses[s], sizeof(double)), 0)
        << "step " << s << ": " << a.losses[s] << " vs " << b.losses[s];
  }
  EXPECT_EQ(a.initial_checksum, b.initial_checksum);
  EXPECT_NE(a.final_checksum, a.initial_checksum) << "the steps changed no weight";
  EXPECT_EQ(a.final_checksum, b.final_checksum)
      << "the fp32 master weights differ after " << kSteps << " steps";
  std::printf(
      "L %lld, batch %lld, %lld steps: losses %.9g %.9g %.9g in both runs; weights checksum %016llx\n",
      static_cast<long long>(kSeq), static_cast<long long>(kBatch), static_cast<long long>(kSteps),
      a.losses[0], a.losses[1], a.losses[2], static_cast<unsigned long long>(a.final_checksum));
}

}  // namespace
}  // namespace zt::optim
