#include "model/golden_init.h"

#include "runtime/check.h"

namespace zt {

std::string_view param_kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::weight:
      return "weight";
    case ParamKind::bias:
      return "bias";
    case ParamKind::layernorm_weight:
      return "layernorm_weight";
    case ParamKind::layernorm_bias:
      return "layernorm_bias";
    case ParamKind::embedding:
      return "embedding";
  }
  ZT_FAIL("unknown ParamKind ", static_cast<int>(kind));
}

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

float unit_from_key(uint64_t key, int64_t index) {
  uint64_t z = key + (static_cast<uint64_t>(index) + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  // The top 24 bits, centred: |top24| <= 2^23 is exact in a float and so is the power-of-two scale.
  const int64_t top24 = static_cast<int64_t>(z >> 40) - (int64_t{1} << 23);
  return static_cast<float>(top24) * 0x1p-23f;
}

float scale_unit(float u, ParamKind kind) {
  switch (kind) {
    case ParamKind::weight:
    case ParamKind::embedding:
      return u * 0x1p-4f;
    case ParamKind::bias:
      return u * 0x1p-6f;
    case ParamKind::layernorm_weight:
      return 1.0f + u * 0x1p-3f;
    case ParamKind::layernorm_bias:
      return u * 0x1p-5f;
  }
  ZT_FAIL("unknown ParamKind ", static_cast<int>(kind));
}

}  // namespace

float golden_init_unit(std::string_view name, int64_t index) {
  return unit_from_key(fnv1a64(name), index);
}

float golden_init_value(std::string_view name, int64_t index, ParamKind kind) {
  ZT_CHECK(index >= 0, "golden init index must not be negative, got ", index);
  return scale_unit(golden_init_unit(name, index), kind);
}

void golden_init_fill(std::string_view name, ParamKind kind, std::span<float> out, int64_t first_index) {
  ZT_CHECK(first_index >= 0, "golden init first index must not be negative, got ", first_index);
  const uint64_t key = fnv1a64(name);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = scale_unit(unit_from_key(key, first_index + static_cast<int64_t>(i)), kind);
  }
}

}  // namespace zt
