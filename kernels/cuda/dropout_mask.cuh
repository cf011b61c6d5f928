// The dropout keep-mask as a device functor (kernels/dropout.h, kernels/philox.h), for .cu files only: the
// pointwise dropout kernels and the fused dropout + residual + LayerNorm forward draw their masks from it, so
// both keep exactly the elements the CPU keeps.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace zt::kernels::cuda_detail {

// keep(i) = uniform(seed, site_id, i) >= p; kept values are scaled by 1 / (1 - p) (computed on the host in
// f32, as the CPU does, so f32 results are bit-identical to the CPU's). A pointwise functor
// (kernels/cuda/pointwise.cuh): one Philox block per group of 4 consecutive indices.
struct DropoutMaskOp {
  float p;
  float scale;
  uint64_t seed;
  uint64_t site_id;

  using Group = PhiloxCounter;
  __device__ Group group(uint64_t g) const { return philox_block(seed, site_id, g); }
  __device__ float operator()(const Group& bits, int64_t i, float x) const {
    // Selects the word with constant indices: a run-time index would move `bits` to local memory.
    const int lane = static_cast<int>(i & 3);
    const uint32_t word = lane == 0   ? bits.word[0]
                          : lane == 1 ? bits.word[1]
                          : lane == 2 ? bits.word[2]
                                      : bits.word[3];
    // __fmul_rn: a product the compiler never contracts into an FMA with an add that follows (the fused
    // residual add), so the dropped value is rounded exactly as dropout_forward stores it.
    return uniform_from_bits(word) >= p ? __fmul_rn(x, scale) : 0.0f;
  }
};

}  // namespace zt::kernels::cuda_detail
