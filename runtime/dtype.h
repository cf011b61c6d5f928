// Runtime element types. Storage type (what sits in memory) and accumulate type (what arithmetic uses) are
// kept distinct: bf16/f16 tensors are always reduced and normalised in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zt {

enum class DType : uint8_t { f32, bf16, f16, i32, i64 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);  // "f32"/"fp32"/"float32", "bf16"/"bfloat16", ...; throws
DType accumulate_dtype(DType storage);     // bf16, f16 -> f32; others unchanged
bool is_floating(DType t);

// Host-side 16-bit float types: plain bit containers, converted with round-to-nearest-even.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

bf16 float_to_bf16(float x);
float bf16_to_float(bf16 x);
f16 float_to_f16(float x);
float f16_to_float(f16 x);

// Index of the first value among `count` host values of a floating dtype that is NaN or infinite
// (negative as well, with `or_negative`: -0.0 is not), or -1. Tests the bits, so it holds under any
// floating-point compiler flags. For checks on loaded data, where a damaged file must not become weights.
int64_t first_invalid_float(const void* data, DType dtype, int64_t count, bool or_negative = false);
// The value at `index` of such a buffer, as a float, for the message.
float float_value_at(const void* data, DType dtype, int64_t index);

// Maps C++ element types to DType for typed accessors.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};

}  // namespace zt
