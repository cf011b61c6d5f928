#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optim/cpu/adamw_simd.h"
#include "runtime/bf16_bits.h"
#include "runtime/check.h"
#include "runtime/parallel_blocks.h"

namespace zt::optim {

namespace {

// The reference loop for one (scale, lerp form) choice; g = grad_scale * g first when kScale.
template <bool kScale, bool kSmallWeight>
void update_elements(const AdamWStepScalars& s, float decay, float grad_scale, int64_t n,
                     float* __restrict params, const float* __restrict grads, float* __restrict exp_avg,
                     float* __restrict exp_avg_sq) {
  // Every statement mirrors one torch kernel call, in torch's order, so each rounding matches; the loop has
  // no branches on data and no reductions, so the compiler vectorises it (sqrt needs -fno-math-errno).
  const float w = s.m_weight;
  const float one_minus_w = 1.0f - w;
  const float b2 = s.beta2, vw = s.v_weight, bc2 = s.bias_correction2_sqrt, eps = s.eps;
  const float step = s.neg_step_size;
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i];
    if constexpr (kScale) g = grad_scale * g;  // unscale / clip: the product a separate pass would store
    float p = params[i] * decay;               // param.mul_(1 - lr*wd)
    float m;
    if constexpr (kSmallWeight) {
      m = exp_avg[i] + w * (g - exp_avg[i]);  // exp_avg.lerp_(grad, 1 - beta1)
    } else {
      m = g - (g - exp_avg[i]) * one_minus_w;  // lerp's form for weights >= 0.5
    }
    float v = exp_avg_sq[i] * b2;                  // exp_avg_sq.mul_(beta2)
    v = v + (vw * g) * g;                          //   .addcmul_(grad, grad, value=1 - beta2)
    const float denom = std::sqrt(v) / bc2 + eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    p = p + (step * m) / denom;                    // param.addcdiv_(exp_avg, denom, value=-step_size)
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

void adamw_update_elements(const AdamWStepScalars& s, bool weight_decay, int64_t n, float* params,
                           const float* grads, float* exp_avg, float* exp_avg_sq, float grad_scale) {
  const float decay = weight_decay ? s.decay_factor : 1.0f;  // x * 1.0f == x: no-decay ranges stay exact
  const bool scale = grad_scale != 1.0f;
  if (s.m_weight_is_small) {
    scale ? update_elements<true, true>(s, decay, grad_scale, n, params, grads, exp_avg, exp_avg_sq)
          : update_elements<false, true>(s, decay, grad_scale, n, params, grads, exp_avg, exp_avg_sq);
  } else {
    scale ? update_elements<true, false>(s, decay, grad_scale, n, params, grads, exp_avg, exp_avg_sq)
          : update_elements<false, false>(s, decay, grad_scale, n, params, grads, exp_avg, exp_avg_sq);
  }
}

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return true;
    case CpuIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    case CpuIsa::avx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

CpuIsa best_cpu_isa() {
  if (cpu_supports(CpuIsa::avx512)) return CpuIsa::avx512;
  if (cpu_supports(CpuIsa::avx2)) return CpuIsa::avx2;
  return CpuIsa::scalar;
}

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::scalar:
      return "scalar";
    case CpuIsa::avx2:
      return "avx2";
    case CpuIsa::avx512:
      return "avx512";
  }
  return "?";
}

