// The activation plan (DebertaForSequenceClassification::plan_activations) keeps the attention
// probabilities P [B, N, L, L] of every layer in the compute dtype: the CUDA attention stores P in the
// storage dtype of q, k, v (kernels/disentangled_attention.h), so a 16-bit model saves 2 bytes per element
// instead of 4 — the largest saved activation of the xlarge model. The memory estimator reads the same plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "model/config.h"
#include "model/deberta.h"
#include "runtime/arena.h"

namespace zt {
namespace {

std::string probs_slot(int layer) {
  return "layer" + std::to_string(layer) + ".probs";
}

size_t probs_bytes(const ArenaLayout& layout, int layers) {
  size_t sum = 0;
  for (int l = 0; l < layers; ++l) sum += layout.slot(probs_slot(l)).nbytes;
  return sum;
}

TEST(ActivationPlan, AttentionProbsAreStoredInTheComputeDtype) {
  const DebertaConfig c = deberta_small_cpu_config();
  const int64_t B = 3, L = 20, N = c.num_attention_heads;
  for (const DType compute : {DType::f32, DType::bf16, DType::f16}) {
    const ArenaLayout layout = DebertaForSequenceClassification::plan_activations(c, B, L, compute);
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      const ArenaSlot& slot = layout.slot(probs_slot(l));
      EXPECT_EQ(slot.dtype, compute) << dtype_name(compute) << " layer " << l;
      EXPECT_EQ(slot.shape, (Shape{B, N, L, L})) << dtype_name(compute) << " layer " << l;
      EXPECT_EQ(slot.nbytes, static_cast<size_t>(B * N * L * L) * dtype_size(compute))
          << dtype_name(compute) << " layer " << l;
    }
  }
}

TEST(ActivationPlan, SixteenBitProbsSaveTwoBytesPerElementAtXlarge) {
  // xlarge at batch 128 x 128: 24 layers x 128 * 24 * 128 * 128 elements. In f32 that was 4.5 GiB of the
  // activation arena; in bf16 it is half, 2 * B*N*L*L bytes (201 MB -> 101 MB) less per layer.
  const DebertaConfig c = deberta_v2_xlarge_config();
  const int64_t B = 128, L = 128, N = c.num_attention_heads;
  const int layers = c.num_hidden_layers;
  const size_t per_layer_elements = static_cast<size_t>(B * N * L * L);
  const ArenaLayout f32 = DebertaForSequenceClassification::plan_activations(c, B, L, DType::f32);
  const ArenaLayout bf16 = DebertaForSequenceClassification::plan_activations(c, B, L, DType::bf16);
  EXPECT_EQ(probs_bytes(f32, layers), static_cast<size_t>(layers) * per_layer_elements * 4);
  EXPECT_EQ(probs_bytes(bf16, layers), static_cast<size_t>(layers) * per_layer_elements * 2);
  EXPECT_EQ(probs_bytes(bf16, layers), size_t{2415919104});  // 2.25 GiB (2.4 GB) at bs 128, was 4.5 GiB
}

}  // namespace
}  // namespace zt
