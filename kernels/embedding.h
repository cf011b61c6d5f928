// Embedding lookup (nn.Embedding with padding_idx; DeBERTa word embeddings use padding_idx = 0).
//
//   out[t, :] = table[ids[t], :]                 ids i64 [...] (N ids, any shape), table [V, D],
//                                                out [..., D] (the ids' shape with D appended)
// Backward (scatter-add; duplicate ids add up):
//   dtable[ids[t], :] += dout[t, :]   for every t with ids[t] != padding_idx
// Row padding_idx never receives gradient, even where that id appears at a real token (PyTorch semantics).
// padding_idx < 0 means none. An id outside [0, V) is an error. table/out/dout/dtable f32, contiguous.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace zt::kernels {

// in: ids, table; out: out.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);

// in: ids, dout; accumulated: dtable (rows other than padding_idx that some id selects).
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx = 0);

}  // namespace zt::kernels
