// Mean squared error for a regression head (HF SequenceClassification with num_labels 1: MSELoss over
// logits.view(-1) and the float labels), with ignored rows:
//
//   kept      = { n : targets[n] is not NaN }        (NaN marks a row that does not count, e.g. a
//                                                     distributed sampler's padding repeat or no label)
//   loss      = (1 / |kept|) * sum_{n in kept} (z[n] - targets[n])^2,   0 if kept is empty
//   dz[n]     = dloss * 2 (z[n] - targets[n]) / |kept|   for n in kept;  0 for ignored rows
//
// Sums run in double. Shapes: predictions, dpredictions f32 [N, 1]; targets f32 [N]; loss f32 with one
// element. HF's MSELoss has no ignored rows: with every target finite the two are the same.
#pragma once

#include "runtime/tensor.h"

namespace zt::kernels {

// in: predictions, targets; out: loss (one element).
void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss);

// in: predictions, targets, dloss (upstream gradient, 1 or the loss scale); out: dpredictions (overwritten).
void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions);

}  // namespace zt::kernels
