// embedding: the entry points of kernels/embedding.h. Each checks its arguments once, for both backends, and
// sends the call to one: CUDA tensors to kernels/cuda/embedding.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/embedding.cpp (which also checks that every id is inside
// the table: it can read them).
#include "kernels/embedding.h"

#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/embedding.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/embedding.cuh"
#endif

namespace zt::kernels {
namespace {

// `rows` must be the ids' shape with the embedding width appended.
void check_rows_shape(const Tensor& rows, const Tensor& ids, int64_t dim, const char* op, const char* name) {
  bool same = rows.rank() == ids.rank() + 1 && rows.dim(-1) == dim;
  for (int i = 0; same && i < ids.rank(); ++i) same = rows.dim(i) == ids.dim(i);
  ZT_CHECK(same, op, ": ", name, " must have shape ids ", ids.shape().to_string(), " + [", dim, "], got ",
           rows.shape().to_string());
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  constexpr const char* op = "embedding_forward";
  const bool cuda = runs_on_cuda(table, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  const DType storage = cuda ? table.dtype() : DType::f32;  // f32, bf16 or f16 on CUDA
  check_arg(ids, DType::i64, device, op, "ids");
  check_arg(table, storage, device, op, "table");
  check_arg(out, storage, device, op, "out");
  ZT_CHECK(table.rank() == 2, op, ": table must be [V, D], got ", table.describe());
  check_rows_shape(out, ids, table.dim(1), op, "out");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::embedding_forward(ids, table, out, current_stream());
#endif
  }
  cpu::embedding_forward(ids, table, out);
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) {
  constexpr const char* op = "embedding_backward";
  const bool cuda = runs_on_cuda(dtable, op);
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  check_arg(ids, DType::i64, device, op, "ids");
  check_arg(dout, cuda ? dout.dtype() : DType::f32, device, op, "dout");
  check_arg(dtable, DType::f32, device, op, "dtable");
  ZT_CHECK(dtable.rank() == 2, op, ": dtable must be [V, D], got ", dtable.describe());
  check_rows_shape(dout, ids, dtable.dim(1), op, "dout");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::embedding_backward(ids, dout, dtable, padding_idx, current_stream());
#endif
  }
  cpu::embedding_backward(ids, dout, dtable, padding_idx);
}

}  // namespace zt::kernels
