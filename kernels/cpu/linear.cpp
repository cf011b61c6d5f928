#include "kernels/cpu/linear.h"

#include <Eigen/Core>
#include <cstdint>

#include "kernels/arg_checks.h"
#include "kernels/cpu/eigen_views.h"

namespace zt::kernels::cpu {
void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y) {
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  const int64_t rows = rows_of(x);
  ConstMatrixView xm(x.data_as<float>(), rows, in_features);
  ConstMatrixView wm(weight.data_as<float>(), out_features, in_features);
  MatrixView ym(y.data_as<float>(), rows, out_features);
  ym.noalias() = xm * wm.transpose();
  if (bias.defined()) {
    ym.rowwise() += ConstRowVectorView(bias.data_as<float>(), out_features);
  }
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& dx,
                     const Tensor& dweight, const Tensor& dbias, bool accumulate_dx, GradWrite write) {
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  const int64_t rows = rows_of(x);
  ConstMatrixView dym(dy.data_as<float>(), rows, out_features);
  ConstMatrixView wm(weight.data_as<float>(), out_features, in_features);
  ConstMatrixView xm(x.data_as<float>(), rows, in_features);

  if (dx.defined()) {
    MatrixView dxm(dx.data_as<float>(), rows, in_features);
    if (accumulate_dx) {
      dxm.noalias() += dym * wm;
    } else {
      dxm.noalias() = dym * wm;
    }
  }
  if (dweight.defined()) {
    MatrixView dwm(dweight.data_as<float>(), out_features, in_features);
    if (write == GradWrite::overwrite) dwm.setZero();  // then the accumulation: 0 + dy^T x, bit for bit
    dwm.noalias() += dym.transpose() * xm;
  }
  if (dbias.defined()) {
    add_column_sums(dym, RowVectorView(dbias.data_as<float>(), out_features), write);
  }
}

}  // namespace zt::kernels::cpu
