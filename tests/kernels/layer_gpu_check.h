// A layer with a weight and a bias (linear, conv1d) on CUDA tensors against its CPU reference, on inputs
// rounded to the storage dtype: y; dx written over a buffer of 5s; dx accumulated onto random values; and
// dweight, dbias (f32) accumulated onto random values. The same entry points run both sides: the layer's
// functions dispatch on the tensors' device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/tensor.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::test {

struct LayerShapes {
  Shape x, weight, y;
  int64_t out_features;
};
using LayerForward = std::function<void(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y)>;
using LayerBackward = std::function<void(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx,
                                         const Tensor& dw, const Tensor& db, bool accumulate_dx)>;

// Random inputs from seeds first_seed .. first_seed + 6.
inline void expect_layer_matches_cpu(DType dtype, const LayerShapes& s, uint64_t first_seed,
                                     const LayerForward& forward, const LayerBackward& backward) {
  const int64_t nx = s.x.numel(), ny = s.y.numel(), nw = s.weight.numel(), nb = s.out_features;
  uint64_t seed = first_seed;
  std::vector<float> x = round_to(random_uniform(nx, seed++), dtype);
  std::vector<float> w = round_to(random_uniform(nw, seed++), dtype);
  std::vector<float> b = round_to(random_uniform(nb, seed++), dtype);
  std::vector<float> dy = round_to(random_uniform(ny, seed++), dtype);
  std::vector<float> dx_initial = round_to(random_uniform(nx, seed++), dtype);
  std::vector<float> dw_initial = random_uniform(nw, seed++), db_initial = random_uniform(nb, seed++);

  std::vector<float> y_ref(static_cast<size_t>(ny)), dx_ref(static_cast<size_t>(nx)),
      dx_acc_ref = dx_initial, dw_ref = dw_initial, db_ref = db_initial;
  const auto f32 = [](std::vector<float>& v, Shape shape) { return Tensor(v.data(), shape, DType::f32); };
  forward(f32(x, s.x), f32(w, s.weight), f32(b, Shape{nb}), f32(y_ref, s.y));
  backward(f32(dy, s.y), f32(x, s.x), f32(w, s.weight), f32(dx_ref, s.x), f32(dw_ref, s.weight),
           f32(db_ref, Shape{nb}), false);
  backward(f32(dy, s.y), f32(x, s.x), f32(w, s.weight), f32(dx_acc_ref, s.x), Tensor(), Tensor(), true);

  auto gx = to_device(x, s.x, dtype), gw = to_device(w, s.weight, dtype), gb = to_device(b, Shape{nb}, dtype);
  auto gdy = to_device(dy, s.y, dtype), gy = to_device(std::vector<float>(y_ref.size(), 0.0f), s.y, dtype);
  auto gdx = to_device(std::vector<float>(dx_ref.size(), 5.0f), s.x, dtype);
  auto gdx_acc = to_device(dx_initial, s.x, dtype);
  auto gdw = to_device(dw_initial, s.weight, DType::f32), gdb = to_device(db_initial, Shape{nb}, DType::f32);
  forward(gx.tensor, gw.tensor, gb.tensor, gy.tensor);
  backward(gdy.tensor, gx.tensor, gw.tensor, gdx.tensor, gdw.tensor, gdb.tensor, false);
  backward(gdy.tensor, gx.tensor, gw.tensor, gdx_acc.tensor, Tensor(), Tensor(), true);

  const Tolerance tol = tolerance_for(dtype);
  EXPECT_TRUE(all_close("y", to_host(gy.tensor), y_ref, tol));
  EXPECT_TRUE(all_close("dx", to_host(gdx.tensor), dx_ref, tol));
  EXPECT_TRUE(all_close("dx accumulated", to_host(gdx_acc.tensor), dx_acc_ref, tol));
  EXPECT_TRUE(all_close("dweight", to_host(gdw.tensor), dw_ref, tol));
  EXPECT_TRUE(all_close("dbias", to_host(gdb.tensor), db_ref, tol));
}

}  // namespace zt::test
