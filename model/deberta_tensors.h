// The model's per-layer seam: parameter (or gradient) tensors resolved once into handles, grouped by the
// units ZeRO works in, and hooks the forward and backward passes call around each unit.
//
//   DebertaTensors params = DebertaTensors::bind(config, [&](const std::string& name) {
//     return arena.tensor(name); });          // name lookups happen here, never in the hot loop
//   model.forward(params, batch, dropout, &hooks);
//
// Units (same as optim/zero/partition.h): kEmbeddingsUnit (word embeddings + LayerNorm), layer l
// (DebertaLayerTensors, unit index 1 + l), and the shared unit (relative embeddings, encoder LayerNorm, conv,
// pooler, classifier) read at several points of both passes. Hooks see unit indices.
//
// Order of hook calls (every rank calls them in the same order, so hooks may run collectives):
//   forward:  acquire(E) · embeddings · release(E) · acquire(S) · for l: acquire(l) · layer l · release(l)
//             · head · release(S)
//   backward: acquire(S) · head · for l = n-1..0: acquire(l) · layer l · release(l) · gradients_ready(l)
//             · acquire(E) · embeddings · release(E) · gradients_ready(E) · relative table
//             · release(S) · gradients_ready(S)
// acquire(u) returns only when u's parameter handles hold the unit's values (stage 3 gathers them there
// and may prefetch the next unit); release(u) says they are no longer read by this pass; gradients_ready(u)
// says this micro-batch's last write into u's gradient handles has been issued. gradient_write(u), asked by
// backward before it writes u's gradients, says whether they are added to what the handles hold
// (accumulate: the default, and what a hook-less backward does) or written over it (overwrite: the handles
// hold nothing to keep, e.g. the first micro-batch of a window where the engine does not zero them).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kernels/grad_write.h"
#include "model/config.h"
#include "runtime/tensor.h"

namespace zt {

struct DebertaLayerTensors {
  Tensor query_weight, query_bias, key_weight, key_bias, value_weight, value_bias;
  Tensor attention_output_weight, attention_output_bias, attention_ln_weight, attention_ln_bias;
  Tensor intermediate_weight, intermediate_bias, output_weight, output_bias, output_ln_weight, output_ln_bias;
};

struct DebertaEmbeddingTensors {
  Tensor word_embeddings, ln_weight, ln_bias;
};

struct DebertaSharedTensors {
  Tensor rel_embeddings, encoder_ln_weight, encoder_ln_bias;
  Tensor conv_weight, conv_bias, conv_ln_weight, conv_ln_bias;  // undefined without a conv layer
  Tensor pooler_weight, pooler_bias, classifier_weight, classifier_bias;
};

struct DebertaTensors {
  DebertaEmbeddingTensors embeddings;
  std::vector<DebertaLayerTensors> layers;
  DebertaSharedTensors shared;

  // Resolves every tensor of the parameter table by its HF name through `lookup` (an arena's tensor(),
  // or a view into a ZeRO gather buffer).
  static DebertaTensors bind(const DebertaConfig& config,
                             const std::function<Tensor(const std::string& name)>& lookup);
};

// Gradients on dead activations (docs/DESIGN.md, "Gradients on dead activations"). With one backward per
// optimizer step, layer l's saved activations are dead once its backward has run, and the f32 gradients are
// live only from their unit's backward to the step. So a gradient buffer laid out by unit in hook order
// (embeddings, layers 0..n-1, shared) can sit inside the activation arena: the per-layer slots come last in
// the arena, layer 0's first, and the buffer is placed as low as it can go with every layer's gradients at or
// above the end of that layer's slots (and the embeddings' above the slots every layer shares): when layer
// l's backward writes its gradients only the slots of layers > l, already consumed, lie under them. Whatever
// the buffer needs beyond the arena's end is added to the arena. Every gradient the backward writes over dead
// activations must be written, not accumulated (GradWrite::overwrite), and nothing but the step may read
// them before the next forward overwrites them; so: one micro-batch per step, no gradient checkpointing
// (whose backward re-runs every layer into the same slots).
struct GradientLayout {
  std::vector<size_t> unit_begin;  // bytes from the buffer's start, one per unit in hook order
  size_t bytes = 0;                // the whole buffer
};

inline constexpr size_t kEmbeddingsUnit = 0;
inline size_t layer_unit(int layer) {
  return static_cast<size_t>(layer) + 1;
}
inline size_t shared_unit(const DebertaConfig& config) {
  return static_cast<size_t>(config.num_hidden_layers) + 1;
}

class DebertaUnitHooks {
 public:
  enum class Pass { forward, backward };
  virtual ~DebertaUnitHooks() = default;
  virtual void acquire(size_t unit, Pass pass) = 0;
  virtual void release(size_t unit, Pass pass) = 0;
  virtual void gradients_ready(size_t unit) = 0;
  virtual kernels::GradWrite gradient_write(size_t /*unit*/) { return kernels::GradWrite::accumulate; }
};

}  // namespace zt
