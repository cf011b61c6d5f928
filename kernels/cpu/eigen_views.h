// Eigen views over the raw row-major f32 buffers the CPU references work on (no copies): a Tensor [R, C] is
// a RowMajorMatrix map, so GEMMs run through Eigen's blocked kernels.
#pragma once

#include <Eigen/Dense>

namespace zt::kernels::cpu {

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMajorMatrix>;
using ConstMatrixView = Eigen::Map<const RowMajorMatrix>;
using RowVectorView = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorView = Eigen::Map<const Eigen::RowVectorXf>;

}  // namespace zt::kernels::cpu
