// The gradient reducer: where backward writes the gradients and how each unit's are reduced over the ranks
// (rank-order sums) once backward is done with the unit (optim/zero/engine.h, step 1):
//   stage 0     the full f32 buffer (or the activation arena's slots: gradients on the activations),
//               all-reduced per unit at the window's last micro-batch
//   stage 1     the full buffer, each unit reduce-scattered into the rank's slice at the last micro-batch
//   stage 2/3   a bucket per unit (UnitBuffers), reduce-scattered every micro-batch and folded into the
//               f32 shard accumulator, the bucket zeroed for its next use; at world size 1 backward writes
//               the shard itself (direct gradients); streamed (offload, one micro-batch): the reduced slice
//               goes down to the host from the bucket, its statistics taken on the way (GPU)
// With the optimizer offloaded each unit's final gradients start down to the host as soon as they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "optim/zero/offloaded_optimizer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/unit_buffers.h"
#include "optim/zero/zero_plan.h"
#include "runtime/arena.h"
#include "runtime/communicator.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/grad_norm.cuh"
#include "runtime/device_allocator.h"
#endif

namespace zt::optim {

class GradientReducer {
 public:
  // Allocates the gradient buffer (or lays it over `gradient_memory`, zeroed), the streamed slices'
  // statistics (GPU) and the buckets, in that order. `device`: the options of the engine's device buffers.
  GradientReducer(const ZeroPlan& plan, const ZeroPartition& partition, Communicator& comm,
                  const std::vector<OwnedBlock>& blocks, bool reduce_scatter, const ArenaOptions& device,
                  void* gradient_memory);
  // Offload: where the final gradients go (set once the offloaded optimizer exists).
  void send_final_gradients_to(OffloadedOptimizer* offloaded) { offloaded_ = offloaded; }

  const Arena* gradients() const { return grads_.get(); }  // null when streamed
  const Arena& bucket(size_t unit) const { return buckets_.at(partition_, unit); }
  Tensor block_gradients(const OwnedBlock& b) const;
  // Stage 0: backward writes (not adds) the unit's gradients on a window's first micro-batch; the shared
  // unit adds several terms over the pass and stays zeroed by the step.
  bool overwritten_by_backward(size_t unit) const;

  // Gradients on the activations: the unit's gaps between tensors, which the forward may have written.
  void zero_gaps(size_t unit);
  // The reduction of unit `unit`'s gradients and its follow-ups, on the current stream.
  void reduce(size_t unit, bool first_micro, bool last_micro);
  // After the step read them: the buffers backward accumulates into start the next window at zero.
  void clear_after_step();

#ifdef ZT_WITH_CUDA
  // One GradStats per unit (streamed slices, or the early norm's), read back once by the step.
  void allocate_unit_stats(const char* what);
  gpu::GradStats* unit_stats() {
    return unit_stats_.data_as<gpu::GradStats>();
  }
  const DeviceBuffer& unit_stats_buffer() const {
    return unit_stats_;
  }
#endif

 private:
  void send_down(size_t unit);

  const ZeroPlan& plan_;
  const ZeroPartition& partition_;
  Communicator& comm_;
  const std::vector<OwnedBlock>& blocks_;
  bool reduce_scatter_;
  std::unique_ptr<Arena> grads_;
  // Gradients on the activations: per unit, the (flat element offset, count) runs between its tensors.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gaps_;
#ifdef ZT_WITH_CUDA
  DeviceBuffer unit_stats_;
#endif
  UnitBuffers buckets_;
  OffloadedOptimizer* offloaded_ = nullptr;
};

}  // namespace zt::optim
