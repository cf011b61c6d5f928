// Stage 0's gradient buffer placed in the model's activation arena (model/deberta_tensors.h, GradientLayout):
// the placement's invariants checked slot by slot, for the tiny test model and xlarge, at several batches and
// world sizes. Training with it is compared bit for bit with stages 1-3 in test_zero_training.cpp.
#include <gtest/gtest.h>

#include <string>

#include "model/config.h"
#include "model/deberta.h"
#include "model/parameters.h"
#include "optim/zero/engine.h"
#include "optim/zero/partition.h"
#include "runtime/check.h"
#include "tests/app/zero_training_harness.h"

namespace zt::optim {
namespace {

// The layer a slot belongs to ("layer<l>.<what>"), or -1.
int layer_of(const std::string& name) {
  if (!name.starts_with("layer")) return -1;
  return std::stoi(name.substr(5, name.find('.') - 5));
}

void expect_placement_holds(const DebertaConfig& model, int world, int64_t batch, int64_t length) {
  const std::string what = str("world ", world, ", batch ", batch, " x ", length);
  const GradientLayout grads = stage0_gradient_layout(ZeroPartition(ParameterTable(model), world));
  const ArenaLayout acts =
      DebertaForSequenceClassification::plan_activations(model, batch, length, DType::bf16, &grads);
  const size_t at = DebertaForSequenceClassification::gradient_offset(model, acts, grads);
  EXPECT_EQ(at % kArenaAlignment, 0u) << what;
  EXPECT_LE(at + grads.bytes, acts.total_bytes()) << what;  // the arena holds the whole buffer
  const size_t embeddings = at + grads.unit_begin.front(), shared = at + grads.unit_begin.back();
  for (const ArenaSlot& slot : acts.slots()) {
    if (slot.name == "gradients.tail") continue;
    const int l = layer_of(slot.name);
    if (l < 0) {  // read in every backward, until its end: below all of the buffer
      EXPECT_LE(slot.end(), embeddings) << slot.name << ", " << what;
      continue;
    }
    // Live until layer l's backward: below the gradients of layers >= l (written from layer n-1 down to l)
    // and the shared unit's (written from the head's backward on).
    EXPECT_LE(slot.end(), at + grads.unit_begin[static_cast<size_t>(l) + 1]) << slot.name << ", " << what;
    EXPECT_LE(slot.end(), shared) << slot.name << ", " << what;
  }
}

TEST(GradientsOnActivations, EveryGradientLiesOnSlotsItsBackwardHasFinishedWith) {
  for (const DebertaConfig& model : {zero_harness::tiny_model(), deberta_v2_xlarge_config()}) {
    for (int world : {1, 2, 3}) {
      for (int64_t batch : {1, 8, 40}) expect_placement_holds(model, world, batch, 128);
    }
  }
}

// At xlarge's bs 40 (every layer's slots outweigh its gradients) the buffer adds one layer's gradients and
// the shared unit's to the arena, nothing more.
TEST(GradientsOnActivations, AtLargeBatchesTheArenaGrowsByOneLayerAndTheSharedUnit) {
  const DebertaConfig model = deberta_v2_xlarge_config();
  const ParameterTable table(model);  // the partition keeps a reference to it
  const ZeroPartition partition(table, 1);
  const GradientLayout grads = stage0_gradient_layout(partition);
  const size_t plain =
      DebertaForSequenceClassification::plan_activations(model, 40, 128, DType::bf16).total_bytes();
  const size_t with =
      DebertaForSequenceClassification::plan_activations(model, 40, 128, DType::bf16, &grads).total_bytes();
  const auto unit_bytes = [&](size_t u) { return static_cast<size_t>(partition.units()[u].numel) * 4; };
  EXPECT_LE(with, plain + unit_bytes(partition.layer_unit(0)) + unit_bytes(partition.shared_unit()) +
                      kArenaAlignment);
  EXPECT_GT(with, plain);
}

TEST(GradientsOnActivations, NotWithGradientCheckpointing) {
  DebertaConfig model = zero_harness::tiny_model();
  model.gradient_checkpointing = true;
  EXPECT_FALSE(gradients_on_activations(model, 0, 1));
  const GradientLayout grads = stage0_gradient_layout(ZeroPartition(ParameterTable(model), 1));
  EXPECT_THROW(DebertaForSequenceClassification::plan_activations(model, 4, 16, DType::f32, &grads), Error);
  model.gradient_checkpointing = false;
  EXPECT_TRUE(gradients_on_activations(model, 0, 1));
  EXPECT_FALSE(gradients_on_activations(model, 0, 2));
  EXPECT_FALSE(gradients_on_activations(model, 1, 1));
}

}  // namespace
}  // namespace zt::optim
