// What the GPU AdamW tests share (test_adamw_gpu, test_split_master_gpu, test_untouched_rows_gpu): the
// bounded launch shapes, the loop over the variants a kernel change must store the same bits in, and a
// bitwise comparison of downloaded buffers that says where they differ.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "optim/adamw_launch.h"

namespace zt::optim::test_cases {

// Shapes with more chunks than blocks (each block loops), blocks of 32..1024 threads (the stride within a
// chunk), and one bounded field with the other at its default.
inline constexpr AdamWLaunch kBoundedLaunches[] = {{1, 32},   {3, 64},  {33, 512}, {7, 1024},
                                                   {66, 256}, {0, 128}, {5, 0}};

// check(offset, zero_grads, what) for buffers 0 and 1 element past an allocation (the vector and the scalar
// paths) and with zero_grads off and on; `what` names the variant for failure messages.
template <typename Check>
void for_each_offset_and_zeroing(const Check& check) {
  for (const int64_t offset : {0, 1}) {
    for (const bool zero_grads : {false, true}) {
      check(offset, zero_grads,
            "offset " + std::to_string(offset) + (zero_grads ? ", zero_grads" : "") + ", ");
    }
  }
}

inline std::string describe(const AdamWLaunch& launch) {
  return "launch {" + std::to_string(launch.blocks) + ", " + std::to_string(launch.threads) + "}, ";
}

// memcmp of two downloads; on a difference, how many elements differ and the first.
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0) return;
  int64_t first = -1, count = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (first < 0) first = static_cast<int64_t>(i);
    ++count;
  }
  ADD_FAILURE() << what << ": " << count << " elements differ, the first at " << first;
}

}  // namespace zt::optim::test_cases
