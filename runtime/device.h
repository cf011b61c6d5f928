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
// any direction. Queued on the calling thread's current stream (runtime/stream.h), which it then
// synchronizes (that stream only, not the device), so a loss or logits can be read right after the op that
// wrote them while other threads' streams keep running.
void copy_tensor(const Tensor& src, const Tensor& dst);

// Waits until the current device has finished all queued work of every stream and thread
// (cudaDeviceSynchronize); a no-op without a GPU. For timing whole steps from the host, never in a step.
void device_synchronize();

// Makes `device` this process's current CUDA device (a process of an mpirun launch drives GPU local_rank):
// every later allocation and kernel of the calling thread goes there. Throws for a device that does not
// exist or in a build without CUDA.
void use_cuda_device(int device);

}  // namespace zt
