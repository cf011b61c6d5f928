#include "kernels/cuda/dropout.cuh"

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/pointwise.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

// Forward and backward are the same map, as on the CPU.
void apply_dropout(const Tensor& in, const Tensor& out, const DropoutSite& site, cudaStream_t stream,
                   const char* op, const char* in_name, const char* out_name) {
  check_cuda_arg(in, in.dtype(), op, in_name);
  check_cuda_arg(out, in.dtype(), op, out_name);
  check_same_shape(out, in, op, out_name, in_name);
  ZT_CHECK(site.p >= 0.0f && site.p < 1.0f, op, ": drop probability must be in [0, 1), got ", site.p);
  if (site.p == 0.0f) {
    if (out.data() != in.data() && in.nbytes() > 0) {
      ZT_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), in.nbytes(), cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  const DropoutMaskOp mask{site.p, 1.0f / (1.0f - site.p), site.seed, site.site_id};
  dispatch_float_storage(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 1>(mask, in.numel(), typed<T>(out), {typed<T>(in)}, stream, op);
  });
}

}  // namespace

void dropout_forward(const Tensor& x, const Tensor& y, const DropoutSite& site, cudaStream_t stream) {
  apply_dropout(x, y, site, stream, "dropout_forward", "x", "y");
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site, cudaStream_t stream) {
  apply_dropout(dy, dx, site, stream, "dropout_backward", "dy", "dx");
}

}  // namespace zt::kernels::gpu
