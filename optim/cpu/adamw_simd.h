// Internal to optim/cpu: the vector bodies of the CPU AdamW (optim/adamw.h says why they equal the scalar
// loop bit for bit). Each updates elements [0, n) of raw arrays, then writes the 16-bit copy of the updated
// params when out16 is set, in the same pass; the last n % lanes elements go through the scalar loop.
#pragma once

#include <cstdint>

#include "optim/adamw.h"

namespace zt::optim::cpu_detail {

enum class Half16 { none, bf16, f16 };

struct AdamWLoop {
  const AdamWStepScalars* scalars;
  bool weight_decay;
  float grad_scale;  // 1: gradients used as they are
  int64_t n;
  float* params;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  Half16 out_kind;
  uint16_t* out16;  // n 16-bit values (bf16 or f16 bits), or nullptr with Half16::none
};

void adamw_loop_avx2(const AdamWLoop& loop);    // needs AVX2 + F16C
void adamw_loop_avx512(const AdamWLoop& loop);  // needs AVX-512F

// The scalar tail shared by the bodies: update [begin, n) and write its 16-bit copy.
void adamw_loop_scalar_tail(const AdamWLoop& loop, int64_t begin);

}  // namespace zt::optim::cpu_detail
