#include "kernels/cuda/gelu.cuh"

#include "kernels/cuda/pointwise.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// gelu(x) = x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; the same expression order as the CPU reference.
struct GeluForwardOp {
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float x) const {
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
};

// dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
struct GeluBackwardOp {
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float dy, float x) const {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y, cudaStream_t stream) {
  constexpr const char* op = "gelu_forward";
  check_cuda_arg(x, x.dtype(), op, "x");
  check_cuda_arg(y, x.dtype(), op, "y");
  check_same_shape(y, x, op, "y", "x");
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 1>(GeluForwardOp{}, x.numel(), typed<T>(y), {typed<T>(x)}, stream, op);
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx, cudaStream_t stream) {
  constexpr const char* op = "gelu_backward";
  check_cuda_arg(x, x.dtype(), op, "x");
  check_cuda_arg(dy, x.dtype(), op, "dy");
  check_cuda_arg(dx, x.dtype(), op, "dx");
  check_same_shape(dy, x, op, "dy", "x");
  check_same_shape(dx, x, op, "dx", "x");
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 2>(GeluBackwardOp{}, x.numel(), typed<T>(dx), {typed<T>(dy), typed<T>(x)}, stream,
                           op);
  });
}

}  // namespace zt::kernels::gpu
