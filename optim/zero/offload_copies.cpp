#include "optim/zero/offload_copies.h"

#include <vector>

#include "kernels/elementwise.h"
#include "runtime/check.h"

#ifdef ZT_WITH_CUDA
#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#endif

namespace zt::optim {

#ifdef ZT_WITH_CUDA
struct OffloadCopies::Streams {
  Stream down, up;
  std::vector<Event> block_arrived;  // one per block, recorded on `down`
  Event work_done, down_done, up_done, work_done_before_up;
};

namespace {

void copy_async(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  ZT_CHECK(
      src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
      "offload copy: ", src.describe(), " -> ", dst.describe(), " must match and be contiguous");
  if (src.numel() == 0) return;
  const cudaError_t status = cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, stream);
  ZT_CHECK(status == cudaSuccess, "offload copy ", src.describe(), " -> ", dst.describe(), ": ",
           cudaGetErrorString(status));
}

}  // namespace
#else
struct OffloadCopies::Streams {};
#endif

OffloadCopies::OffloadCopies(DeviceKind device, bool pipelined, size_t blocks) {
#ifdef ZT_WITH_CUDA
  if (device == DeviceKind::cuda && pipelined) {
    streams_ = std::make_unique<Streams>();
    streams_->block_arrived.resize(blocks);
  }
#else
  (void)device;
  (void)pipelined;
  (void)blocks;
#endif
}

OffloadCopies::~OffloadCopies() = default;

void OffloadCopies::down(size_t block, const Tensor& device_src, const Tensor& host_dst) {
  down_and_zero(block, device_src, host_dst, Tensor());
}

// An undefined `device_zero` (Tensor()): nothing to zero (down()).
void OffloadCopies::down_and_zero(size_t block, const Tensor& device_src, const Tensor& host_dst,
                                  const Tensor& device_zero) {
  const bool zero = device_zero.defined();
  ZT_CHECK(!zero || (device_zero.dtype() == DType::f32 && device_zero.is_contiguous()),
           "offload copy: the buffer to zero, ", device_zero.describe(), ", must be contiguous f32");
  if (!streams_) {  // synchronous: the copy has landed
    copy_tensor(device_src, host_dst);
    if (zero) kernels::fill(device_zero, 0.0f);
    return;
  }
#ifdef ZT_WITH_CUDA
  Streams& s = *streams_;
  ZT_CHECK(block < s.block_arrived.size(), "offload copy: block ", block, " of ", s.block_arrived.size());
  // After the work queued so far on the rank's stream (this block's reduction); an event re-recorded for
  // the next block leaves this wait as it was.
  s.work_done.record(current_stream());
  s.down.wait(s.work_done);
  copy_async(device_src, host_dst, s.down);
  if (zero)
    ZT_CUDA_CHECK(cudaMemsetAsync(device_zero.data(), 0, device_zero.nbytes(), s.down));  // 0 bits = 0.0f
  s.block_arrived[block].record(s.down);
#endif
}

void OffloadCopies::wait_down(size_t block) {
  if (!streams_) return;
#ifdef ZT_WITH_CUDA
  streams_->block_arrived.at(block).synchronize();
#endif
}

void OffloadCopies::current_stream_waits_down(size_t block) {
  if (!streams_) return;  // synchronous: the copy is done
#ifdef ZT_WITH_CUDA
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), streams_->block_arrived.at(block).get(), 0));
#endif
}

void OffloadCopies::up(const Tensor& host_src, const Tensor& device_dst) {
  if (!streams_) {
    copy_tensor(host_src, device_dst);
    return;
  }
#ifdef ZT_WITH_CUDA
  copy_async(host_src, device_dst, streams_->up);
#endif
}

void OffloadCopies::up_after_current_stream() {
  if (!streams_) return;  // synchronous: copy_tensor is queued on the rank's stream itself
#ifdef ZT_WITH_CUDA
  Streams& s = *streams_;
  s.work_done_before_up.record(current_stream());
  s.up.wait(s.work_done_before_up);
#endif
}

void OffloadCopies::wait_up() {
  if (!streams_) return;
#ifdef ZT_WITH_CUDA
  streams_->up.synchronize();
#endif
}

void OffloadCopies::join() {
  if (!streams_) return;
#ifdef ZT_WITH_CUDA
  Streams& s = *streams_;
  s.down_done.record(s.down);
  s.up_done.record(s.up);
  const cudaStream_t work = current_stream();
  ZT_CUDA_CHECK(cudaStreamWaitEvent(work, s.down_done.get(), 0));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(work, s.up_done.get(), 0));
#endif
}

}  // namespace zt::optim
