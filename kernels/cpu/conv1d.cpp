#include "kernels/conv1d.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/eigen_views.h"
#ifdef ZT_WITH_CUDA
#include "kernels/cuda/conv1d.cuh"
#endif

namespace zt::kernels {
namespace {

using cpu::ConstMatrixView;
using cpu::ConstRowVectorView;
using cpu::MatrixView;
using cpu::RowMajorMatrix;
using cpu::RowVectorView;

using DynamicStride = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
// One kernel tap W[:, :, kk] of the [D_out, D_in, k] weight: a [D_out, D_in] matrix with inner stride k.
using TapView = Eigen::Map<RowMajorMatrix, 0, DynamicStride>;
using ConstTapView = Eigen::Map<const RowMajorMatrix, 0, DynamicStride>;

struct ConvShape {
  int64_t batch, length, in_features, out_features, kernel, pad;
};

// For tap kk the output rows t in [first, first + count) read input rows t + shift, all inside [0, L).
struct TapRange {
  int64_t shift, first, count;
};

TapRange tap_range(const ConvShape& s, int64_t kk) {
  const int64_t shift = kk - s.pad;
  const int64_t first = std::max<int64_t>(0, -shift);
  const int64_t end = std::min<int64_t>(s.length, s.length - shift);
  return {shift, first, std::max<int64_t>(0, end - first)};
}

ConvShape check_conv_args(const Tensor& x, const Tensor& weight, const char* op) {
  check_cpu_arg(x, DType::f32, op, "x");
  check_cpu_arg(weight, DType::f32, op, "weight");
  ZT_CHECK(x.rank() == 3, op, ": x must be [B, L, D_in], got ", x.describe());
  ZT_CHECK(weight.rank() == 3, op, ": weight must be [D_out, D_in, k], got ", weight.describe());
  ZT_CHECK(weight.dim(1) == x.dim(2), op, ": weight ", weight.shape().to_string(), " expects ", weight.dim(1),
           " input features, x ", x.shape().to_string(), " has ", x.dim(2));
  ZT_CHECK(weight.dim(2) % 2 == 1, op, ": kernel size must be odd for same padding, got ", weight.dim(2));
  return {x.dim(0), x.dim(1), x.dim(2), weight.dim(0), weight.dim(2), (weight.dim(2) - 1) / 2};
}

ConstTapView weight_tap(const float* w, const ConvShape& s, int64_t kk) {
  return ConstTapView(w + kk, s.out_features, s.in_features,
                      DynamicStride(s.in_features * s.kernel, s.kernel));
}

}  // namespace

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  constexpr const char* op = "conv1d_forward";
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda) return gpu::conv1d_forward(x, weight, bias, y, current_stream());
#endif
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  const ConvShape s = check_conv_args(x, weight, op);
  check_cpu_arg(y, DType::f32, op, "y");
  check_shape(y, Shape{s.batch, s.length, s.out_features}, "conv1d_forward: y");
  ZT_CHECK(y.data() != x.data() || x.numel() == 0, op, ": y must not alias x");
  const float* w = weight.data_as<float>();
  MatrixView ym(y.data_as<float>(), s.batch * s.length, s.out_features);
  if (bias.defined()) {
    check_cpu_arg(bias, DType::f32, op, "bias");
    check_shape(bias, Shape{s.out_features}, "conv1d_forward: bias");
    ym.rowwise() = Eigen::Map<const Eigen::RowVectorXf>(bias.data_as<float>(), s.out_features);
  } else {
    ym.setZero();
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    ConstMatrixView xb(x.data_as<float>() + b * s.length * s.in_features, s.length, s.in_features);
    auto yb = ym.middleRows(b * s.length, s.length);
    for (int64_t kk = 0; kk < s.kernel; ++kk) {
      const TapRange r = tap_range(s, kk);
      if (r.count == 0) continue;
      yb.middleRows(r.first, r.count).noalias() +=
          xb.middleRows(r.first + r.shift, r.count) * weight_tap(w, s, kk).transpose();
    }
  }
}

void conv1d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx) {
  constexpr const char* op = "conv1d_backward";
#ifdef ZT_WITH_CUDA
  if (x.device() == DeviceKind::cuda) {
    return gpu::conv1d_backward(dy, x, weight, dx, dweight, dbias, accumulate_dx, current_stream());
  }
#endif
  if (x.device() == DeviceKind::cuda) ZT_FAIL(op, ": CUDA kernel not built yet");
  const ConvShape s = check_conv_args(x, weight, op);
  check_cpu_arg(dy, DType::f32, op, "dy");
  check_shape(dy, Shape{s.batch, s.length, s.out_features}, "conv1d_backward: dy");
  const float* w = weight.data_as<float>();
  ConstMatrixView dym(dy.data_as<float>(), s.batch * s.length, s.out_features);

  if (dx.defined()) {
    check_cpu_arg(dx, DType::f32, op, "dx");
    check_same_shape(dx, x, op, "dx", "x");
    ZT_CHECK(dx.data() != dy.data() || dx.numel() == 0, op, ": dx must not alias dy");
    MatrixView dxm(dx.data_as<float>(), s.batch * s.length, s.in_features);
    if (!accumulate_dx) dxm.setZero();
    for (int64_t b = 0; b < s.batch; ++b) {
      auto dyb = dym.middleRows(b * s.length, s.length);
      auto dxb = dxm.middleRows(b * s.length, s.length);
      for (int64_t kk = 0; kk < s.kernel; ++kk) {
        const TapRange r = tap_range(s, kk);
        if (r.count == 0) continue;
        dxb.middleRows(r.first + r.shift, r.count).noalias() +=
            dyb.middleRows(r.first, r.count) * weight_tap(w, s, kk);
      }
    }
  }
  if (dweight.defined()) {
    check_cpu_arg(dweight, DType::f32, op, "dweight");
    check_same_shape(dweight, weight, op, "dweight", "weight");
    float* dw = dweight.data_as<float>();
    for (int64_t kk = 0; kk < s.kernel; ++kk) {
      TapView dw_tap(dw + kk, s.out_features, s.in_features,
                     DynamicStride(s.in_features * s.kernel, s.kernel));
      const TapRange r = tap_range(s, kk);
      if (r.count == 0) continue;
      for (int64_t b = 0; b < s.batch; ++b) {
        ConstMatrixView xb(x.data_as<float>() + b * s.length * s.in_features, s.length, s.in_features);
        auto dyb = dym.middleRows(b * s.length, s.length);
        dw_tap.noalias() +=
            dyb.middleRows(r.first, r.count).transpose() * xb.middleRows(r.first + r.shift, r.count);
      }
    }
  }
  if (dbias.defined()) {
    check_cpu_arg(dbias, DType::f32, op, "dbias");
    check_shape(dbias, Shape{s.out_features}, "conv1d_backward: dbias");
    cpu::add_column_sums(dym, cpu::RowVectorView(dbias.data_as<float>(), s.out_features),
                         GradWrite::accumulate);
  }
}

}  // namespace zt::kernels
