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
#include "kernels/cuda/gemm.h"
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

// The shape of a checked call (kernels/conv1d.cpp): "same" padding (k - 1) / 2.
ConvShape conv_shape(const Tensor& x, const Tensor& weight) {
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
  const ConvShape s = conv_shape(x, weight);
  const bool has_bias = bias.defined() && bias.data() != nullptr;
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
  const ConvShape s = conv_shape(x, weight);
  const bool want_dx = dx.defined() && dx.data() != nullptr;
  const bool want_dw = dweight.defined() && dweight.data() != nullptr;
  const bool want_db = dbias.defined() && dbias.data() != nullptr;
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
