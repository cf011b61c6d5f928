// optim/cuda/untouched_rows.cuh's is_untouched — the row of an element from a double reciprocal and two
// integer corrections, as the GPU norm and AdamW kernels compute it — against integer division, at every
// row boundary (k width - 1, k width, k width + 1) of tables up to 2^20 rows x 4096 (past 2^32 elements),
// with the table starting at an offset and elements before and after it read as usual.
#include "optim/cuda/untouched_rows.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace zt::optim::gpu {
namespace {

TEST(UntouchedRows, RowOfEveryBoundaryElementIsExact) {
  for (const auto& [rows, width] : {std::pair<int64_t, int64_t>{128100, 1536},
                                    {301, 40},
                                    {1 << 20, 4096},
                                    {7, 8},
                                    {100003, 24},
                                    {3, 1 << 20}}) {
    std::vector<int32_t> touched(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) touched[static_cast<size_t>(r)] = (r * 2654435761u >> 7) & 1;
    const int64_t first = 1000;
    const UntouchedRows u = untouched_rows(touched.data(), first, width, rows);
    int64_t wrong = 0, checked = 0;
    for (int64_t r = 0; r <= rows; ++r) {
      for (const int64_t delta : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
        const int64_t offset = r * width + delta;
        const bool inside = offset >= 0 && offset < rows * width;
        const bool want = inside && touched[static_cast<size_t>(offset / width)] == 0;
        wrong += is_untouched(u, first + offset) != want;
        ++checked;
      }
    }
    EXPECT_EQ(wrong, 0) << rows << " rows of " << width << " (" << checked << " elements checked)";
    EXPECT_FALSE(is_untouched(u, 0)) << "before the table";
    EXPECT_FALSE(is_untouched(u, first + rows * width + 5)) << "after the table";
  }
}

}  // namespace
}  // namespace zt::optim::gpu
