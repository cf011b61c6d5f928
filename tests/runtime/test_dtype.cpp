#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/check.h"
#include "runtime/dtype.h"

namespace zt {
namespace {

float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}

TEST(DType, SizesNamesAndAccumulateTypes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp16"), DType::f16);
  EXPECT_EQ(accumulate_dtype(DType::bf16), DType::f32);
  EXPECT_EQ(accumulate_dtype(DType::f16), DType::f32);
  EXPECT_EQ(accumulate_dtype(DType::i32), DType::i32);
  EXPECT_THROW(parse_dtype("float8"), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3F80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)).bits, 0x3F80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: ties up to even.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)).bits, 0x3F82);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)).bits, 0x3F81);  // just above halfway rounds up
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max()))));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, F16RoundTripsEveryFiniteValue) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    f16 h{static_cast<uint16_t>(b)};
    float f = f16_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_f16(f).bits, h.bits) << "bits 0x" << std::hex << b;
  }
}

TEST(DType, F16RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_f16(1.0f).bits, 0x3C00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0); 1 + 3*2^-11 ties up.
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3C02);
  EXPECT_EQ(float_to_f16(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7C00);  // halfway to 2^16 rounds to inf
  EXPECT_EQ(float_to_f16(65519.0f).bits, 0x7BFF);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)).bits, 0x0000);  // half of it ties to even (0)
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)).bits, 0x0001);
  EXPECT_EQ(float_to_f16(-0.0f).bits, 0x8000);
}

}  // namespace
}  // namespace zt
