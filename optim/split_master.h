// The split f32 master (ZeroEngineOptions::split_master): with a bf16 compute copy, the f32 master weight is
// stored as that copy plus what the copy leaves out, bit for bit:
//
//   hi = bf16(master), rounded to nearest even — the compute copy the model reads, as before
//   lo = master's low 16 bits                    — [N] uint16
//   up = 1 where the rounding went up (hi = (master >> 16) + 1), else 0 — [N] bits, bit e of byte e / 8
//
//   master bits = ((hi - up) << 16) | lo
//
// Why `up` is needed: hi and lo alone tell the rounding's direction except at an exact tie (lo = 0x8000),
// where round-to-even makes hi even whichever way it went, so an even hi with lo = 0x8000 stands for two
// masters (65537 states per even hi, one more than 16 bits hold). One bit a parameter keeps the master exact
// — the update reads and writes bit-identical values to an f32 master's — for 2 + 1/8 bytes instead of 4:
// 1.55 GiB less for xlarge, and 1.75 fewer bytes a parameter through each AdamW step.
//
// Inf and overflow: rounding up may carry into the exponent (to inf at the top of the range); hi - up undoes
// it, as the bit patterns of floats of one sign are consecutive integers. NaN: hi is the quiet NaN of the
// master's top bits (the CPU's and the GPU's conversion), up = 0, and the decoded value is a NaN.
#pragma once

#include <cstdint>

#include "runtime/bf16_bits.h"  // float_bits, float_from_bits, bf16_bits_nearest_even (hi's rounding)

namespace zt::optim {

struct SplitMasterValue {
  uint16_t hi = 0;  // the bf16 compute copy's bits
  uint16_t lo = 0;
  bool up = false;
};

ZT_HOST_DEVICE_INLINE SplitMasterValue split_master_value(float master) {
  const uint32_t u = float_bits(master);
  SplitMasterValue v;
  v.hi = bf16_bits_nearest_even(master);
  v.lo = static_cast<uint16_t>(u & 0xFFFFu);
  v.up = (u & 0x7FFFFFFFu) <= 0x7F800000u && v.hi != static_cast<uint16_t>(u >> 16);
  return v;
}

ZT_HOST_DEVICE_INLINE float join_master_value(uint16_t hi, uint16_t lo, bool up) {
  const auto top = static_cast<uint16_t>(hi - (up ? 1u : 0u));
  return float_from_bits((static_cast<uint32_t>(top) << 16) | lo);
}

}  // namespace zt::optim
