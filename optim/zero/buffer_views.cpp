#include "optim/zero/buffer_views.h"

#include <cstring>

#include "runtime/check.h"

namespace zt::optim::zero_views {

ArenaLayout flat_layout(int64_t numel, DType dtype) {
  ArenaLayout layout;
  layout.add({"flat", Shape{numel}, dtype});
  return layout;
}

Tensor view(const Arena& arena, DType dtype, int64_t offset, int64_t numel) {
  ZT_CHECK(offset >= 0 && (offset + numel) * static_cast<int64_t>(dtype_size(dtype)) <=
                              static_cast<int64_t>(arena.bytes()),
           "ZeRO engine: view [", offset, ", ", offset + numel, ") outside ", arena.name());
  return Tensor(static_cast<char*>(arena.data()) + offset * static_cast<int64_t>(dtype_size(dtype)),
                Shape{numel}, dtype, arena.device());
}

std::span<float> host_span(const Tensor& t) {
  ZT_CHECK(t.device() == DeviceKind::cpu && t.dtype() == DType::f32, "ZeRO engine: expected a host f32 view");
  return {static_cast<float*>(t.data()), static_cast<size_t>(t.numel())};
}

void write_compute_values(std::span<const float> master, const Tensor& out) {
  ZT_CHECK(out.device() == DeviceKind::cpu && out.numel() == static_cast<int64_t>(master.size()),
           "ZeRO engine: compute values need a host tensor of ", master.size(), " elements");
  switch (out.dtype()) {
    case DType::f32:
      std::memcpy(out.data(), master.data(), master.size_bytes());
      return;
    case DType::bf16:
      for (size_t i = 0; i < master.size(); ++i) out.data_as<bf16>()[i] = float_to_bf16(master[i]);
      return;
    case DType::f16:
      for (size_t i = 0; i < master.size(); ++i) out.data_as<f16>()[i] = float_to_f16(master[i]);
      return;
    default:
      ZT_FAIL("ZeRO engine: no compute dtype ", dtype_name(out.dtype()));
  }
}

Params16Out params16_of(const Tensor& t) {
  const auto n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::bf16) return std::span<bf16>(t.data_as<bf16>(), n);
  if (t.dtype() == DType::f16) return std::span<f16>(t.data_as<f16>(), n);
  return {};
}

}  // namespace zt::optim::zero_views
