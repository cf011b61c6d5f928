// The AVX2 and AVX-512 bodies of the CPU AdamW. Compiled with the build's -march (x86-64-v3 by default) plus
// per-function target attributes, so a build for an older -march still contains them and only calls them
// where the CPU has them (best_cpu_isa). Compiled with -ffp-contract=off (optim/CMakeLists.txt): GCC
// implements _mm*_mul_ps / _mm*_add_ps as plain vector arithmetic, which it would otherwise fuse into FMAs.
//
// Per vector of lanes, in the scalar reference's order (optim/cpu/adamw.cpp):
//   g = scale * g;  p = p * decay;  m = m + w * (g - m)  (or g - (g - m) * (1 - w));
//   v = v * b2;  v = v + (vw * g) * g;  d = sqrt(v) / bc2 + eps;  p = p + (step * m) / d
// bf16 copy: the runtime's integer rounding ((u + 0x7FFF + lsb) >> 16, NaN -> quiet NaN) in 32-bit lanes,
// narrowed to 16 bits. f16 copy: the hardware conversion (round to nearest even, as the runtime), and a
// vector holding a NaN redone by the runtime's float_to_f16 (the hardware keeps NaN payload bits).
#include "optim/cpu/adamw_simd.h"

#include <immintrin.h>

#include "runtime/dtype.h"

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge source, which its
// -Wmaybe-uninitialized reports as a read of an uninitialized value (GCC bug 105593); the values are never
// read.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace zt::optim::cpu_detail {

void adamw_loop_scalar_tail(const AdamWLoop& l, int64_t begin) {
  const int64_t n = l.n - begin;
  if (n <= 0) return;
  adamw_update_elements(*l.scalars, l.weight_decay, n, l.params + begin, l.grads + begin, l.exp_avg + begin,
                        l.exp_avg_sq + begin, l.grad_scale);
  if (l.out_kind == Half16::bf16) {
    for (int64_t i = begin; i < l.n; ++i) l.out16[i] = float_to_bf16(l.params[i]).bits;
  } else if (l.out_kind == Half16::f16) {
    for (int64_t i = begin; i < l.n; ++i) l.out16[i] = float_to_f16(l.params[i]).bits;
  }
}

namespace {

// ---- AVX2: 8 lanes ----

#define ZT_AVX2 __attribute__((target("avx2,f16c")))

struct Avx2Consts {
  __m256 scale, decay, w, one_minus_w, b2, vw, bc2, eps, step;
};

template <bool kScale, bool kSmallWeight, Half16 kOut>
ZT_AVX2 void loop_avx2(const AdamWLoop& l, const Avx2Consts& c) {
  int64_t i = 0;
  for (; i + 8 <= l.n; i += 8) {
    __m256 g = _mm256_loadu_ps(l.grads + i);
    if constexpr (kScale) g = _mm256_mul_ps(c.scale, g);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(l.params + i), c.decay);
    __m256 m = _mm256_loadu_ps(l.exp_avg + i);
    if constexpr (kSmallWeight) {
      m = _mm256_add_ps(m, _mm256_mul_ps(c.w, _mm256_sub_ps(g, m)));
    } else {
      m = _mm256_sub_ps(g, _mm256_mul_ps(_mm256_sub_ps(g, m), c.one_minus_w));
    }
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(l.exp_avg_sq + i), c.b2);
    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(c.vw, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c.bc2), c.eps);
    p = _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(c.step, m), denom));
    _mm256_storeu_ps(l.params + i, p);
    _mm256_storeu_ps(l.exp_avg + i, m);
    _mm256_storeu_ps(l.exp_avg_sq + i, v);
    if constexpr (kOut == Half16::bf16) {
      const __m256i u = _mm256_castps_si256(p);
      const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
      const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));  // abs >= 0: signed ok
      const __m256i high = _mm256_srli_epi32(u, 16);
      const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
      const __m256i rounded =
          _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
      const __m256i quiet_nan = _mm256_or_si256(high, _mm256_set1_epi32(0x0040));
      const __m256i bits = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);  // each lane < 2^16
      // packus interleaves the two 128-bit halves: [a0..3 a0..3 | a4..7 a4..7]; qwords 0 and 2 are a0..7.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(l.out16 + i), _mm256_castsi256_si128(packed));
    } else if constexpr (kOut == Half16::f16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(l.out16 + i),
                       _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      if (_mm256_movemask_ps(_mm256_cmp_ps(p, p, _CMP_UNORD_Q)) != 0)
        for (int k = 0; k < 8; ++k) l.out16[i + k] = float_to_f16(l.params[i + k]).bits;
    }
  }
  adamw_loop_scalar_tail(l, i);
}

// ---- AVX-512: 16 lanes ----

#define ZT_AVX512 __attribute__((target("avx512f")))

struct Avx512Consts {
  __m512 scale, decay, w, one_minus_w, b2, vw, bc2, eps, step;
};

