// Dropout with a counter-based keep-mask (kernels/philox.h), so backward regenerates the mask instead of
// storing it:
//
//   keep(i) = uniform(seed, site_id, i) >= p          i = flat element index in [0, numel)
//   y[i]    = keep(i) ? x[i] * 1/(1-p) : 0
//   dx[i]   = keep(i) ? dy[i] * 1/(1-p) : 0
//
// p == 0 is an exact copy (the eval path and every p = 0 site). Requires 0 <= p < 1.
// site_id must differ between every dropout application that needs an independent mask (each step, layer
// and site in the layer); dropout_site_id below packs those three into one id. Data-parallel ranks see
// different samples at the same site, so fold the rank into `seed` to keep their masks independent.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels {

struct DropoutSite {
  float p = 0.0f;        // probability of dropping an element
  uint64_t seed = 0;     // run seed (Philox key)
  uint64_t site_id = 0;  // which application of dropout (Philox counter high half)
};

// site_id layout: bits 63..24 step, 23..8 layer, 7..0 site within the layer. Fields are truncated to their
// widths (2^40 steps, 65536 layers, 256 sites).
constexpr uint64_t dropout_site_id(uint64_t step, uint32_t layer, uint32_t site) {
  return (step << 24) | (static_cast<uint64_t>(layer & 0xffffu) << 8) | (site & 0xffu);
}

// in: x; out: y (may alias x). Shapes equal, f32, contiguous.
void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site);

// in: dy; out: dx (overwritten; may alias dy). Same site as the forward, so the same mask.
void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site);

}  // namespace zt::kernels
