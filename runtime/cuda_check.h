// Checks for CUDA, cuBLAS(Lt) and NCCL calls. A failed call throws zt::Error carrying the statement, file,
// line and the library's own error string, so a failure reads like any other zerotrain error:
//
//   ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
//   ZT_CUBLAS_CHECK(cublasLtMatmul(...));
//   ZT_NCCL_CHECK(ncclAllReduce(...));            // needs <nccl.h> included first (ZT_WITH_NCCL builds)
//   my_kernel<<<grid, block, 0, stream>>>(...);
//   ZT_CUDA_CHECK_LAUNCH();                          // or ZT_CUDA_CHECK_LAUNCH("layernorm_forward_bf16")
//
// Debug mode: with ZT_SYNC_DEBUG=1 in the environment every ZT_CUDA_CHECK_LAUNCH also synchronizes the device
// and logs the launch's name, so an asynchronous fault (illegal address, ...) is reported at the kernel that
// caused it, not at some later unrelated call. The name defaults to the enclosing function.
//
// CUDA builds only (ZT_WITH_CUDA).
#pragma once

#ifndef ZT_WITH_CUDA
#error "runtime/cuda_check.h is for CUDA builds only (ZT_WITH_CUDA)"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace zt {

bool sync_debug_enabled();  // ZT_SYNC_DEBUG=1, read once

namespace detail {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* statement, const char* file,
                                     int line);
// Takes ncclResult_t as int so this header does not need <nccl.h>.
[[noreturn]] void throw_nccl_error(int status, const char* statement, const char* file, int line);
void check_launch(const char* name, const char* file, int line);
}  // namespace detail

}  // namespace zt

#define ZT_CUDA_CHECK(stmt)                                                       \
  do {                                                                            \
    cudaError_t zt_cuda_status_ = (stmt);                                         \
    if (zt_cuda_status_ != cudaSuccess) [[unlikely]]                              \
      ::zt::detail::throw_cuda_error(zt_cuda_status_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define ZT_CUBLAS_CHECK(stmt)                                                         \
  do {                                                                                \
    cublasStatus_t zt_cublas_status_ = (stmt);                                        \
    if (zt_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                      \
      ::zt::detail::throw_cublas_error(zt_cublas_status_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define ZT_NCCL_CHECK(stmt)                                                                         \
  do {                                                                                              \
    ncclResult_t zt_nccl_status_ = (stmt);                                                          \
    if (zt_nccl_status_ != ncclSuccess) [[unlikely]]                                                \
      ::zt::detail::throw_nccl_error(static_cast<int>(zt_nccl_status_), #stmt, __FILE__, __LINE__); \
  } while (0)

// Optional argument: a string literal naming the launch; defaults to the enclosing function's name.
#define ZT_CUDA_CHECK_LAUNCH(...) ::zt::detail::check_launch(ZT_LAUNCH_NAME_(__VA_ARGS__), __FILE__, __LINE__)
#define ZT_LAUNCH_NAME_(...) ZT_LAUNCH_NAME_PICK_(__VA_OPT__(__VA_ARGS__, ) __func__, )
#define ZT_LAUNCH_NAME_PICK_(first, ...) first
