// Relative-position index tables for the CUDA attention (see kernels/cuda/relative_position.cuh).
#include "kernels/cuda/relative_position.cuh"

#include <algorithm>
#include <limits>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {

namespace {

DeviceBuffer upload_int32(const std::vector<int32_t>& values, std::string_view name, cudaStream_t stream) {
  DeviceBuffer buffer =
      device_allocator().allocate(values.size() * sizeof(int32_t), MemoryCategory::scratch, name);
  if (!values.empty()) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(buffer.data(), values.data(), values.size() * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, stream));
  }
  return buffer;
}

}  // namespace

RelativeIndexTables upload_relative_index_tables(const RelativePositionConfig& config, int64_t length,
                                                 cudaStream_t stream) {
  ZT_CHECK(length >= 1, "relative index tables: length must be >= 1, got ", length);
  ZT_CHECK(length < (int64_t{1} << 30), "relative index tables: length ", length, " is too large");
  RelativeIndexTables tables;
  tables.length = length;
  // c2p_index(query, key) depends on query - key only, so c2p_index(r, 0) is the index of diagonal r.
  tables.window_begin = c2p_index(-(length - 1), 0, config);
  tables.window = c2p_index(length - 1, 0, config) - tables.window_begin + 1;
  std::vector<int32_t> diagonal(static_cast<size_t>(2 * length - 1));
  std::vector<int32_t> first(static_cast<size_t>(tables.window), std::numeric_limits<int32_t>::max());
  std::vector<int32_t> last(static_cast<size_t>(tables.window), std::numeric_limits<int32_t>::min());
  for (int64_t t = 0; t < 2 * length - 1; ++t) {
    const int64_t rel = t - (length - 1);
    const int64_t r = c2p_index(rel, 0, config) - tables.window_begin;
    ZT_CHECK(r >= 0 && r < tables.window, "relative index tables: bucket of ", rel, " outside the window");
    diagonal[static_cast<size_t>(t)] = static_cast<int32_t>(r);
    first[static_cast<size_t>(r)] = std::min(first[static_cast<size_t>(r)], static_cast<int32_t>(rel));
    last[static_cast<size_t>(r)] = std::max(last[static_cast<size_t>(r)], static_cast<int32_t>(rel));
  }
  tables.diagonal = upload_int32(diagonal, "attention.diagonal_index", stream);
  tables.rel_first = upload_int32(first, "attention.bucket_first", stream);
  tables.rel_last = upload_int32(last, "attention.bucket_last", stream);
  return tables;
}

}  // namespace zt::kernels::gpu
