#include "kernels/cpu/conv1d.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/eigen_views.h"

namespace zt::kernels::cpu {
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

// The shape of a checked call (kernels/conv1d.cpp): "same" padding (k - 1) / 2.
ConvShape conv_shape(const Tensor& x, const Tensor& weight) {
  return {x.dim(0), x.dim(1), x.dim(2), weight.dim(0), weight.dim(2), (weight.dim(2) - 1) / 2};
}

ConstTapView weight_tap(const float* w, const ConvShape& s, int64_t kk) {
  return ConstTapView(w + kk, s.out_features, s.in_features,
                      DynamicStride(s.in_features * s.kernel, s.kernel));
}

}  // namespace

void conv1d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const ConvShape s = conv_shape(x, weight);
  const float* w = weight.data_as<float>();
  MatrixView ym(y.data_as<float>(), s.batch * s.length, s.out_features);
  if (bias.defined()) {
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
  const ConvShape s = conv_shape(x, weight);
  const float* w = weight.data_as<float>();
  ConstMatrixView dym(dy.data_as<float>(), s.batch * s.length, s.out_features);

  if (dx.defined()) {
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
    cpu::add_column_sums(dym, cpu::RowVectorView(dbias.data_as<float>(), s.out_features),
                         GradWrite::accumulate);
  }
}

}  // namespace zt::kernels::cpu
