#include "runtime/cuda_check.h"

#include <cstdlib>
#include <cstring>

#ifdef ZT_WITH_NCCL
#include <nccl.h>
#endif

#include "runtime/check.h"
#include "runtime/log.h"

namespace zt {

bool sync_debug_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("ZT_SYNC_DEBUG");
    bool on = value != nullptr && std::strcmp(value, "0") != 0 && value[0] != '\0';
    if (on) {
      ZT_LOG(info) << "ZT_SYNC_DEBUG: synchronizing after every kernel launch";
    }
    return on;
  }();
  return enabled;
}

namespace detail {

namespace {
[[noreturn]] void throw_library_error(const char* library, const std::string& what, const char* statement,
                                      const char* file, int line) {
  throw Error(str(library, " error: ", what, " [", statement, "] (", file, ":", line, ")"));
}
}  // namespace

void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line) {
  throw_library_error("CUDA", str(cudaGetErrorName(status), ": ", cudaGetErrorString(status)), statement,
                      file, line);
}

void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file, int line) {
  throw_library_error("cuBLAS", str(cublasGetStatusName(status), ": ", cublasGetStatusString(status)),
                      statement, file, line);
}

void throw_nccl_error(int status, const char* statement, const char* file, int line) {
#ifdef ZT_WITH_NCCL
  const char* text = ncclGetErrorString(static_cast<ncclResult_t>(status));
  std::string last = ncclGetLastError(nullptr);
  throw_library_error("NCCL", last.empty() ? std::string(text) : str(text, " (", last, ")"), statement, file,
                      line);
#else
  throw_library_error("NCCL", str("status ", status), statement, file, line);
#endif
}

void check_launch(const char* name, const char* file, int line) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) [[unlikely]]
    throw Error(str("CUDA error launching ", name, ": ", cudaGetErrorName(status), ": ",
                    cudaGetErrorString(status), " (", file, ":", line, ")"));
  if (sync_debug_enabled()) {
    status = cudaDeviceSynchronize();
    if (status != cudaSuccess)
      throw Error(str("CUDA error in ", name,
                      " (found by ZT_SYNC_DEBUG synchronize): ", cudaGetErrorName(status), ": ",
                      cudaGetErrorString(status), " (", file, ":", line, ")"));
    ZT_LOG(debug) << "launch ok: " << name << " (" << file << ":" << line << ")";
  }
}

}  // namespace detail
}  // namespace zt
