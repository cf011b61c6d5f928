// Row copies with a computed source row, shared by embedding_forward (row = ids[t]) and select_token
// (row = b * L + token): dst[r, :] = src[map(r), :] for dst [rows, dim], src [*, dim].
//
// map(r) >= 0 copies that source row; kZeroRow writes zeros (select_token_backward's other rows); kNanRow
// writes NaN (an embedding id outside [0, V): the device cannot throw, so the bad id poisons its output row
// and every loss computed from it, which the non-finite check then catches).
//
// Work item: one Pack128<T> of a row when dim is a multiple of the pack and both bases are 16-byte
// aligned (then every row start is aligned too), else one element.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch_common.cuh"

namespace zt::kernels::cuda_detail {

constexpr int64_t kZeroRow = -1;
constexpr int64_t kNanRow = -2;

template <typename T, bool kVector, typename RowMap>
__global__ void gather_rows_kernel(const RowMap map, const T* src, T* dst, int64_t rows, int64_t dim) {
  constexpr int kItem = kVector ? Pack128<T>::kSize : 1;
  const int64_t items_per_row = dim / kItem;  // exact: the vector path requires dim % kItem == 0
  const int64_t items = rows * items_per_row;
  for (int64_t item = global_thread_index(); item < items; item += grid_thread_count()) {
    const int64_t r = item / items_per_row;
    const int64_t c = (item - r * items_per_row) * kItem;
    const int64_t s = map(r);
    const T fill = from_float<T>(s == kNanRow ? __int_as_float(0x7fc00000) : 0.0f);
    if constexpr (kVector) {
      Pack128<T> pack;
      if (s >= 0) {
        pack = load128(src + s * dim + c);
      } else {
#pragma unroll
        for (int j = 0; j < kItem; ++j) pack.v[j] = fill;
      }
      store128(dst + r * dim + c, pack);
    } else {
      dst[r * dim + c] = s >= 0 ? src[s * dim + c] : fill;
    }
  }
}

template <typename T, typename RowMap>
void launch_gather_rows(const RowMap& map, const T* src, T* dst, int64_t rows, int64_t dim,
                        cudaStream_t stream, const char* name) {
  if (rows == 0 || dim == 0) return;
  constexpr int kPack = Pack128<T>::kSize;
  if (dim % kPack == 0 && is_aligned16(src) && is_aligned16(dst)) {
    gather_rows_kernel<T, true>
        <<<blocks_for(rows * (dim / kPack)), kThreadsPerBlock, 0, stream>>>(map, src, dst, rows, dim);
  } else {
    gather_rows_kernel<T, false>
        <<<blocks_for(rows * dim), kThreadsPerBlock, 0, stream>>>(map, src, dst, rows, dim);
  }
  ZT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace zt::kernels::cuda_detail
