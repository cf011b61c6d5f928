// Conv1d ("same" padding, odd k) on the GPU as im2col + one GEMM (formulas in kernels/conv1d.h).
//
// With K = D_in * k the input is unfolded into cols [B*L, K], column (c, kk) holding x[b, t + kk - pad, c]
// (0 outside [0, L)), and the convolution is a linear layer over it. The columns are tap-major,
// cols[(b,t), kk*D_in + c]; the weight is regrouped to match, Wr[o, kk*D_in + c] = W[o, c, kk] [D_out, K],
// on every forward and backward, and the weight gradient comes back through a grouped f32 scratch:
// dWr = dy^T cols, then dW[o,c,kk] += dWr[o, kk*D_in + c].
// Then y = cols Wr^T + bias. Backward:
//   dcols = dy Wr (f32)  then  dx[b,s,c] (+)= sum_kk dcols[(b, s - kk + pad), column(c, kk)]  (col2im, a
//   gather, kk increasing);  dbias += column sums of dy.
// One GEMM (one rounding of y) instead of k shifted GEMMs accumulating in 16-bit storage; the price is the
// scratch: cols B*L*K storage elements (+ Wr), and in backward dcols 4*B*L*K bytes (+ dWr 4*D_out*K).
#include "kernels/cuda/conv1d.cuh"

#include "kernels/cuda/gemm.cuh"
#include "kernels/gemm.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

constexpr int kThreads = 256;

struct ConvShape {
  int64_t batch, length, in_features, out_features, kernel, pad;
  __host__ __device__ int64_t unfolded() const { return kernel * in_features; }
  __host__ __device__ int64_t rows() const { return batch * length; }
};

ConvShape check_conv_args(const Tensor& x, const Tensor& weight, const char* op) {
  check_cuda_arg(x, op, "x");
  ZT_CHECK(is_storage_dtype(x.dtype()), op, ": x must be f32, bf16 or f16, got ", x.describe());
  check_cuda_arg(weight, x.dtype(), op, "weight");
  ZT_CHECK(x.rank() == 3, op, ": x must be [B, L, D_in], got ", x.describe());
  ZT_CHECK(weight.rank() == 3, op, ": weight must be [D_out, D_in, k], got ", weight.describe());
  ZT_CHECK(weight.dim(1) == x.dim(2), op, ": weight ", weight.shape().to_string(), " expects ", weight.dim(1),
           " input features, x ", x.shape().to_string(), " has ", x.dim(2));
  ZT_CHECK(weight.dim(2) % 2 == 1, op, ": kernel size must be odd for same padding, got ", weight.dim(2));
  return {x.dim(0), x.dim(1), x.dim(2), weight.dim(0), weight.dim(2), (weight.dim(2) - 1) / 2};
}

// cols [B*L, K] from x [B, L, D_in]; zero where the tap reads outside the item. Column kk*D_in + c holds
// channel c at tap kk; thread e writes cols element e.
template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ cols, ConvShape s) {
  const int64_t total = s.rows() * s.unfolded();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / s.unfolded(), col = e % s.unfolded();
    const int64_t b = row / s.length, t = row % s.length;
    const int64_t kk = col / s.in_features;
    const int64_t c = col % s.in_features;
    const int64_t source = t + kk - s.pad;
    cols[e] = (source >= 0 && source < s.length) ? x[(b * s.length + source) * s.in_features + c]
                                                 : from_float<T>(0.0f);
  }
}

// Wr[o, kk*D_in + c] = W[o, c, kk].
template <typename T>
__global__ void regroup_weight_kernel(const T* __restrict__ w, T* __restrict__ wr, ConvShape s) {
  const int64_t total = s.out_features * s.unfolded();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / s.unfolded(), col = e % s.unfolded();
    const int64_t kk = col / s.in_features, c = col % s.in_features;
    wr[e] = w[(o * s.in_features + c) * s.kernel + kk];
  }
}

