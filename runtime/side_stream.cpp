#include "runtime/side_stream.h"

#include <utility>
#include <vector>

#include "runtime/check.h"

#ifdef ZT_WITH_CUDA
#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#endif

namespace zt {

#ifdef ZT_WITH_CUDA
struct SideStream::State {
  Stream stream;
  Event forked;               // recorded on the current stream by fork()
  std::vector<Event> points;  // points[t]: recorded on the side stream after run() t since the last join
  Event joined;
  size_t recorded = 0;  // tickets handed out since the last join
  bool used = false;    // run() called on this stream before
  explicit State(int priority) : stream(priority) {}
};
#else
struct SideStream::State {};
#endif

SideStream::SideStream() = default;
SideStream::~SideStream() = default;
SideStream::SideStream(SideStream&& other) noexcept = default;
SideStream& SideStream::operator=(SideStream&& other) noexcept = default;

SideStream SideStream::on_current_device() {
#ifdef ZT_WITH_CUDA
  int least = 0, greatest = 0;
  ZT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  SideStream side;
  side.state_ = std::make_unique<State>(least);
  return side;
#else
  ZT_FAIL("a side stream needs a CUDA build");
#endif
}

void SideStream::fork() {
#ifdef ZT_WITH_CUDA
  if (!state_) return;
  state_->forked.record(current_stream());
  state_->stream.wait(state_->forked);
#endif
}

SideStream::Ticket SideStream::run(const std::function<void()>& work) {
  if (!state_) {
    work();
    return 0;
  }
#ifdef ZT_WITH_CUDA
  State& s = *state_;
  if (!s.used) fork();  // what the first run allocates (the GEMM workspace) is taken after all current work
  s.used = true;
  {
    const StreamScope on_side(s.stream.get());
    work();
  }
  if (s.recorded == s.points.size()) s.points.emplace_back();
  s.points[s.recorded].record(s.stream.get());
  return s.recorded++;
#else
  return 0;
#endif
}

void SideStream::wait(Ticket ticket) {
#ifdef ZT_WITH_CUDA
  if (!state_) return;
  ZT_CHECK(ticket < state_->recorded, "SideStream::wait: ticket ", ticket,
           " is not from run() since the last join");
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), state_->points[ticket].get(), 0));
#else
  (void)ticket;
#endif
}

void SideStream::join() {
#ifdef ZT_WITH_CUDA
  if (!state_) return;
  state_->joined.record(state_->stream.get());
  ZT_CUDA_CHECK(cudaStreamWaitEvent(current_stream(), state_->joined.get(), 0));
  state_->recorded = 0;  // a wait captures an event's last record when it is queued: re-recording is safe
#endif
}

}  // namespace zt
