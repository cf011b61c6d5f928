// What compute devices this process can use, decided at run time (a CUDA build still runs on a machine
// without a GPU: it then reports zero devices and the CPU backend is used).
#pragma once

#include <string>

namespace zt {

int cuda_device_count();  // 0 when built without CUDA, without a driver, or without a GPU
inline bool cuda_available() {
  return cuda_device_count() > 0;
}
std::string describe_devices();  // one line, for the start-up banner: "1 x NVIDIA H200 (sm_90, 139 GiB)"

}  // namespace zt