// dx[b,s,c] (+)= sum_kk dcols[(b, s - kk + pad), kk*D_in + c]: each output gathers its k taps in order.
template <typename T>
__global__ void col2im_kernel(const float* __restrict__ dcols, T* __restrict__ dx, ConvShape s,
                              bool accumulate) {
  const int64_t total = s.rows() * s.in_features;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = e / s.in_features, c = e % s.in_features;
    const int64_t b = row / s.length, pos = row % s.length;
    float sum = 0.0f;
    for (int64_t kk = 0; kk < s.kernel; ++kk) {
      const int64_t t = pos - kk + s.pad;
      if (t >= 0 && t < s.length) {
        sum += dcols[(b * s.length + t) * s.unfolded() + (kk * s.in_features + c)];
      }
    }
    dx[e] = from_float<T>(accumulate ? to_float(dx[e]) + sum : sum);
  }
}

// dW[o, c, kk] += dWr[o, kk*D_in + c].
__global__ void ungroup_weight_grad_kernel(const float* __restrict__ dwr, float* __restrict__ dw,
                                           ConvShape s) {
  const int64_t total = s.out_features * s.unfolded();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = e / (s.in_features * s.kernel), rest = e % (s.in_features * s.kernel);
    const int64_t c = rest / s.kernel, kk = rest % s.kernel;
    dw[e] += dwr[o * s.unfolded() + kk * s.in_features + c];
  }
}

unsigned int grid_for(int64_t n) {
  const unsigned int blocks = blocks_for(n, kThreads);
  return blocks < 65535u ? blocks : 65535u;
}

// Unfolds x into a scratch buffer: cols [B*L, K] in x's dtype.
DeviceBuffer unfold(const Tensor& x, const ConvShape& s, const char* op, cudaStream_t stream) {
  DeviceBuffer cols =
      scratch_buffer(static_cast<size_t>(s.rows() * s.unfolded()) * dtype_size(x.dtype()), "conv1d.cols");
  dispatch_storage(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    im2col_kernel<T><<<grid_for(s.rows() * s.unfolded()), kThreads, 0, stream>>>(
        static_cast<const T*>(x.data()), cols.data_as<T>(), s);
    ZT_CUDA_CHECK_LAUNCH("conv1d_im2col");
  });
  return cols;
}

// The weight as the GEMMs' [D_out, K] operand: Wr, in `regrouped`.
const void* weight_operand(const Tensor& weight, const ConvShape& s, DeviceBuffer& regrouped, const char* op,
                           cudaStream_t stream) {
  regrouped = scratch_buffer(static_cast<size_t>(s.out_features * s.unfolded()) * dtype_size(weight.dtype()),
                             "conv1d.weight");
  dispatch_storage(weight.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    regroup_weight_kernel<T><<<grid_for(s.out_features * s.unfolded()), kThreads, 0, stream>>>(
        static_cast<const T*>(weight.data()), regrouped.data_as<T>(), s);
    ZT_CUDA_CHECK_LAUNCH("conv1d_regroup_weight");
  });
  return regrouped.data();
}

}  // namespace

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    cudaStream_t stream) {
  constexpr const char* op = "conv1d_forward";
  const ConvShape s = check_conv_args(x, weight, op);
  check_cuda_arg(y, x.dtype(), op, "y");
  check_shape(y, Shape{s.batch, s.length, s.out_features}, "conv1d_forward: y");
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
  const bool has_bias = bias.defined() && bias.data() != nullptr;
  if (has_bias) {
    check_cuda_arg(bias, x.dtype(), op, "bias");
    check_shape(bias, Shape{s.out_features}, "conv1d_forward: bias");
  }
  if (s.rows() == 0 || s.out_features == 0) return;
  const DeviceBuffer cols = unfold(x, s, op, stream);
  DeviceBuffer regrouped;
  GemmProblem p;  // y [B*L, D_out] = cols [B*L, K] Wr^T
  p.m = s.rows();
  p.n = s.out_features;
  p.k = s.unfolded();
  p.input_dtype = x.dtype();
  p.a = {cols.data(), s.unfolded(), 0};
  p.b = {weight_operand(weight, s, regrouped, op, stream), s.unfolded(), 0};
  p.transpose_b = true;
  p.c = {y.data(), x.dtype(), s.out_features, 0};
  if (has_bias) {
    p.epilogue = GemmEpilogue::bias;
    p.bias = bias.data();
  }
  gemm(p, stream);
}

