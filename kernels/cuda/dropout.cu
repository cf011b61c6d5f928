#include "kernels/cuda/dropout.cuh"

#include "kernels/cuda/dropout_mask.cuh"
#include "kernels/cuda/pointwise.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

// Forward and backward are the same map, as on the CPU (arguments checked by kernels/dropout.cpp).
void apply_dropout(const Tensor& in, const Tensor& out, const DropoutSite& site, cudaStream_t stream,
                   const char* op) {
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
  apply_dropout(x, y, site, stream, "dropout_forward");
}

void dropout_backward(const Tensor& dy, const Tensor& dx, const DropoutSite& site, cudaStream_t stream) {
  apply_dropout(dy, dx, site, stream, "dropout_backward");
}

}  // namespace zt::kernels::gpu
