// A build without CUDA has no device to share: RankDevice is refused at construction (the CUDA build's
// implementation is runtime/cuda/rank_device.cpp).
#ifndef ZT_WITH_CUDA

#include "runtime/rank_device.h"

#include "runtime/check.h"

namespace zt {

struct RankDevice::StreamHolder {};
struct RankDevice::Enter::Scopes {};

RankDevice::RankDevice(int device, size_t, StreamPriority) : device_(device) {
  ZT_FAIL("ranks sharing a GPU need a CUDA build (this one has none)");
}
RankDevice::~RankDevice() = default;
void RankDevice::synchronize() const {}
RankDevice::Enter::Enter(RankDevice&) {}
RankDevice::Enter::~Enter() = default;
int rank_devices_on(int) {
  return 0;
}

}  // namespace zt

#endif
