// How a backward kernel stores a parameter gradient.
//
//   accumulate   dW += contribution   gradient accumulation over micro-batches, and the several contributions
//                                     one weight receives in one pass (share_att_key: Wk from the content and
//                                     the positional keys)
//   overwrite    dW  = 0 + contribution
//                                     the first contribution of an accumulation window, when the buffer holds
//                                     nothing to keep: no zero fill before the backward and no read of the
//                                     old value. "0 +" is what the reductions store (the f32 sum a zeroed
//                                     buffer would end with, bit for bit, -0 included); the cuBLASLt
//                                     weight-gradient GEMM stores its product with beta = 0, the same value
//                                     (a -0 product stays -0 where accumulating onto +0 gives +0: equal as
//                                     numbers).
#pragma once

#include <cstdint>

namespace zt::kernels {

enum class GradWrite : uint8_t { accumulate, overwrite };

}  // namespace zt::kernels
