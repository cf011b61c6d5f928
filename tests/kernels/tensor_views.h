// Test helpers: Tensor views over std::vector storage (a Tensor never owns memory).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace zt::test {

inline Tensor f32_view(std::vector<float>& v, Shape shape) {
  ZT_CHECK(static_cast<int64_t>(v.size()) == shape.numel(), "f32_view: ", v.size(), " values for shape ",
           shape.to_string());
  return Tensor(v.data(), shape, DType::f32);
}

inline Tensor i64_view(std::vector<int64_t>& v, Shape shape) {
  ZT_CHECK(static_cast<int64_t>(v.size()) == shape.numel(), "i64_view: ", v.size(), " values for shape ",
           shape.to_string());
  return Tensor(v.data(), shape, DType::i64);
}

}  // namespace zt::test
