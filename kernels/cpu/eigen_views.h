// Eigen views over the raw row-major f32 buffers the CPU references work on (no copies): a Tensor [R, C] is
// a RowMajorMatrix map, so GEMMs run through Eigen's blocked kernels.
#pragma once

#include <Eigen/Dense>

#include "kernels/grad_write.h"

namespace zt::kernels::cpu {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMajorMatrix>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix>;
using RowVectorView = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorView = Eigen::Map<const Eigen::RowVectorXf>;

// out (+)= the column sums of m (GradWrite::overwrite: 0 + sums), summed in double: the bias gradient of a
// [rows, features] output gradient, a trustworthy reference over B * L rows.
inline void add_column_sums(const ConstMatrixView& m, RowVectorView out, GradWrite write) {
  if (write == GradWrite::overwrite) out.setZero();
  out += m.cast<double>().colwise().sum().cast<float>();
}

}  // namespace zt::kernels::cpu
