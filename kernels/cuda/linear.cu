// Linear forward/backward on the GPU: three cuBLASLt GEMMs and a column sum (formulas in kernels/linear.h).
#include "kernels/cuda/linear.cuh"

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/gemm.h"
#include "runtime/check.h"

namespace zt::kernels::gpu {
namespace {

struct LinearShape {
  int64_t rows, in_features, out_features;
  DType dtype;
};

bool same_leading_shape(const Tensor& a, const Tensor& b) {
  if (a.rank() != b.rank()) return false;
  for (int i = 0; i + 1 < a.rank(); ++i) {
    if (a.dim(i) != b.dim(i)) return false;
  }
  return true;
}

LinearShape check_linear_args(const Tensor& x, const Tensor& weight, const char* op) {
  check_cuda_arg(x, op, "x");
  ZT_CHECK(is_storage_dtype(x.dtype()), op, ": x must be f32, bf16 or f16, got ", x.describe());
  check_cuda_arg(weight, x.dtype(), op, "weight");
  ZT_CHECK(weight.rank() == 2, op, ": weight must be [out, in], got ", weight.describe());
  ZT_CHECK(x.rank() >= 1 && x.dim(-1) == weight.dim(1), op, ": x ", x.shape().to_string(), " has ",
           x.rank() >= 1 ? x.dim(-1) : 0, " features, weight expects ", weight.dim(1));
  const int64_t rows = x.dim(-1) == 0 ? 0 : x.numel() / x.dim(-1);
  return {rows, weight.dim(1), weight.dim(0), x.dtype()};
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    cudaStream_t stream) {
  constexpr const char* op = "linear_forward";
  const LinearShape s = check_linear_args(x, weight, op);
  check_cuda_arg(y, s.dtype, op, "y");
  ZT_CHECK(y.dim(-1) == s.out_features && same_leading_shape(y, x), op, ": y must be ", x.shape().to_string(),
           " with ", s.out_features, " features, got ", y.shape().to_string());
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
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
    check_cuda_arg(bias, s.dtype, op, "bias");
    check_shape(bias, Shape{s.out_features}, "linear_forward: bias");
    p.epilogue = GemmEpilogue::bias;
    p.bias = bias.data();
  }
  gemm(p, stream);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write,
                     cudaStream_t stream) {
  constexpr const char* op = "linear_backward";
  const LinearShape s = check_linear_args(x, weight, op);
  check_cuda_arg(dy, s.dtype, op, "dy");
  ZT_CHECK(dy.dim(-1) == s.out_features && same_leading_shape(dy, x), op, ": dy must be ",
           x.shape().to_string(), " with ", s.out_features, " features, got ", dy.shape().to_string());

  if (dx.defined() && dx.data() != nullptr) {
    check_cuda_arg(dx, s.dtype, op, "dx");
    ZT_CHECK(dx.shape() == x.shape(), op, ": dx must have the shape of x ", x.shape().to_string(), ", got ",
             dx.shape().to_string());
    ZT_CHECK(dx.data() != dy.data() || dx.numel() == 0, op, ": dx must not alias dy");
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
    check_cuda_arg(dweight, DType::f32, op, "dweight");
    check_shape(dweight, weight.shape(), "linear_backward: dweight");
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
    check_cuda_arg(dbias, DType::f32, op, "dbias");
    check_shape(dbias, Shape{s.out_features}, "linear_backward: dbias");
    column_sum_into(dy.data(), s.dtype, s.rows, s.out_features, dbias.data_as<float>(), write, stream);
  }
}

}  // namespace zt::kernels::gpu
