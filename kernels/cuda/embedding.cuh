// CUDA embedding lookup and its scatter-add backward (semantics in kernels/embedding.h).
//
// Storage: table and out in T = f32, bf16 or f16 (one dtype); dout in T; dtable f32 (the gradient
// arena); ids i64. Contiguous, device memory, queued on `stream`.
//
// Ids live on the device, so a bad id cannot throw without a host round trip. Instead:
//   forward:  an id outside [0, V) writes a NaN row, which poisons the loss (the non-finite check fires);
//   backward: such ids are skipped (their forward already produced the NaN).
//
// The backward adds with float atomics (one atomicAdd per element of dout): duplicate ids in a batch add
// up in an unspecified order, so dtable rows hit by the same id more than once may differ in the last bits
// from run to run. Rows hit once are exact (0 + g, or the prior value + g).
// The arguments are checked by kernels/embedding.cpp, the entry point that calls these.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels::gpu {

// in: ids [...], table [V, D]; out: out [..., D].
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out, cudaStream_t stream);

// in: ids, dout [..., D]; accumulated: dtable [V, D] (rows other than padding_idx; padding_idx < 0: none).
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx,
                        cudaStream_t stream);

}  // namespace zt::kernels::gpu
