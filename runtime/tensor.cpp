#include "runtime/tensor.h"

#include <sstream>

namespace zt {

Shape::Shape(std::initializer_list<int64_t> d) {
  ZT_CHECK(d.size() <= kMaxRank, "rank ", d.size(), " exceeds the maximum ", kMaxRank);
  for (int64_t v : d) {
    ZT_CHECK(v >= 0, "negative dimension ", v);
    dims[rank++] = v;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != o.dims[i]) return false;
  return true;
}

std::string Shape::to_string() const {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < rank; ++i) out << (i ? ", " : "") << dims[i];
  out << "]";
  return out.str();
}

Tensor::Tensor(void* data, Shape shape, DType dtype, DeviceKind device)
    : data_(data), shape_(shape), dtype_(dtype), device_(device) {
  int64_t s = 1;
  for (int i = shape_.rank - 1; i >= 0; --i) {
    strides_[i] = s;
    s *= shape_.dims[i];
  }
}

int64_t Tensor::dim(int i) const {
  int idx = i < 0 ? i + shape_.rank : i;
  ZT_CHECK(idx >= 0 && idx < shape_.rank, "dimension ", i, " out of range for rank ", shape_.rank);
  return shape_.dims[idx];
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = shape_.rank - 1; i >= 0; --i) {
    if (shape_.dims[i] != 1 && strides_[i] != s) return false;
    s *= shape_.dims[i];
  }
  return true;
}

Tensor Tensor::reshape(Shape shape) const {
  ZT_CHECK(is_contiguous(), "reshape of a non-contiguous tensor ", describe());
  ZT_CHECK(shape.numel() == numel(), "cannot reshape ", describe(), " to ", shape.to_string());
  return Tensor(data_, shape, dtype_, device_);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  ZT_CHECK(shape_.rank >= 1 && 0 <= begin && begin <= end && end <= shape_.dims[0], "row slice [", begin,
           ", ", end, ") out of range for ", describe());
  Tensor out = *this;
  out.shape_.dims[0] = end - begin;
  out.data_ = static_cast<char*>(data_) + begin * strides_[0] * static_cast<int64_t>(dtype_size(dtype_));
  return out;
}

std::string Tensor::describe() const {
  return str(dtype_name(dtype_), shape_.to_string(), device_ == DeviceKind::cuda ? " cuda" : " cpu");
}

void check_shape(const Tensor& t, const Shape& expected, const char* what) {
  ZT_CHECK(t.shape() == expected, what, ": expected shape ", expected.to_string(), ", got ",
           t.shape().to_string());
}

}  // namespace zt
