#include "runtime/dtype.h"

#include <bit>
#include <cmath>

#include "runtime/bf16_bits.h"
#include "runtime/check.h"

namespace zt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  ZT_FAIL("invalid dtype ", static_cast<int>(t));
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
  }
  ZT_FAIL("invalid dtype ", static_cast<int>(t));
}

DType parse_dtype(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::f16;
  if (name == "i32" || name == "int32") return DType::i32;
  if (name == "i64" || name == "int64") return DType::i64;
  ZT_FAIL("unknown dtype '", name, "' (expected f32, bf16, f16, i32 or i64)");
}

DType accumulate_dtype(DType storage) {
  return (storage == DType::bf16 || storage == DType::f16) ? DType::f32 : storage;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::bf16 || t == DType::f16;
}

bf16 float_to_bf16(float x) {
  return bf16{bf16_bits_nearest_even(x)};  // runtime/bf16_bits.h
}

float bf16_to_float(bf16 x) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Handles overflow to inf, subnormals and
// round-to-nearest-even at every boundary by working on the f32 bit pattern.
f16 float_to_f16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    uint16_t mant = abs > 0x7F800000u ? 0x0200u : 0u;
    return f16{static_cast<uint16_t>(sign | 0x7C00u | mant)};
  }
  if (abs >= 0x477FF000u) return f16{static_cast<uint16_t>(sign | 0x7C00u)};  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                    // below 2^-14: subnormal f16 (or zero)
    if (abs < 0x33000000u) return f16{sign};  // below half the smallest subnormal 2^-25: zero
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = 126u - exp;  // value = mant * 2^(exp-150); f16 subnormal unit is 2^-24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return f16{static_cast<uint16_t>(sign | half)};
  }
  uint32_t rebased = abs - 0x38000000u;  // exponent bias 127 -> 15
  uint32_t lsb = (rebased >> 13) & 1u;
  rebased += 0x0FFFu + lsb;
  return f16{static_cast<uint16_t>(sign | (rebased >> 13))};
}

float f16_to_float(f16 x) {
  uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  uint32_t exp = (x.bits >> 10) & 0x1Fu;
  uint32_t mant = x.bits & 0x3FFu;
  if (exp == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

namespace {

// Exponent and sign masks of the storage formats: a value is NaN or infinite when all its exponent bits
// are set.
template <typename Bits>
int64_t first_invalid_bits(const Bits* values, int64_t count, Bits exponent_mask, Bits sign_mask,
                           bool or_negative) {
  const Bits magnitude_mask = static_cast<Bits>(~sign_mask);
  for (int64_t i = 0; i < count; ++i) {
    const Bits v = values[i];
    if ((v & exponent_mask) == exponent_mask) return i;
    if (or_negative && (v & sign_mask) != 0 && (v & magnitude_mask) != 0) return i;
  }
  return -1;
}

}  // namespace

int64_t first_invalid_float(const void* data, DType dtype, int64_t count, bool or_negative) {
  switch (dtype) {
    case DType::f32:
      return first_invalid_bits(static_cast<const uint32_t*>(data), count, uint32_t{0x7F800000u},
                                uint32_t{0x80000000u}, or_negative);
    case DType::bf16:
      return first_invalid_bits(static_cast<const uint16_t*>(data), count, uint16_t{0x7F80u},
                                uint16_t{0x8000u}, or_negative);
    case DType::f16:
      return first_invalid_bits(static_cast<const uint16_t*>(data), count, uint16_t{0x7C00u},
                                uint16_t{0x8000u}, or_negative);
    default:
      ZT_FAIL("first_invalid_float: ", dtype_name(dtype), " is not a floating dtype");
  }
}

float float_value_at(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::f32:
      return static_cast<const float*>(data)[index];
    case DType::bf16:
      return bf16_to_float(static_cast<const bf16*>(data)[index]);
    case DType::f16:
      return f16_to_float(static_cast<const f16*>(data)[index]);
    default:
      ZT_FAIL("float_value_at: ", dtype_name(dtype), " is not a floating dtype");
  }
}

}  // namespace zt
