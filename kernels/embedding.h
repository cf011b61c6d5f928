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

#include "kernels/grad_write.h"
#include "runtime/tensor.h"

namespace zt::kernels {

// in: ids, table; out: out.
void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);

// in: ids, dout; accumulated: dtable (rows other than padding_idx that some id selects).
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx = 0);

// The rows of a word-table gradient that a batch writes, for a consumer that reads only those (the ZeRO
// engine's touched rows, ZT_TOUCHED_WORD_ROWS): a batch names at most B L of the V rows, so zero-filling the
// whole [V, D] gradient before the scatter and reading it all in the norm and the AdamW moves V D floats for
// B L rows. Instead, for every id other than padding_idx: if touched[id] is 0, dtable's row id is zeroed and
// touched[id] set to 1; embedding_backward then adds into it. Rows left unflagged keep whatever they held:
// by contract they read as 0, and nothing may read them as gradients.
//   write == overwrite   clears every flag first (the first micro-batch of a window);
//   accumulate           keeps them (a later micro-batch: flagged rows keep their sums, new ones start at 0).
// touched i32 [V] (0 or 1), dtable f32 [V, D], on the same device; ids as for embedding_backward.
void embedding_touch_rows(const Tensor& ids, const Tensor& dtable, const Tensor& touched, int64_t padding_idx,
                          GradWrite write);

}  // namespace zt::kernels
