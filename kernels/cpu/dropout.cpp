#include "kernels/cpu/dropout.h"

#include <cstdint>
#include <cstring>

#include "kernels/philox.h"

namespace zt::kernels::cpu {
namespace {

// Forward and backward are the same map (scale kept entries, zero the rest), so one routine serves both.
void apply_dropout_mask_cpu(const float* in, float* out, int64_t n, const DropoutSite& site) {
  if (site.p == 0.0f) {
    if (out != in) std::memmove(out, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const float scale = 1.0f / (1.0f - site.p);
  // One Philox block serves four consecutive elements, as in the index layout of philox.h.
  for (int64_t base = 0; base < n; base += 4) {
    const PhiloxCounter bits = philox_block(site.seed, site.site_id, static_cast<uint64_t>(base) >> 2);
    const int64_t lanes = n - base < 4 ? n - base : 4;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const bool keep = uniform_from_bits(bits.word[lane]) >= site.p;
      out[base + lane] = keep ? in[base + lane] * scale : 0.0f;
    }
  }
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site) {
  apply_dropout_mask_cpu(x.data_as<float>(), y.data_as<float>(), x.numel(), site);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site) {
  apply_dropout_mask_cpu(dy.data_as<float>(), dx.data_as<float>(), dy.numel(), site);
}

}  // namespace zt::kernels::cpu
