#include "runtime/device.h"

#include "runtime/check.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace zt {

int cuda_device_count() {
#ifdef ZT_WITH_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver / no device: clear the sticky error, run on the CPU
      return 0;
    }
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

std::string describe_devices() {
#ifdef ZT_WITH_CUDA
  int n = cuda_device_count();
  if (n == 0) return "no CUDA device (CPU backend)";
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess)
    return str(n, " x CUDA device (properties unavailable)");
  return str(n, " x ", prop.name, " (sm_", prop.major, prop.minor, ", ",
             prop.totalGlobalMem / (1024.0 * 1024 * 1024), " GiB)");
#else
  return "built without CUDA (CPU backend)";
#endif
}

}  // namespace zt
