// Linear forward/backward on the GPU: three cuBLASLt GEMMs and a column sum (formulas in kernels/linear.h).
#include "kernels/cuda/linear.cuh"

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm.h"
#include "runtime/check.h"

namespace zt::kernels::gpu {
namespace {

struct LinearShape {
  int64_t rows, in_features, out_features;
  DType dtype;
};

// The shape of a checked call (kernels/linear.cpp): x [rows, in] (leading dimensions flattened), W [out, in].
LinearShape linear_shape(const Tensor& x, const Tensor& weight) {
  const int64_t rows = x.dim(-1) == 0 ? 0 : x.numel() / x.dim(-1);
  return {rows, weight.dim(1), weight.dim(0), x.dtype()};
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    cudaStream_t stream) {
  const LinearShape s = linear_shape(x, weight);
  GemmProblem p;
  p.m = s.rows;
  p.n = s.out_features;
  p.k = s.in_features;
  p.input_dtype = s.dtype;
  p.a = {x.data(), s.in_features, 0};
  p.b = {weight.data(), s.in_features, 0};
  p.transpose_b = true;
  p.c = {y.data(), s.dtype, s.out_features, 0};
  if (bias.defined() && bias.data() != nullptr) {
    p.epilogue = GemmEpilogue::bias;
    p.bias = bias.data();
  }
  gemm(p, stream);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write,
                     cudaStream_t stream) {
  const LinearShape s = linear_shape(x, weight);
  if (dx.defined() && dx.data() != nullptr) {
    // dx [rows, in] (+)= dy [rows, out] W [out, in]
    GemmProblem p;
    p.m = s.rows;
    p.n = s.in_features;
    p.k = s.out_features;
    p.input_dtype = s.dtype;
    p.a = {dy.data(), s.out_features, 0};
    p.b = {weight.data(), s.in_features, 0};
    p.c = {dx.data(), s.dtype, s.in_features, 0};
    p.beta = accumulate_dx ? 1.0f : 0.0f;
    gemm(p, stream);
  }
  if (dweight.defined() && dweight.data() != nullptr) {
    if (s.rows == 0 && write == GradWrite::overwrite) fill(dweight, 0.0f, stream);  // the sum over no rows
    if (s.rows > 0) {
      // dW [out, in] (+)= dy^T [out, rows] x [rows, in] in the f32 gradient buffer (beta 1, or 0 to write).
      GemmProblem p;
      p.m = s.out_features;
      p.n = s.in_features;
      p.k = s.rows;
      p.input_dtype = s.dtype;
      p.a = {dy.data(), s.out_features, 0};
      p.transpose_a = true;
      p.b = {x.data(), s.in_features, 0};
      p.c = {dweight.data(), DType::f32, s.in_features, 0};
      p.beta = write == GradWrite::overwrite ? 0.0f : 1.0f;
      gemm(p, stream);
    }
  }
  if (dbias.defined() && dbias.data() != nullptr) {
    column_sum_into(dy.data(), s.dtype, s.rows, s.out_features, dbias.data_as<float>(), write, stream);
  }
}

}  // namespace zt::kernels::gpu
