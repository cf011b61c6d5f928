// The host<->device copies of ZeRO CPU offload (ZeroEngine with offload.optimizer), per rank. Two modes:
//   synchronous  every copy is copy_tensor on the rank's stream, which it waits for: the reference, and
//                what the CPU backend always does (its "device" is the host: the copies are memcpys);
//   pipelined    (GPU) gradients go down on one copy stream and parameters up on another, so the CPU
//                update of block k overlaps the download of blocks > k and the upload of blocks < k:
//                  down(k)       makes the down stream wait for the work queued on the rank's stream so far
//                                (block k's reduction), queues the copy, records block k's event; called
//                                from gradients_ready, so downloads overlap the rest of backward
//                  wait_down(k)  the host blocks until block k's gradients are in host memory
//                  down_and_zero(k, src, dst, zero)
//                                down(k), then `zero` (the source's buffer) set to 0 on the same copy
//                                stream once the copy has read it: streamed gradients leave their bucket
//                                zeroed for its next layer without the rank's stream waiting for the copy
//                  current_stream_waits_down(k)
//                                the calling thread's stream waits for block k's download (and zero fill)
//                                without the host: before backward writes that bucket again
//                  up(...)       queued on the up stream (H2D engines run beside the D2H ones)
//                  up_after_current_stream()
//                                the up stream waits for the work queued on the rank's stream so far:
//                                the next up copies overwrite bytes that work may still write or read
//                                (the compute copy's zero fill at construction, a backward still reading
//                                the parameters when a delayed update is published)
//                  join()        the rank's stream waits for both copy streams: nothing reads the
//                                parameters or rewrites the gradients before the copies are done
//                  wait_up()     the host waits for the up copies (a delayed update rewrites their
//                                sources on a host thread, which no stream orders)
// Buffer reuse across steps is safe without host waits: a host buffer is rewritten by the CPU only after
// wait_down of the next step, whose down stream waited (through the rank's stream, after join) for every
// earlier up copy.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"
#include "runtime/tensor.h"

namespace zt::optim {

class OffloadCopies {
 public:
  // `pipelined` is ignored on the CPU backend (synchronous); blocks: how many down() slots (one per unit).
  OffloadCopies(DeviceKind device, bool pipelined, size_t blocks);
  ~OffloadCopies();
  OffloadCopies(const OffloadCopies&) = delete;
  OffloadCopies& operator=(const OffloadCopies&) = delete;

  bool pipelined() const { return streams_ != nullptr; }
  void down(size_t block, const Tensor& device_src, const Tensor& host_dst);
  void down_and_zero(size_t block, const Tensor& device_src, const Tensor& host_dst,
                     const Tensor& device_zero);
  void wait_down(size_t block);
  void current_stream_waits_down(size_t block);
  void up(const Tensor& host_src, const Tensor& device_dst);
  void up_after_current_stream();
  void join();
  // The host waits for the up copies queued so far (their host sources may then be rewritten).
  void wait_up();

 private:
  struct Streams;                     // CUDA builds: the two streams and the events
  std::unique_ptr<Streams> streams_;  // null: synchronous
};

}  // namespace zt::optim
