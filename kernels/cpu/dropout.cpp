#include "kernels/cpu/dropout.h"

#include <cstdint>
#include <cstring>

#include "kernels/arg_checks.h"
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

void check_dropout_args(const Tensor& in, const Tensor& out, const DropoutSite& site, const char* op,
                        const char* in_name, const char* out_name) {
  check_cpu_arg(in, DType::f32, op, in_name);
  check_cpu_arg(out, DType::f32, op, out_name);
  check_same_shape(out, in, op, out_name, in_name);
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site) {
  check_dropout_args(x, y, site, "dropout_forward", "x", "y");
  apply_dropout_mask_cpu(x.data_as<float>(), y.data_as<float>(), x.numel(), site);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site) {
  check_dropout_args(dy, dx, site, "dropout_backward", "dy", "dx");
  apply_dropout_mask_cpu(dy.data_as<float>(), dx.data_as<float>(), dy.numel(), site);
}

}  // namespace zt::kernels::cpu