void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, cudaStream_t stream) {
  constexpr const char* op = "conv1d_backward";
  const ConvShape s = check_conv_args(x, weight, op);
  check_cuda_arg(dy, x.dtype(), op, "dy");
  check_shape(dy, Shape{s.batch, s.length, s.out_features}, "conv1d_backward: dy");
  const bool want_dx = dx.defined() && dx.data() != nullptr;
  const bool want_dw = dweight.defined() && dweight.data() != nullptr;
  const bool want_db = dbias.defined() && dbias.data() != nullptr;
  if (want_dx) {
    check_cuda_arg(dx, x.dtype(), op, "dx");
    ZT_CHECK(dx.shape() == x.shape(), op, ": dx must have the shape of x ", x.shape().to_string(), ", got ",
             dx.shape().to_string());
    ZT_CHECK(dx.data() != dy.data() || dx.numel() == 0, op, ": dx must not alias dy");
  }
  if (want_dw) {
    check_cuda_arg(dweight, DType::f32, op, "dweight");
    check_shape(dweight, weight.shape(), "conv1d_backward: dweight");
  }
  if (want_db) {
    check_cuda_arg(dbias, DType::f32, op, "dbias");
    check_shape(dbias, Shape{s.out_features}, "conv1d_backward: dbias");
  }
  if (s.rows() == 0 || s.in_features == 0) return;
  if (s.out_features == 0) {
    if (want_dx && !accumulate_dx) ZT_CUDA_CHECK(cudaMemsetAsync(dx.data(), 0, dx.nbytes(), stream));
    return;
  }
  if (want_dx) {
    DeviceBuffer dcols =
        scratch_buffer(static_cast<size_t>(s.rows() * s.unfolded()) * sizeof(float), "conv1d.dcols");
    DeviceBuffer regrouped;
    GemmProblem p;  // dcols [B*L, K] = dy [B*L, D_out] Wr [D_out, K]
    p.m = s.rows();
    p.n = s.unfolded();
    p.k = s.out_features;
    p.input_dtype = x.dtype();
    p.a = {dy.data(), s.out_features, 0};
    p.b = {weight_operand(weight, s, regrouped, op, stream), s.unfolded(), 0};
    p.c = {dcols.data(), DType::f32, s.unfolded(), 0};
    gemm(p, stream);
    dispatch_storage(x.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      col2im_kernel<T><<<grid_for(s.rows() * s.in_features), kThreads, 0, stream>>>(
          dcols.data_as<float>(), static_cast<T*>(dx.data()), s, accumulate_dx);
      ZT_CUDA_CHECK_LAUNCH("conv1d_col2im");
    });
  }
  if (want_dw) {
    // dWr [D_out, K] = dy^T [D_out, B*L] cols [B*L, K] into scratch, then ungrouped into dW.
    const DeviceBuffer cols = unfold(x, s, op, stream);  // only dW reads the unfolded input
    DeviceBuffer dwr = scratch_buffer(static_cast<size_t>(s.out_features * s.unfolded()) * sizeof(float),
                                      "conv1d.dweight_grouped");
    GemmProblem p;
    p.m = s.out_features;
    p.n = s.unfolded();
    p.k = s.rows();
    p.input_dtype = x.dtype();
    p.a = {dy.data(), s.out_features, 0};
    p.transpose_a = true;
    p.b = {cols.data(), s.unfolded(), 0};
    p.c = {dwr.data(), DType::f32, s.unfolded(), 0};
    p.beta = 0.0f;
    gemm(p, stream);
    ungroup_weight_grad_kernel<<<grid_for(s.out_features * s.unfolded()), kThreads, 0, stream>>>(
        dwr.data_as<float>(), dweight.data_as<float>(), s);
    ZT_CUDA_CHECK_LAUNCH("conv1d_ungroup_weight_grad");
  }
  if (want_db) {
    column_sum_into(dy.data(), x.dtype(), s.rows(), s.out_features, dbias.data_as<float>(),
                    GradWrite::accumulate, stream);
  }
}

}  // namespace zt::kernels::gpu