namespace {

void check_hyper(const AdamWHyper& h) {
  ZT_CHECK(h.lr >= 0, "AdamW: invalid learning rate ", h.lr);
  ZT_CHECK(h.eps >= 0, "AdamW: invalid eps ", h.eps);
  ZT_CHECK(h.beta1 >= 0 && h.beta1 < 1, "AdamW: invalid beta1 ", h.beta1, " (need 0 <= beta1 < 1)");
  ZT_CHECK(h.beta2 >= 0 && h.beta2 < 1, "AdamW: invalid beta2 ", h.beta2, " (need 0 <= beta2 < 1)");
  ZT_CHECK(h.weight_decay >= 0, "AdamW: invalid weight_decay ", h.weight_decay);
}

// A piece of one range, the unit of parallel work.
struct WorkBlock {
  int64_t offset;
  int64_t numel;
  bool weight_decay;
};

std::vector<WorkBlock> split_into_blocks(std::span<const TensorRange> ranges) {
  std::vector<WorkBlock> blocks;
  for (const TensorRange& r : ranges) {
    for (int64_t begin = 0; begin < r.numel; begin += zt::detail::kBlockElements) {
      blocks.push_back(
          {r.offset + begin, std::min(zt::detail::kBlockElements, r.numel - begin), r.weight_decay});
    }
  }
  return blocks;
}

// Elements updated before their 16-bit copy is written: small enough to stay in L1 between the two.
constexpr int64_t kCopyBackChunk = 2048;

// runtime's float_to_bf16 rounding inlined (runtime/bf16_bits.h, branch-free), so the copy-back loop
// vectorises instead of calling out per element.
void convert_chunk(const float* in, int64_t n, bf16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16{bf16_bits_nearest_even(in[i])};
}

void convert_chunk(const float* in, int64_t n, f16* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_f16(in[i]);
}

template <typename Half>
void update_and_copy_back(const AdamWStepScalars& s, const AdamWBuffers& b, const WorkBlock& w, Half* out,
                          float grad_scale) {
  for (int64_t begin = w.offset; begin < w.offset + w.numel; begin += kCopyBackChunk) {
    const int64_t n = std::min(kCopyBackChunk, w.offset + w.numel - begin);
    adamw_update_elements(s, w.weight_decay, n, b.params.data() + begin, b.grads.data() + begin,
                          b.exp_avg.data() + begin, b.exp_avg_sq.data() + begin, grad_scale);
    convert_chunk(b.params.data() + begin, n, out + begin);
  }
}

// One block through a vector body, the 16-bit copy written in the same pass.
void update_block_vector(CpuIsa isa, const AdamWStepScalars& s, const AdamWBuffers& b, const WorkBlock& w,
                         const Params16Out& params16, float grad_scale) {
  cpu_detail::AdamWLoop loop{&s,
                             w.weight_decay,
                             grad_scale,
                             w.numel,
                             b.params.data() + w.offset,
                             b.grads.data() + w.offset,
                             b.exp_avg.data() + w.offset,
                             b.exp_avg_sq.data() + w.offset,
                             cpu_detail::Half16::none,
                             nullptr};
  if (const auto* out = std::get_if<std::span<bf16>>(&params16)) {
    loop.out_kind = cpu_detail::Half16::bf16;
    loop.out16 = &(out->data() + w.offset)->bits;
  } else if (const auto* out16 = std::get_if<std::span<f16>>(&params16)) {
    loop.out_kind = cpu_detail::Half16::f16;
    loop.out16 = &(out16->data() + w.offset)->bits;
  }
  if (isa == CpuIsa::avx512) {
    cpu_detail::adamw_loop_avx512(loop);
  } else {
    cpu_detail::adamw_loop_avx2(loop);
  }
}

}  // namespace

AdamW::AdamW(AdamWHyper hyper, int num_threads)
    : hyper_(hyper), num_threads_(zt::detail::resolve_thread_count(num_threads)), isa_(best_cpu_isa()) {
  check_hyper(hyper_);
}

void AdamW::set_num_threads(int num_threads) {
  ZT_CHECK(num_threads >= 0, "AdamW: ", num_threads, " threads");
  num_threads_ = zt::detail::resolve_thread_count(num_threads);
}

void AdamW::set_isa(CpuIsa isa) {
  ZT_CHECK(cpu_supports(isa), "AdamW: this CPU cannot run the ", cpu_isa_name(isa), " body");
  isa_ = isa;
}

void AdamW::set_step_count(int64_t t) {
  ZT_CHECK(t >= 0, "AdamW: step count must be non-negative, got ", t);
  step_count_ = t;
}

void AdamW::step(const AdamWBuffers& buffers, std::span<const TensorRange> ranges, double lr,
                 Params16Out params16, float grad_scale) {
  begin_step();
  update(buffers, ranges, lr, params16, grad_scale);
}

void AdamW::update(const AdamWBuffers& buffers, std::span<const TensorRange> ranges, double lr,
                   Params16Out params16, float grad_scale) const {
  ZT_CHECK(lr >= 0, "AdamW: invalid learning rate ", lr);
  ZT_CHECK(step_count_ >= 1, "AdamW::update before begin_step()");
  const size_t size = buffers.params.size();
  ZT_CHECK(
      buffers.grads.size() == size && buffers.exp_avg.size() == size && buffers.exp_avg_sq.size() == size,
      "AdamW: buffer lengths differ: params ", size, ", grads ", buffers.grads.size(), ", exp_avg ",
      buffers.exp_avg.size(), ", exp_avg_sq ", buffers.exp_avg_sq.size());
  std::visit(
      [&](const auto& out) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(out)>, std::monostate>) {
          ZT_CHECK(out.size() == size, "AdamW: 16-bit params copy has ", out.size(), " elements, params ",
                   size);
        }
      },
      params16);
  check_adamw_ranges(ranges, static_cast<int64_t>(size), "AdamW");

  const AdamWStepScalars s = adamw_step_scalars(hyper_, lr, step_count_);
  const std::vector<WorkBlock> blocks = split_into_blocks(ranges);
  zt::detail::run_blocks_in_parallel(static_cast<int64_t>(blocks.size()), num_threads_, [&](int64_t i) {
    const WorkBlock& w = blocks[static_cast<size_t>(i)];
    if (isa_ != CpuIsa::scalar) {
      update_block_vector(isa_, s, buffers, w, params16, grad_scale);
    } else if (auto* out = std::get_if<std::span<bf16>>(&params16)) {
      update_and_copy_back(s, buffers, w, out->data(), grad_scale);
    } else if (auto* out16 = std::get_if<std::span<f16>>(&params16)) {
      update_and_copy_back(s, buffers, w, out16->data(), grad_scale);
    } else {
      adamw_update_elements(s, w.weight_decay, w.numel, buffers.params.data() + w.offset,
                            buffers.grads.data() + w.offset, buffers.exp_avg.data() + w.offset,
                            buffers.exp_avg_sq.data() + w.offset, grad_scale);
    }
  });
}

}  // namespace zt::optim
