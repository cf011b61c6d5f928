// The production DeviceMemoryBackend: cudaMalloc / cudaFree on one device.
#include <cuda_runtime.h>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"

namespace zt {

namespace {

// Makes `device` current for a scope, restoring the previous device afterwards.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    ZT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) ZT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~ScopedDevice() { (void)cudaSetDevice(previous_); }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
};

class CudaMemoryBackend final : public DeviceMemoryBackend {
 public:
  explicit CudaMemoryBackend(int device) : device_(device) {
    int count = 0;
    ZT_CUDA_CHECK(cudaGetDeviceCount(&count));
    ZT_CHECK(device >= 0 && device < count, "no CUDA device ", device, " (", count, " present)");
  }

  void* allocate(size_t bytes) override {
    ScopedDevice scope(device_);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: out of memory is reported by the allocator, with context
      return nullptr;
    }
    ZT_CUDA_CHECK(status);
    return ptr;
  }

  void release(void* ptr, size_t /*bytes*/) override {
    ScopedDevice scope(device_);
    ZT_CUDA_CHECK(cudaFree(ptr));
  }

  size_t free_memory() const override {
    ScopedDevice scope(device_);
    size_t free = 0, total = 0;
    ZT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }

  std::string name() const override { return str("cuda:", device_); }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<DeviceMemoryBackend> make_cuda_memory_backend(int device) {
  return std::make_unique<CudaMemoryBackend>(device);
}

}  // namespace zt
