#include "kernels/linear.h"

#include <Eigen/Core>
#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/eigen_views.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/linear.cuh"
#endif

namespace zt::kernels {
namespace {

using cpu::ConstMatrixView;
using cpu::ConstRowVectorView;
using cpu::MatrixView;
using cpu::RowMajorMatrix;
using cpu::RowVectorView;

// The leading shape of `t` (all but the last dimension) must equal that of `like`.
void check_same_rows(const Tensor& t, const Tensor& like, const char* op, const char* name,
                     const char* like_name) {
  bool same = t.rank() == like.rank();
  for (int i = 0; same && i + 1 < t.rank(); ++i) same = t.dim(i) == like.dim(i);
  ZT_CHECK(same, op, ": ", name, " ", t.shape().to_string(), " must have the leading shape of ", like_name,
           " ", like.shape().to_string());
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  constexpr const char* op = "linear_forward";
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda) return gpu::linear_forward(x, weight, bias, y, current_stream());
#endif
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  check_cpu_arg(x, DType::f32, op, "x");
  check_cpu_arg(weight, DType::f32, op, "weight");
  check_cpu_arg(y, DType::f32, op, "y");
  ZT_CHECK(weight.rank() == 2, op, ": weight must be [out, in], got ", weight.describe());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  ZT_CHECK(x.dim(-1) == in_features, op, ": x ", x.shape().to_string(), " has ", x.dim(-1),
           " features, weight expects ", in_features);
  ZT_CHECK(y.dim(-1) == out_features, op, ": y ", y.shape().to_string(), " needs ", out_features,
           " features");
  check_same_rows(y, x, op, "y", "x");
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
  const int64_t rows = rows_of(x);

  ConstMatrixView xm(x.data_as<float>(), rows, in_features);
  ConstMatrixView wm(weight.data_as<float>(), out_features, in_features);
  MatrixView ym(y.data_as<float>(), rows, out_features);
  ym.noalias() = xm * wm.transpose();
  if (bias.defined()) {
    check_cpu_arg(bias, DType::f32, op, "bias");
    check_shape(bias, Shape{out_features}, "linear_forward: bias");
    ym.rowwise() += ConstRowVectorView(bias.data_as<float>(), out_features);
  }
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write) {
  constexpr const char* op = "linear_backward";
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda) {
    return gpu::linear_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx, write, current_stream());
  }
#endif
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  check_cpu_arg(dy, DType::f32, op, "dy");
  check_cpu_arg(x, DType::f32, op, "x");
  check_cpu_arg(weight, DType::f32, op, "weight");
  ZT_CHECK(weight.rank() == 2, op, ": weight must be [out, in], got ", weight.describe());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  ZT_CHECK(x.dim(-1) == in_features, op, ": x ", x.shape().to_string(), " has ", x.dim(-1),
           " features, weight expects ", in_features);
  ZT_CHECK(dy.dim(-1) == out_features, op, ": dy ", dy.shape().to_string(), " needs ", out_features,
           " features");
  check_same_rows(dy, x, op, "dy", "x");
  const int64_t rows = rows_of(x);
  ConstMatrixView dym(dy.data_as<float>(), rows, out_features);
  ConstMatrixView wm(weight.data_as<float>(), out_features, in_features);
  ConstMatrixView xm(x.data_as<float>(), rows, in_features);

  if (dx.defined()) {
    check_cpu_arg(dx, DType::f32, op, "dx");
    check_same_shape(dx, x, op, "dx", "x");
    ZT_CHECK(dx.data() != dy.data() || dx.numel() == 0, op, ": dx must not alias dy");
    MatrixView dxm(dx.data_as<float>(), rows, in_features);
    if (accumulate_dx) {
      dxm.noalias() += dym * wm;
    } else {
      dxm.noalias() = dym * wm;
    }
  }
  if (dweight.defined()) {
    check_cpu_arg(dweight, DType::f32, op, "dweight");
    check_same_shape(dweight, weight, op, "dweight", "weight");
    MatrixView dwm(dweight.data_as<float>(), out_features, in_features);
    if (write == GradWrite::overwrite) dwm.setZero();  // then the accumulation: 0 + dy^T x, bit for bit
    dwm.noalias() += dym.transpose() * xm;
  }
  if (dbias.defined()) {
    check_cpu_arg(dbias, DType::f32, op, "dbias");
    check_shape(dbias, Shape{out_features}, "linear_backward: dbias");
    cpu::add_column_sums(dym, RowVectorView(dbias.data_as<float>(), out_features), write);
  }
}

}  // namespace zt::kernels
