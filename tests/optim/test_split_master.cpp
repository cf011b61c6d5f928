// The split master's encoding (optim/split_master.h), on the host: every f32 master round-trips bit for bit
// through (hi, lo, up), and hi is the bf16 compute copy the host conversion (runtime/dtype.h) rounds it to.
// Checked on every high half (65536 values, each with the low halves that decide the rounding: 0, 1, the
// tie 0x8000 and its neighbours, 0xFFFF) and on 2^32 / 65521 patterns spread over the whole range, which
// cover both signs, subnormals, zeros, the carry into the exponent and into inf, inf and NaN. The GPU
// kernels use these same functions (tests/optim/test_adamw_gpu.cpp compares them with the f32 master's).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "optim/split_master.h"
#include "runtime/dtype.h"

namespace zt::optim {
namespace {

// Whether pattern u survives split and join (NaN: stays a NaN), with hi the host's bf16 rounding of it.
::testing::AssertionResult round_trips(uint32_t u) {
  const float x = float_from_bits(u);
  const SplitMasterValue v = split_master_value(x);
  if (v.hi != float_to_bf16(x).bits) {
    return ::testing::AssertionFailure() << std::hex << "pattern 0x" << u << ": hi 0x" << v.hi
                                         << ", the host rounding 0x" << float_to_bf16(x).bits;
  }
  const float back = join_master_value(v.hi, v.lo, v.up);
  if (std::isnan(x) ? !std::isnan(back) : float_bits(back) != u) {
    return ::testing::AssertionFailure() << std::hex << "pattern 0x" << u << " -> (hi 0x" << v.hi << ", lo 0x"
                                         << v.lo << ", up " << v.up << ") -> 0x" << float_bits(back);
  }
  return ::testing::AssertionSuccess();
}

TEST(SplitMaster, EveryHighHalfWithTheLowHalvesThatDecideTheRounding) {
  int failures = 0;
  for (uint32_t top = 0; top <= 0xFFFFu; ++top) {
    for (const uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const ::testing::AssertionResult r = round_trips((top << 16) | low);
      if (!r && ++failures <= 5) ADD_FAILURE() << r.message();
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(SplitMaster, PatternsSpreadOverTheWholeRange) {
  int failures = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65521) {
    const ::testing::AssertionResult r = round_trips(static_cast<uint32_t>(u));
    if (!r && ++failures <= 5) ADD_FAILURE() << r.message();
  }
  EXPECT_EQ(failures, 0);
}

// The case the rounding bit exists for: an exact tie leaves hi even whichever way it went, so (hi, lo) alone
// stand for two masters; `up` tells them apart.
TEST(SplitMaster, TiesRoundedEitherWayShareHighAndLowHalvesAndDifferInTheBit) {
  const uint32_t rounded_down = 0x3F800000u | 0x8000u;  // 1 + 2^-8 exactly halfway, top half even: stays
  const uint32_t rounded_up = 0x3F7F0000u | 0x8000u;    // top half odd: rounds up to 0x3F80
  const SplitMasterValue down = split_master_value(float_from_bits(rounded_down));
  const SplitMasterValue up = split_master_value(float_from_bits(rounded_up));
  EXPECT_EQ(down.hi, up.hi);
  EXPECT_EQ(down.lo, up.lo);
  EXPECT_FALSE(down.up);
  EXPECT_TRUE(up.up);
  EXPECT_EQ(float_bits(join_master_value(down.hi, down.lo, down.up)), rounded_down);
  EXPECT_EQ(float_bits(join_master_value(up.hi, up.lo, up.up)), rounded_up);
}

}  // namespace
}  // namespace zt::optim
