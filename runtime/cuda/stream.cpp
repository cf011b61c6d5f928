#include "runtime/stream.h"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt {

namespace {

thread_local cudaStream_t t_current_stream = nullptr;

std::mutex g_retire_hooks_mutex;
std::vector<StreamRetireHook>& retire_hooks() {
  static auto* hooks = new std::vector<StreamRetireHook>;  // never destroyed: streams may die at exit
  return *hooks;
}

}  // namespace

cudaStream_t current_stream() {
  return t_current_stream;
}

StreamScope::StreamScope(cudaStream_t stream) : previous_(t_current_stream) {
  t_current_stream = stream;
}

StreamScope::~StreamScope() {
  t_current_stream = previous_;
}

void add_stream_retire_hook(StreamRetireHook hook) {
  const std::lock_guard<std::mutex> lock(g_retire_hooks_mutex);
  std::vector<StreamRetireHook>& hooks = retire_hooks();
  if (std::find(hooks.begin(), hooks.end(), hook) == hooks.end()) hooks.push_back(hook);
}

void retire_stream(cudaStream_t stream) {
  if (stream == nullptr) return;  // the legacy default stream lives as long as the process
  std::vector<StreamRetireHook> hooks;
  {
    const std::lock_guard<std::mutex> lock(g_retire_hooks_mutex);
    hooks = retire_hooks();  // a copy: a hook may take its own locks, never this one
  }
  for (StreamRetireHook hook : hooks) hook(stream);
}

Stream::Stream(int priority) {
  ZT_CUDA_CHECK(cudaGetDevice(&device_));
  ZT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority));
}

Stream::~Stream() {
  if (stream_ != nullptr) {
    retire_stream(stream_);
    (void)cudaStreamDestroy(stream_);  // queued work still completes
  }
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) {
      retire_stream(stream_);
      (void)cudaStreamDestroy(stream_);
    }
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::wait(const Event& event) const {
  ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}

void Stream::synchronize() const {
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool Stream::idle() const {
  cudaError_t status = cudaStreamQuery(stream_);
  if (status == cudaErrorNotReady) return false;
  ZT_CUDA_CHECK(status);
  return true;
}

Event::Event(EventTiming timing) : timing_(timing) {
  unsigned flags = timing == EventTiming::enabled ? cudaEventDefault : cudaEventDisableTiming;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), timing_(other.timing_), recorded_(other.recorded_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    timing_ = other.timing_;
    recorded_ = other.recorded_;
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  ZT_CUDA_CHECK(cudaEventRecord(event_, stream));
  recorded_ = true;
}

void Event::synchronize() const {
  ZT_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::completed() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  ZT_CUDA_CHECK(status);
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  ZT_CHECK(start.timing_enabled() && end.timing_enabled(),
           "Event::elapsed_ms needs both events created with EventTiming::enabled");
  ZT_CHECK(start.recorded_ && end.recorded_, "Event::elapsed_ms needs both events recorded");
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

}  // namespace zt
