// Tensor: a non-owning, strided view of memory owned by an arena (runtime/arena.h) or by the caller.
// Shapes are row-major; strides are in elements. A Tensor never frees what it points to.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "runtime/check.h"
#include "runtime/dtype.h"

namespace zt {

enum class DeviceKind : uint8_t { cpu, cuda };

constexpr int kMaxRank = 6;

struct Shape {
  std::array<int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[i]; }
  int64_t& operator[](int i) { return dims[i]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string to_string() const;  // "[2, 3, 4]"
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(void* data, Shape shape, DType dtype, DeviceKind device = DeviceKind::cpu);

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    ZT_CHECK(dtype_of<T>::value == dtype_, "tensor holds ", dtype_name(dtype_), ", accessed as ",
             dtype_name(dtype_of<T>::value));
    return static_cast<T*>(data_);
  }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative i counts from the end
  int rank() const { return shape_.rank; }
  const std::array<int64_t, kMaxRank>& strides() const { return strides_; }
  int64_t stride(int i) const { return strides_[i]; }
  DType dtype() const { return dtype_; }
  DeviceKind device() const { return device_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  bool is_contiguous() const;

  // Same memory seen with another shape of equal element count; requires a contiguous tensor.
  Tensor reshape(Shape shape) const;
  // Sub-range [begin, end) along dimension 0 (no copy).
  Tensor slice_rows(int64_t begin, int64_t end) const;

  std::string describe() const;  // "bf16[2, 3] cuda"

 private:
  void* data_ = nullptr;
  Shape shape_;
  std::array<int64_t, kMaxRank> strides_{};
  DType dtype_ = DType::f32;
  DeviceKind device_ = DeviceKind::cpu;
};

// Throws unless t has exactly `expected` shape; `what` names the tensor in the message.
void check_shape(const Tensor& t, const Shape& expected, const char* what);

}  // namespace zt
