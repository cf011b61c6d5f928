// GEMM on the GPU: a small cuBLASLt wrapper with row-major semantics, used by linear, conv1d and attention.
//
//   C[z] = alpha * op(A[z]) op(B[z]) + beta * C[z]        z in [0, batch), all matrices row-major
//   op(A) [m, k]: A stored [m, k] (lda >= k), or [k, m] (lda >= m) when transpose_a
//   op(B) [k, n]: B stored [k, n] (ldb >= n), or [n, k] (ldb >= k) when transpose_b
//   C     [m, n], ldc >= n;  A[z] = A + z * a.batch_stride elements (likewise B, C; a stride may be 0)
// Epilogue bias: C[z][r, c] += bias[c] after the product (bias [n], the dtype of C) — y = x W^T + b is
//   {A = x, B = W, transpose_b, bias = b}.
// Two-level batch (outer > 1): items (o, z), o in [0, outer), z in [0, batch), operand item at
//   data + o * outer_stride + z * batch_stride — e.g. head h of batch row b of a [B, L, D] tensor
//   (outer = B, stride L*D; batch = heads, stride d), which no single stride reaches. It runs as ONE
//   cublasGemmBatchedEx over outer * batch items, whose pointer arrays a small kernel writes: one launch
//   where a loop over o would issue `outer` small GEMMs, each filling a fraction of the GPU. The arrays are
//   a function of (bases, strides, batch, items), so each stream keeps the ones it filled and reuses them
//   (not while the stream is captured into a graph: then scratch, filled per call).
//   When every operand's outer_stride equals batch * batch_stride the items are one strided batch and
//   take the cuBLASLt path. No bias epilogue with outer > 1.
//
// Dtypes: A and B share one storage dtype (f32, bf16, f16); C is that dtype or f32 (bf16/f16 products
// accumulated into f32 gradient buffers). Compute is always fp32 (CUBLAS_COMPUTE_32F). f32 inputs use
// TF32 tensor cores only with allow_tf32 (default off, so f32 results match the CPU reference to ~1e-6).
//
// Why row-major over column-major cuBLASLt: a row-major C [m, n] is the column-major C^T [n, m] =
// op(B)^T op(A)^T, so the call passes B as cuBLASLt's A, A as its B, and swaps m and n; no data moves.
//
// Caching: per device one cuBLASLt handle and, per problem (dtypes, shape, leading dims, strides, transposes,
// epilogue, pointer alignments), one matmul descriptor, layouts and the heuristic's algorithm; per (device,
// stream) one 32 MiB workspace (category scratch, from the allocator current on the thread at the stream's
// first GEMM: a rank's own under its AllocatorScope; the process-wide one for the legacy stream) and one
// cuBLAS handle for the fallbacks, dropped when the stream is retired (runtime/stream.h). Where the heuristic
// finds no algorithm (unaligned 16-bit views such as a d = 5 head), the call falls back to cuBLAS's
// cublasGemmStridedBatchedEx plus a bias kernel, which accepts any alignment.
//
// The GELU epilogues are not offered: cuBLASLt's GELU is the tanh approximation and DeBERTa uses the erf
// form, so fusing it would change the model's numbers.
//
// Streams: every stream has its own workspace and cuBLAS handle, so GEMMs on different streams (ranks on
// one GPU, each a thread with its own current stream) may run concurrently. Thread-safe: a mutex guards the
// caches and is held while a call is enqueued (host-side only; the GPU work of different streams overlaps).
//
// CUDA builds only (ZT_WITH_CUDA).
#pragma once

#ifndef ZT_WITH_CUDA
#error "kernels/cuda/gemm.h is for CUDA builds only (ZT_WITH_CUDA)"
#endif

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace zt::kernels {

enum class GemmEpilogue : uint8_t {
  none,
  bias,  // C += bias[c] broadcast over rows
};

// One operand in row-major storage.
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;            // elements between consecutive rows
  int64_t batch_stride = 0;  // elements between consecutive batch items
  int64_t outer_stride = 0;  // elements between consecutive outer items (outer > 1)
};

struct GemmOutput {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  int64_t outer_stride = 0;
};

struct GemmProblem {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t outer = 1;               // two-level batch, see above
  DType input_dtype = DType::f32;  // A and B
  GemmOperand a;
  bool transpose_a = false;
  GemmOperand b;
  bool transpose_b = false;
  GemmOutput c;
  float alpha = 1.0f;
  float beta = 0.0f;  // 0: C is overwritten (its old contents are never read, NaNs included)
  GemmEpilogue epilogue = GemmEpilogue::none;
  const void* bias = nullptr;  // [n], dtype of C, with GemmEpilogue::bias
  bool allow_tf32 = false;     // f32 inputs only
};

// Enqueues the product on `stream` (current device). Throws zt::Error on bad arguments or library errors.
void gemm(const GemmProblem& problem, cudaStream_t stream);

// How many cached plans exist on the current device (tests check that repeated shapes reuse them).
int64_t gemm_cached_plan_count();
// How many (device, stream) workspaces exist (tests check one per stream, dropped when the stream is).
int64_t gemm_stream_workspace_count();
// How many two-level batches' pointer arrays are kept, over all streams (gemm.cu).
int64_t gemm_cached_pointer_array_count();

}  // namespace zt::kernels
