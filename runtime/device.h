// What compute devices this process can use, decided at run time (a CUDA build still runs on a machine
// without a GPU: it then reports zero devices and the CPU backend is used).
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace zt {

int cuda_device_count();  // 0 when built without CUDA, without a driver, or without a GPU
inline bool cuda_available() {
  return cuda_device_count() > 0;
}
std::string describe_devices();  // one line, for the start-up banner: "1 x NVIDIA H200 (sm_90, 139 GiB)"

// Copies `src` into `dst` (same dtype and element count, both contiguous) between host and device memory in
// any direction. Synchronous, ordered after the work already queued on the default stream (which the kernels
// use), so a loss or logits can be read right after the op that wrote them.
void copy_tensor(const Tensor& src, const Tensor& dst);

// Waits until the current device has finished all queued work (cudaDeviceSynchronize); a no-op without a
// GPU. For timing whole steps from the host.
void device_synchronize();

}  // namespace zt
