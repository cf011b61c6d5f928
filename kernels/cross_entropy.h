// Cross-entropy over class logits with ignored labels (HF SequenceClassification, integer labels):
//
//   kept      = { n : labels[n] >= 0 }               (label < 0, e.g. -100, is ignored)
//   loss      = (1 / |kept|) * sum_{n in kept} ( logsumexp(z[n, :]) - z[n, labels[n]] ),   0 if kept is empty
//   dz[n, :]  = dloss * (softmax(z[n, :]) - onehot(labels[n])) / |kept|    for n in kept;  0 for ignored rows
//
// logsumexp subtracts the row max and accumulates in double, so large logits neither overflow nor lose the
// small terms. Shapes: logits, dlogits f32 [N, C]; labels i64 [N] (a label >= C is an error); loss f32 with
// one element. Nothing is saved: the backward recomputes the softmax from the logits.
#pragma once

#include "runtime/tensor.h"

namespace zt::kernels {

// in: logits, labels; out: loss (one element).
void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss);

// in: logits, labels, dloss (the upstream gradient of the loss, usually 1 or the loss scale);
// out: dlogits (overwritten).
void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits);

}  // namespace zt::kernels
