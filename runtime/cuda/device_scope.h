// Makes a device current for a scope and restores the caller's after, so a thread driving one rank (or a
// watchdog) never leaves another device selected for the caller's later CUDA calls. CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include "runtime/cuda_check.h"

namespace zt {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ZT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) ZT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { (void)cudaSetDevice(previous_); }  // best effort: destructors must not throw
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace zt
