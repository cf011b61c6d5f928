#include "runtime/device.h"

#include "runtime/check.h"

#include <cstring>

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include "runtime/stream.h"
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

void copy_tensor(const Tensor& src, const Tensor& dst) {
  ZT_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy_tensor: ", src.describe(), " -> ",
           dst.describe(), " must match in dtype and element count");
  ZT_CHECK(src.is_contiguous() && dst.is_contiguous(), "copy_tensor needs contiguous tensors");
  if (src.numel() == 0) return;
  if (src.device() == DeviceKind::cpu && dst.device() == DeviceKind::cpu) {
    std::memmove(dst.data(), src.data(), src.nbytes());
    return;
  }
#ifdef ZT_WITH_CUDA
  // Queued behind this thread's work and waited for on its stream alone: other ranks' streams run on.
  const cudaStream_t stream = current_stream();
  cudaError_t status = cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDefault, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  ZT_CHECK(status == cudaSuccess, "copy_tensor ", src.describe(), " -> ", dst.describe(), ": ",
           cudaGetErrorString(status));
#else
  ZT_FAIL("copy_tensor: ", src.describe(), " -> ", dst.describe(), " needs CUDA, and this build has none");
#endif
}

void use_cuda_device(int device) {
  const int count = cuda_device_count();
  ZT_CHECK(device >= 0 && device < count, "CUDA device ", device, " does not exist (", count, " present)");
#ifdef ZT_WITH_CUDA
  const cudaError_t status = cudaSetDevice(device);
  ZT_CHECK(status == cudaSuccess, "cudaSetDevice(", device, "): ", cudaGetErrorString(status));
#endif
}

void device_synchronize() {
#ifdef ZT_WITH_CUDA
  if (!cuda_available()) return;
  const cudaError_t status = cudaDeviceSynchronize();
  ZT_CHECK(status == cudaSuccess, "device_synchronize: ", cudaGetErrorString(status));
#endif
}

}  // namespace zt