template <bool kScale, bool kSmallWeight, Half16 kOut>
ZT_AVX512 void loop_avx512(const AdamWLoop& l, const Avx512Consts& c) {
  int64_t i = 0;
  for (; i + 16 <= l.n; i += 16) {
    __m512 g = _mm512_loadu_ps(l.grads + i);
    if constexpr (kScale) g = _mm512_mul_ps(c.scale, g);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(l.params + i), c.decay);
    __m512 m = _mm512_loadu_ps(l.exp_avg + i);
    if constexpr (kSmallWeight) {
      m = _mm512_add_ps(m, _mm512_mul_ps(c.w, _mm512_sub_ps(g, m)));
    } else {
      m = _mm512_sub_ps(g, _mm512_mul_ps(_mm512_sub_ps(g, m), c.one_minus_w));
    }
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(l.exp_avg_sq + i), c.b2);
    v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_mul_ps(c.vw, g), g));
    const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bc2), c.eps);
    p = _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(c.step, m), denom));
    _mm512_storeu_ps(l.params + i, p);
    _mm512_storeu_ps(l.exp_avg + i, m);
    _mm512_storeu_ps(l.exp_avg_sq + i, v);
    if constexpr (kOut == Half16::bf16) {
      const __m512i u = _mm512_castps_si512(p);
      const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
      const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7F800000));
      const __m512i high = _mm512_srli_epi32(u, 16);
      const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
      const __m512i rounded =
          _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
      const __m512i quiet_nan = _mm512_or_si512(high, _mm512_set1_epi32(0x0040));
      const __m512i bits = _mm512_mask_blend_epi32(is_nan, rounded, quiet_nan);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(l.out16 + i), _mm512_cvtepi32_epi16(bits));
    } else if constexpr (kOut == Half16::f16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(l.out16 + i),
                          _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      if (_mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q) != 0)
        for (int k = 0; k < 16; ++k) l.out16[i + k] = float_to_f16(l.params[i + k]).bits;
    }
  }
  adamw_loop_scalar_tail(l, i);
}

// Picks the template instance for the loop's run-time flags (scale, lerp form, copy kind).
template <typename Consts, template <bool, bool, Half16> class Body>
void dispatch(const AdamWLoop& l, const Consts& c) {
  const bool scale = l.grad_scale != 1.0f;
  const bool small = l.scalars->m_weight_is_small;
  auto with_out = [&]<bool kScale, bool kSmall>() {
    switch (l.out_kind) {
      case Half16::none:
        return Body<kScale, kSmall, Half16::none>::run(l, c);
      case Half16::bf16:
        return Body<kScale, kSmall, Half16::bf16>::run(l, c);
      case Half16::f16:
        return Body<kScale, kSmall, Half16::f16>::run(l, c);
    }
  };
  if (scale) {
    small ? with_out.template operator()<true, true>() : with_out.template operator()<true, false>();
  } else {
    small ? with_out.template operator()<false, true>() : with_out.template operator()<false, false>();
  }
}

template <bool kScale, bool kSmall, Half16 kOut>
struct Avx2Body {
  static void run(const AdamWLoop& l, const Avx2Consts& c) { loop_avx2<kScale, kSmall, kOut>(l, c); }
};
template <bool kScale, bool kSmall, Half16 kOut>
struct Avx512Body {
  static void run(const AdamWLoop& l, const Avx512Consts& c) { loop_avx512<kScale, kSmall, kOut>(l, c); }
};

// The decay factor of the loop's ranges: x * 1.0f == x, so no-decay ranges stay exact.
float decay_of(const AdamWLoop& l) {
  return l.weight_decay ? l.scalars->decay_factor : 1.0f;
}

}  // namespace

ZT_AVX2 void adamw_loop_avx2(const AdamWLoop& l) {
  const AdamWStepScalars& s = *l.scalars;
  const Avx2Consts c{_mm256_set1_ps(l.grad_scale),
                     _mm256_set1_ps(decay_of(l)),
                     _mm256_set1_ps(s.m_weight),
                     _mm256_set1_ps(1.0f - s.m_weight),
                     _mm256_set1_ps(s.beta2),
                     _mm256_set1_ps(s.v_weight),
                     _mm256_set1_ps(s.bias_correction2_sqrt),
                     _mm256_set1_ps(s.eps),
                     _mm256_set1_ps(s.neg_step_size)};
  dispatch<Avx2Consts, Avx2Body>(l, c);
}

ZT_AVX512 void adamw_loop_avx512(const AdamWLoop& l) {
  const AdamWStepScalars& s = *l.scalars;
  const Avx512Consts c{_mm512_set1_ps(l.grad_scale),
                       _mm512_set1_ps(decay_of(l)),
                       _mm512_set1_ps(s.m_weight),
                       _mm512_set1_ps(1.0f - s.m_weight),
                       _mm512_set1_ps(s.beta2),
                       _mm512_set1_ps(s.v_weight),
                       _mm512_set1_ps(s.bias_correction2_sqrt),
                       _mm512_set1_ps(s.eps),
                       _mm512_set1_ps(s.neg_step_size)};
  dispatch<Avx512Consts, Avx512Body>(l, c);
}

}  // namespace zt::optim::cpu_detail
