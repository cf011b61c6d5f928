// A second stream for work that the calling thread's stream does not read until it says so.
//
// What it is for: the weight gradients of backward (model/deberta.cpp, ZT_WEIGHT_GRAD_STREAM=1). dW = dY^T X
// feeds nothing else in backward, so a layer's dW GEMMs can run beside its dX GEMMs and the memory-bound
// kernels between them; at small batch a GEMM of M = B L rows leaves SMs idle in its last wave, which the
// other stream's work can fill. The same kernels on the same inputs: the same bits.
//
//   side.fork();                                 // side work queued next starts after all that the current
//                                                // stream has queued so far (its inputs are written)
//   auto done = side.run([&] { dW GEMM ... });   // queued on the side stream
//   ...                                          // current-stream work that neither writes what the side
//                                                // work reads nor reads what it writes
//   side.wait(done);                             // later current-stream work waits for that side work (and
//                                                // for all queued on the side stream before it)
//   side.join();                                 // later current-stream work waits for all side work
//
// Inactive (the default; a CPU model; a build without CUDA): run() calls the work at once on the current
// stream and fork/wait/join do nothing, so one piece of code serves both.
//
// Memory: the caching allocator hands a released block to the next request at once (runtime/
// device_allocator.h), which only same-stream work orders. So side work must not release transient scratch
// (the next current-stream op could take it while the side kernels still run: keep column sums and other
// ops that allocate scratch on the current stream), and what it allocates must be taken after a fork that
// follows the last use of the block: run() forks first on the stream's first use, when its GEMM workspace
// (kernels/cuda/gemm.cu, kept until the stream dies) is allocated.
// Graph capture: fork/run/wait/join are event records and waits, which a capture follows across streams;
// every capture must join before it ends.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace zt {

class SideStream {
 public:
  using Ticket = size_t;  // a point in the side stream's queue (run's return value)

  SideStream();  // inactive
  // Active: a non-blocking stream on the current device, at the lowest priority: where the current stream
  // has a higher one (the world-1 trainer's rank stream: RankDevice's greatest), its work is scheduled
  // first and the side work fills what it leaves; beside a stream at the default priority the two share.
  // Opened lazily by its users at their first use, so that first use must not be inside a graph capture
  // (its GEMM workspace is allocated then). Throws in a build without CUDA.
  static SideStream on_current_device();
  ~SideStream();
  SideStream(SideStream&& other) noexcept;
  SideStream& operator=(SideStream&& other) noexcept;

  bool active() const { return state_ != nullptr; }
  void fork();
  Ticket run(const std::function<void()>& work);
  void wait(Ticket ticket);
  void join();  // also lets the tickets' events be recorded again

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zt
