// Views into the ZeRO engine's flat buffers and the small conversions its pieces share: a buffer of one
// dtype as [numel] at an element offset, a host f32 view as a span, the compute-dtype values of an f32
// master block, and the streams device work and collectives are queued on.
#pragma once

#include <cstdint>
#include <span>

#include "optim/adamw.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"
#include "runtime/tensor.h"

#ifdef ZT_WITH_CUDA
#include "runtime/stream.h"
#endif

namespace zt::optim::zero_views {

// The stream device work is queued on: the calling (rank) thread's current stream (runtime/stream.h).
#ifdef ZT_WITH_CUDA
inline cudaStream_t work_stream() {
  return current_stream();
}
#endif

// Collectives are queued on the rank's current stream too (ordered with its compute without host syncs).
inline CommStream work_comm_stream() {
#ifdef ZT_WITH_CUDA
  return current_stream();
#else
  return nullptr;
#endif
}

// One tensor "flat" of [numel] elements.
ArenaLayout flat_layout(int64_t numel, DType dtype);

// A 1-D view of `numel` elements at element `offset` of a buffer.
Tensor view(const Arena& arena, DType dtype, int64_t offset, int64_t numel);

// A host f32 tensor as a span.
std::span<float> host_span(const Tensor& t);

// The compute-dtype values of an f32 master block, into a host tensor of the same length (the rounding of
// kernels::copy and of the AdamW's 16-bit copy: nearest even).
void write_compute_values(std::span<const float> master, const Tensor& out);

// A host tensor's elements as the AdamW's 16-bit output (nothing for f32: the caller copies the master).
Params16Out params16_of(const Tensor& t);

}  // namespace zt::optim::zero_views
