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

// out must be the ids' shape with the embedding width appended.
void check_rows_shape(const Tensor& rows, const Tensor& ids, int64_t dim, const char* op, const char* name) {
  bool same = rows.rank() == ids.rank() + 1 && rows.dim(-1) == dim;
  for (int i = 0; same && i < ids.rank(); ++i) same = rows.dim(i) == ids.dim(i);
  ZT_CHECK(same, op, ": ", name, " must have shape ids ", ids.shape().to_string(), " + [", dim, "], got ",
           rows.shape().to_string());
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, cudaStream_t stream) {
  constexpr const char* op = "embedding_forward";
  check_cuda_arg(ids, DType::i64, op, "ids");
  check_cuda_arg(table, table.dtype(), op, "table");
  check_cuda_arg(out, table.dtype(), op, "out");
  ZT_CHECK(table.rank() == 2, op, ": table must be [V, D], got ", table.describe());
  check_rows_shape(out, ids, table.dim(1), op, "out");
  dispatch_float_storage(table.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_gather_rows(TableRowOfId{typed<int64_t>(ids), table.dim(0)}, typed<T>(table), typed<T>(out),
                       ids.numel(), table.dim(1), stream, op);
  });
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx,
                        cudaStream_t stream) {
  constexpr const char* op = "embedding_backward";
  check_cuda_arg(ids, DType::i64, op, "ids");
  check_cuda_arg(dout, dout.dtype(), op, "dout");
  check_cuda_arg(dtable, DType::f32, op, "dtable");
  ZT_CHECK(dtable.rank() == 2, op, ": dtable must be [V, D], got ", dtable.describe());
  const int64_t vocab = dtable.dim(0), dim = dtable.dim(1), tokens = ids.numel();
  check_rows_shape(dout, ids, dim, op, "dout");
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
