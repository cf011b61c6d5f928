// The one owner of the ZeRO engine's streams and events (GPU; every call is a no-op, or runs its work in
// order, where the stream was not made: the CPU backend, or the option off). Three independent streams:
//
//   comm       overlap_comm (world > 1): the reductions, their follow-ups and stage 3's gathers, ordered
//              with the compute stream (the rank thread's current stream) by events:
//                compute_done   on compute: what the next comm work reads is written
//                comm_done      on comm: everything queued there so far
//                gathered       on comm: stage 3's last gather landed in its buffer
//                bucket_free[4] on comm, per gradient bucket (embeddings, shared, layer l % 2): reduced,
//                               folded and zeroed, so backward may write it again
//   optimizer  overlap_optimizer: the device AdamW unit by unit after step_ready (on compute: gradients
//              and norm final), each unit's end recorded for the next pass to wait for (once)
//   early norm early_grad_norm: each unit's sum of squares as soon as its gradients are final
//
// Each stream synchronizes when destroyed: queued work ends before the buffers it reads go back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/tensor.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/grad_norm.cuh"
#include "runtime/stream.h"
#endif

namespace zt::optim {

class ZeroStreams {
 public:
  ZeroStreams();
  ~ZeroStreams();
  ZeroStreams(const ZeroStreams&) = delete;
  ZeroStreams& operator=(const ZeroStreams&) = delete;

  // Each makes its stream on the rank thread's current device (CUDA builds; nothing otherwise).
  void make_comm_stream();
  void make_optimizer_stream(size_t units);
  // largest_slice: elements of the largest slice one unit's norm reads (its block partials' scratch).
  void make_early_norm_stream(int64_t largest_slice);
  bool comm_overlap() const;
  bool optimizer_overlap() const;
  bool early_norm() const;

  // overlap_comm. Without the comm stream: on_comm runs `work` on the current stream, the rest do nothing.
  void comm_waits_for_compute();
  void on_comm(const std::function<void()>& work);
  void record_bucket_free(size_t slot);
  void compute_waits_for_bucket_free(size_t slot);
  void compute_waits_for_comm();
  void compute_waits_for_gather();  // records `gathered` on comm, the compute stream waits for it

#ifdef ZT_WITH_CUDA
  // overlap_optimizer: the optimizer stream after everything queued on the compute stream so far.
  cudaStream_t optimizer_stream_after_compute();
  void record_unit_updated(size_t unit);
  // The early norm: unit `unit`'s statistics of `slice` into `result` on the early-norm stream, after the
  // compute stream's work so far (`unit` names it in the scratch check).
  void queue_unit_norm(const Tensor& slice, gpu::GradStats* result, const std::string& unit);
  // Whether `units` statistics were queued this step (then the compute stream waits for them); resets the
  // count either way.
  bool take_early_norm(size_t units);
#endif
  // The compute stream waits for unit `unit`'s overlapped AdamW (once); for every unit's.
  void compute_waits_for_update(size_t unit);
  void compute_waits_for_all_updates();

 private:
  struct Comm;
  struct Optimizer;
  struct EarlyNorm;
  // Declared in the order the streams were made, so destroyed early norm, optimizer, comm.
  std::unique_ptr<Comm> comm_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<EarlyNorm> early_;
};

}  // namespace zt::optim
