// Masked softmax over the last axis, with the semantics of new HF DeBERTa-v2 (masked_fill + softmax):
//   x[r,j] = keep[r,j] ? scores[r,j] : finfo(f32).min
//   probs[r,j] = exp(x[r,j] - max_k x[r,k]) / sum_k exp(x[r,k] - max_k x[r,k])
// A row with at least one kept entry gives exactly 0 to its masked entries; a fully masked row becomes
// uniform 1/L (HF's padded query rows).
//
// Backward (masked_fill blocks the gradient, so masked entries get 0 even in a fully masked row):
//   dscores[r,j] = keep[r,j] ? probs[r,j] * (dprobs[r,j] - sum_{k kept} probs[r,k] dprobs[r,k]) : 0
//
// Tensor entry points: scores/probs/dprobs/dscores f32 [..., L] (any rank >= 1), contiguous, CPU;
// mask of the same shape, i64, i32 or f32 (nonzero = keep).
//   forward:  in scores, mask; out probs (may alias scores)
//   backward: in probs (forward output), dprobs, mask; out dscores (overwritten; may alias dprobs)
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace zt::kernels {

void masked_softmax_forward(const Tensor& scores, const Tensor& mask, const Tensor& probs);
void masked_softmax_backward(const Tensor& probs, const Tensor& dprobs, const Tensor& mask,
                             const Tensor& dscores);

namespace cpu {

// One row of n entries; keep[j] != 0 keeps entry j. probs may alias scores.
void masked_softmax_row(const float* scores, const uint8_t* keep, float* probs, int64_t n);

// One row of n entries; dscores may alias dprobs.
void masked_softmax_backward_row(const float* probs, const float* dprobs, const uint8_t* keep, float* dscores,
                                 int64_t n);

// The mask as 0/1 bytes (nonzero = keep), so row loops do not branch on its dtype. Checks that it is a
// contiguous CPU tensor of i64, i32 or f32; `op` names the caller in errors.
std::vector<uint8_t> mask_to_keep(const Tensor& mask, const char* op);

}  // namespace cpu

}  // namespace zt::kernels
