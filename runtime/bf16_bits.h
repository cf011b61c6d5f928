// float <-> bits and float -> bf16 bits, round to nearest even, for host and device code alike: the one
// rounding of every bf16 parameter copy (runtime/dtype.h's float_to_bf16, the CPU and GPU AdamW's copies, the
// split master in optim/split_master.h). A NaN becomes the quiet NaN with its sign and top payload bits
// (rounding could otherwise carry it into infinity). Branch-free, so loops over it vectorise.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ZT_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define ZT_HOST_DEVICE_INLINE inline
#endif

namespace zt {

ZT_HOST_DEVICE_INLINE uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

ZT_HOST_DEVICE_INLINE float float_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

// bf16 is the top half of an f32: add 0x7FFF plus the lowest kept bit, then truncate.
ZT_HOST_DEVICE_INLINE uint16_t bf16_bits_nearest_even(float x) {
  const uint32_t u = float_bits(x);
  const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>(is_nan ? quiet_nan : rounded);
}

}  // namespace zt
