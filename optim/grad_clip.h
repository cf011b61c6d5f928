// Gradient norm and clipping over flat fp32 gradient buffers.
//
//   sum_of_squares(g)  = sum_i g_i^2, accumulated in double over fixed blocks, blocks added in order, so the
//                        value is the same for any thread count. With ZeRO each rank sums its shard and the
//                        ranks all-reduce the sums; global norm = sqrt(total).
//   clip coefficient   = max_norm / (total_norm + 1e-6), applied only when < 1 (torch.nn.utils.
//                        clip_grad_norm_'s rule; torch multiplies by min(coef, 1), which is the same).
//
// A non-finite norm is returned as is and the gradients are left unscaled (torch would multiply them by NaN);
// the caller treats it as an overflow and skips the step.
#pragma once

#include <span>

namespace zt::optim {

// Sum of squares of all elements, in double. num_threads 0: all hardware threads.
double sum_of_squares(std::span<const float> grads, int num_threads = 0);

// sqrt(sum_of_squares(grads)).
double global_l2_norm(std::span<const float> grads, int num_threads = 0);

// torch's clip factor for a total norm: min(1, max_norm / (total_norm + 1e-6)). max_norm > 0.
// NaN when total_norm is NaN; 0 when it is +inf.
double clip_coefficient(double total_norm, double max_norm);

// grads *= factor (in float).
void scale_in_place(std::span<float> grads, float factor, int num_threads = 0);

// Clips grads in place to global L2 norm max_norm (> 0; callers skip clipping when it is disabled).
// Returns the norm before clipping; when it is not finite, grads are not touched.
double clip_grad_norm(std::span<float> grads, double max_norm, int num_threads = 0);

// DeepSpeed's "unscale and clip in one multiply" for loss-scaled gradients: given the norm of the scaled
// gradients, the factor to multiply them by so they are unscaled and clipped to max_norm:
//   clip = (scaled_norm / loss_scale + 1e-6) / max_norm;  combined = loss_scale * (clip > 1 ? clip : 1)
//   factor = 1 / combined
// max_norm <= 0 means no clipping (factor = 1 / loss_scale).
double unscale_and_clip_factor(double scaled_norm, double loss_scale, double max_norm);

}  // namespace zt::optim
