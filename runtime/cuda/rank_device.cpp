#include "runtime/rank_device.h"

#include <array>
#include <atomic>

#include "runtime/check.h"
#include "runtime/cuda/device_scope.h"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"

namespace zt {

namespace {
constexpr int kCountedDevices = 64;
std::array<std::atomic<int>, kCountedDevices> live_rank_devices{};
std::atomic<int>& live_count(int device) {
  ZT_CHECK(device >= 0 && device < kCountedDevices, "RankDevice: device ", device, " out of range");
  return live_rank_devices[static_cast<size_t>(device)];
}
}  // namespace

int rank_devices_on(int device) {
  return live_count(device).load();
}

struct RankDevice::StreamHolder {
  Stream stream;
};

RankDevice::RankDevice(int device, size_t cap_bytes, StreamPriority priority)
    : device_(device),
      allocator_(std::make_unique<DeviceAllocator>(make_cuda_memory_backend(device), cap_bytes)) {
  DeviceScope on(device);
  int least = 0, greatest = 0;
  ZT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  stream_ = std::make_unique<StreamHolder>(
      StreamHolder{Stream(priority == StreamPriority::greatest ? greatest : least)});
  live_count(device).fetch_add(1);
}

RankDevice::~RankDevice() {
  live_count(device_).fetch_sub(1);
  if (stream_) {
    (void)cudaStreamSynchronize(stream_->stream.get());  // best effort: destructors must not throw
    stream_.reset();  // retire hooks return the stream's GEMM workspace to allocator_
  }
}

void RankDevice::synchronize() const {
  stream_->stream.synchronize();
}

// Declaration order is construction order: device, then allocator, then stream; they end in reverse.
struct RankDevice::Enter::Scopes {
  DeviceScope device;
  AllocatorScope allocator;
  StreamScope stream;
  explicit Scopes(RankDevice& d)
      : device(d.device_), allocator(*d.allocator_), stream(d.stream_->stream.get()) {}
};

RankDevice::Enter::Enter(RankDevice& device) : scopes_(std::make_unique<Scopes>(device)) {}
RankDevice::Enter::~Enter() = default;

}  // namespace zt
