// dropout: the entry points of kernels/dropout.h. Each checks its arguments once, for both backends, and
// sends the call to one: CUDA tensors to kernels/cuda/dropout.cu on the calling thread's current stream
// (runtime/stream.h), host tensors to kernels/cpu/dropout.cpp.
#include "kernels/dropout.h"

#include "kernels/arg_checks.h"
#include "kernels/cpu/dropout.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/dropout.cuh"
#endif

namespace zt::kernels {
namespace {

// in and out of one storage dtype (f32 on the CPU; f32, bf16 or f16 on CUDA) and shape; p in [0, 1).
void check_dropout_args(bool cuda, const Tensor& in, const Tensor& out, const DropoutSite& site,
                        const char* op, const char* in_name, const char* out_name) {
  const DeviceKind device = cuda ? DeviceKind::cuda : DeviceKind::cpu;
  const DType dtype = cuda ? in.dtype() : DType::f32;
  check_arg(in, dtype, device, op, in_name);
  check_arg(out, dtype, device, op, out_name);
  check_same_shape(out, in, op, out_name, in_name);
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site) {
  constexpr const char* op = "dropout_forward";
  const bool cuda = runs_on_cuda(x, op);
  check_dropout_args(cuda, x, y, site, op, "x", "y");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::dropout_forward(x, y, site, current_stream());
#endif
  }
  cpu::dropout_forward(x, y, site);
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site) {
  constexpr const char* op = "dropout_backward";
  const bool cuda = runs_on_cuda(dy, op);
  check_dropout_args(cuda, dy, dx, site, op, "dy", "dx");
  if (cuda) {
#ifdef ZT_WITH_CUDA
    return gpu::dropout_backward(dy, dx, site, current_stream());
#endif
  }
  cpu::dropout_backward(dy, dx, site);
}

}  // namespace zt::kernels
