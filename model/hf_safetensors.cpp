// safetensors reader: `u64 LE N | N bytes JSON header | byte buffer` (reference/deberta-v2.md §11.2).
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} with offsets relative to
// the byte buffer; tensors are C-contiguous little-endian.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "model/hf_readers.h"
#include "runtime/check.h"

namespace zt {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit

StoredDType parse_safetensors_dtype(const std::string& name, const std::string& what) {
  static const std::pair<const char*, StoredDType> kTypes[] = {
      {"F32", StoredDType::f32},     {"F16", StoredDType::f16}, {"BF16", StoredDType::bf16},
      {"F64", StoredDType::f64},     {"I64", StoredDType::i64}, {"I32", StoredDType::i32},
      {"I16", StoredDType::i16},     {"I8", StoredDType::i8},   {"U8", StoredDType::u8},
      {"BOOL", StoredDType::boolean}};
  for (const auto& [spelling, type] : kTypes) {
    if (name == spelling) return type;
  }
  ZT_FAIL(what, ": unsupported dtype '", name, "'");
}

int64_t json_nonnegative_int(const nlohmann::json& v, const std::string& what) {
  ZT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), what,
           " must be a non-negative integer, got ", v.dump());
  uint64_t u = v.get<uint64_t>();
  ZT_CHECK(u <= static_cast<uint64_t>(INT64_MAX), what, " is too large: ", u);
  return static_cast<int64_t>(u);
}

}  // namespace

std::vector<CheckpointTensor> read_safetensors(ByteSpan file, const std::string& source) {
  ZT_CHECK(file.size() >= 8, source, ": too short for a safetensors file (", file.size(), " bytes)");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | file[static_cast<size_t>(i)];
  ZT_CHECK(header_size <= kMaxHeaderBytes, source, ": header size ", header_size, " exceeds the ",
           kMaxHeaderBytes, "-byte limit");
  ZT_CHECK(header_size <= file.size() - 8, source, ": header of ", header_size,
           " bytes runs past the end of the ", file.size(), "-byte file");
  const size_t buffer_begin = 8 + static_cast<size_t>(header_size);
  const uint64_t buffer_size = file.size() - buffer_begin;
  ByteSpan header = file.subspan(8, static_cast<size_t>(header_size));

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header.begin(), header.end());
  } catch (const nlohmann::json::exception& e) {
    ZT_FAIL(source, ": header is not valid JSON: ", e.what());
  }
  ZT_CHECK(json.is_object(), source, ": header must be a JSON object");

  std::vector<CheckpointTensor> tensors;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // byte ranges, for the overlap check
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      ZT_CHECK(it->is_object(), source, ": __metadata__ must be an object");
      continue;
    }
    const std::string what = source + ": tensor '" + name + "'";
    const nlohmann::json& entry = *it;
    ZT_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                 entry.contains("data_offsets"),
             what, " needs dtype, shape and data_offsets");
    ZT_CHECK(entry["dtype"].is_string(), what, ": dtype must be a string");
    CheckpointTensor t;
    t.name = name;
    t.source = source;
    t.dtype = parse_safetensors_dtype(entry["dtype"].get<std::string>(), what);
    const nlohmann::json& shape = entry["shape"];
    ZT_CHECK(shape.is_array() && shape.size() <= static_cast<size_t>(kMaxRank), what,
             ": shape must be an array of at most ", kMaxRank, " sizes");
    for (const nlohmann::json& d : shape) t.shape.push_back(json_nonnegative_int(d, what + " shape"));
    const nlohmann::json& offsets = entry["data_offsets"];
    ZT_CHECK(offsets.is_array() && offsets.size() == 2, what, ": data_offsets must be [begin, end]");
    const uint64_t begin = static_cast<uint64_t>(json_nonnegative_int(offsets[0], what + " data_offsets"));
    const uint64_t end = static_cast<uint64_t>(json_nonnegative_int(offsets[1], what + " data_offsets"));
    ZT_CHECK(begin <= end && end <= buffer_size, what, ": data_offsets [", begin, ", ", end, ") outside the ",
             buffer_size, "-byte data buffer");

    // Contiguous strides; the byte size must match the shape exactly (overflow-checked).
    t.strides.assign(t.shape.size(), 1);
    int64_t numel = 1;
    for (size_t i = t.shape.size(); i-- > 0;) {
      t.strides[i] = numel;
      ZT_CHECK(!__builtin_mul_overflow(numel, t.shape[i], &numel), what, ": element count overflows");
    }
    uint64_t nbytes = 0;
    ZT_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(numel), stored_dtype_size(t.dtype), &nbytes) &&
                 nbytes == end - begin,
             what, ": shape needs ", numel, " x ", stored_dtype_size(t.dtype),
             " bytes but data_offsets span ", end - begin);
    t.storage = file.subspan(buffer_begin + static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    ranges.emplace_back(begin, end);
    tensors.push_back(std::move(t));
  }

  // File order, and no two tensors may share bytes (empty tensors occupy nothing).
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  uint64_t covered = 0;
  const CheckpointTensor* previous = nullptr;
  std::vector<CheckpointTensor> sorted;
  sorted.reserve(tensors.size());
  for (size_t i : order) {
    auto [begin, end] = ranges[i];
    if (end > begin) {
      ZT_CHECK(begin >= covered, source, ": tensor '", tensors[i].name, "' [", begin, ", ", end,
               ") overlaps tensor '", previous != nullptr ? previous->name : std::string("?"), "'");
      covered = end;
      previous = &tensors[i];
    }
  }
  for (size_t i : order) sorted.push_back(std::move(tensors[i]));
  return sorted;
}

}  // namespace zt
