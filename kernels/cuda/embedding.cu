#include "kernels/cuda/embedding.cuh"

#include "kernels/cuda/launch_common.cuh"
#include "kernels/cuda/row_gather.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

// Output row t reads table row ids[t]; an id outside [0, V) yields a NaN row.
struct TableRowOfId {
  const int64_t* ids;  // [N]
  int64_t vocab;
  __device__ int64_t operator()(int64_t t) const {
    const int64_t id = ids[t];
    return id >= 0 && id < vocab ? id : kNanRow;
  }
};

// dtable[ids[t], j] += dout[t, j] for t in [0, N), j in [0, D); one thread per (t, pack of j).
// Float atomics: the order of duplicate ids' additions is unspecified (see the header).
template <typename T, bool kVector>
__global__ void embedding_backward_kernel(const int64_t* ids, const T* dout, int64_t tokens, int64_t dim,
                                          int64_t vocab, int64_t padding_idx, float* dtable) {
  constexpr int kItem = kVector ? Pack128<T>::kSize : 1;
  const int64_t items_per_row = dim / kItem;
  const int64_t items = tokens * items_per_row;
  for (int64_t item = global_thread_index(); item < items; item += grid_thread_count()) {
    const int64_t t = item / items_per_row;
    const int64_t j = (item - t * items_per_row) * kItem;
    const int64_t id = ids[t];
    if (id == padding_idx || id < 0 || id >= vocab) continue;
    float* row = dtable + id * dim + j;
    if constexpr (kVector) {
      const Pack128<T> pack = load128(dout + t * dim + j);
#pragma unroll
      for (int k = 0; k < kItem; ++k) atomicAdd(row + k, to_float(pack.v[k]));
    } else {
      atomicAdd(row, to_float(dout[t * dim + j]));
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, cudaStream_t stream) {
  constexpr const char* op = "embedding_forward";
  dispatch_float_storage(table.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_gather_rows(TableRowOfId{typed<int64_t>(ids), table.dim(0)}, typed<T>(table), typed<T>(out),
                       ids.numel(), table.dim(1), stream, op);
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx,
                        cudaStream_t stream) {
  constexpr const char* op = "embedding_backward";
  const int64_t vocab = dtable.dim(0), dim = dtable.dim(1), tokens = ids.numel();
  if (tokens == 0 || dim == 0) return;
  dispatch_float_storage(dout.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kPack = Pack128<T>::kSize;
    if (dim % kPack == 0 && is_aligned16(dout.data())) {
      embedding_backward_kernel<T, true><<<blocks_for(tokens * (dim / kPack)), kThreadsPerBlock, 0, stream>>>(
          typed<int64_t>(ids), typed<T>(dout), tokens, dim, vocab, padding_idx, typed<float>(dtable));
    } else {
      embedding_backward_kernel<T, false><<<blocks_for(tokens * dim), kThreadsPerBlock, 0, stream>>>(
          typed<int64_t>(ids), typed<T>(dout), tokens, dim, vocab, padding_idx, typed<float>(dtable));
    }
    ZT_CUDA_CHECK_LAUNCH(op);
  });
}

}  // namespace zt::kernels::gpu
