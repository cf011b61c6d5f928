// Rows of a gradient that read as 0 without being loaded: the word table's rows that no token of the
// window named (ZT_TOUCHED_WORD_ROWS; kernels::embedding_touch_rows zeroes and flags the rows a batch names
// before the scatter, and leaves the rest as they were). A bs-8 batch at seq 128 names at most 1,024 of
// xlarge's 128,100 rows, yet a zero fill of the whole f32 table before the scatter, the norm's read and the
// AdamW's read move 3 x 0.79 GB. With the rows flagged, the kernels that read the gradient (grad_stats, the
// AdamW) take 0 for an unflagged row's elements instead of loading them: the arithmetic of a zero-filled
// table, so the same bits, without the fill and the two reads. An unflagged row's memory holds stale values,
// never gradients: nothing else may read the table while the flags say so.
//
// Elements [first, first + rows * width) of the flat gradient the kernel reads form `rows` rows of `width`;
// row r is untouched when touched[r] == 0. Elements outside that span are read as usual.
#pragma once

#include <cstdint>

namespace zt::optim::gpu {

struct UntouchedRows {
  const int32_t* touched = nullptr;  // [rows], device memory; nullptr: every element is read
  int64_t first = 0;
  int64_t width = 1;
  int64_t rows = 0;
  double inverse_width = 1.0;  // 1 / width: an element's row without an integer division
};

inline UntouchedRows untouched_rows(const int32_t* touched, int64_t first, int64_t width, int64_t rows) {
  return {touched, first, width, rows, 1.0 / static_cast<double>(width)};
}

#ifdef __CUDACC__
#define ZT_UNTOUCHED_ROWS_HD __host__ __device__ __forceinline__
#else
#define ZT_UNTOUCHED_ROWS_HD inline
#endif

// Whether element i reads as 0. The double product may land one row off near a multiple of width (rounding
// either way); the two integer tests put it back, so the row is exact for any i below 2^52. Host and device
// (tests/optim/test_untouched_rows.cpp checks it against integer division on the CPU).
ZT_UNTOUCHED_ROWS_HD bool is_untouched(const UntouchedRows& u, int64_t i) {
  const int64_t offset = i - u.first;
  if (offset < 0 || offset >= u.rows * u.width) return false;
  int64_t row = static_cast<int64_t>(static_cast<double>(offset) * u.inverse_width);
  row -= row * u.width > offset;
  row += (row + 1) * u.width <= offset;
  return u.touched[row] == 0;
}
#undef ZT_UNTOUCHED_ROWS_HD

}  // namespace zt::optim::gpu
