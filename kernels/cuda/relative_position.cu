// Relative-position index tables for the CUDA attention (see kernels/cuda/relative_position.cuh).
#include "kernels/cuda/relative_position.cuh"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"

namespace zt::kernels::gpu {

namespace {

// The cache entry: the tables and the allocator block behind them.
struct CachedTables {
  RelativeIndexTables tables;
  DeviceBuffer memory;
};

CachedTables build_and_upload(const RelativePositionConfig& config, int64_t length, int device,
                              cudaStream_t stream) {
  RelativeIndexTables tables;
  tables.length = length;
  // c2p_index(query, key) depends on query - key only, so c2p_index(r, 0) is the index of diagonal r.
  tables.window_begin = c2p_index(-(length - 1), 0, config);
  tables.window = c2p_index(length - 1, 0, config) - tables.window_begin + 1;
  const size_t diagonals = static_cast<size_t>(2 * length - 1), window = static_cast<size_t>(tables.window);
  // One host block [diagonal | first | last], uploaded in one copy.
  std::vector<int32_t> host(diagonals + 2 * window);
  int32_t* diagonal = host.data();
  int32_t* first = diagonal + diagonals;
  int32_t* last = first + window;
  std::fill(first, first + window, std::numeric_limits<int32_t>::max());
  std::fill(last, last + window, std::numeric_limits<int32_t>::min());
  for (int64_t t = 0; t < 2 * length - 1; ++t) {
    const int64_t rel = t - (length - 1);
    const int64_t r = c2p_index(rel, 0, config) - tables.window_begin;
    ZT_CHECK(r >= 0 && r < tables.window, "relative index tables: bucket of ", rel, " outside the window");
    diagonal[t] = static_cast<int32_t>(r);
    first[r] = std::min(first[r], static_cast<int32_t>(rel));
    last[r] = std::max(last[r], static_cast<int32_t>(rel));
  }
  tables.one_distance_per_bucket = true;
  for (size_t r = 0; r < window; ++r) tables.one_distance_per_bucket &= first[r] == last[r];
  // From the process-wide capped allocator (a few KiB, kept for the process): every thread reads the
  // entry, so it must not live in one rank's scoped allocator, which may be destroyed first.
  CachedTables entry;
  entry.memory = process_device_allocator(device).allocate(host.size() * sizeof(int32_t),
                                                           MemoryCategory::scratch, "attention.index_tables");
  int32_t* data = entry.memory.data_as<int32_t>();
  // Queued on the caller's stream, then waited for: threads on other streams find the entry in the cache
  // with nothing ordering their kernels after this copy, so it must be complete before it is published.
  ZT_CUDA_CHECK(
      cudaMemcpyAsync(data, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  tables.diagonal = data;
  tables.rel_first = data + diagonals;
  tables.rel_last = data + diagonals + window;
  entry.tables = tables;
  return entry;
}

}  // namespace

RelativeIndexTables relative_index_tables(const RelativePositionConfig& config, int64_t length,
                                          cudaStream_t stream) {
  ZT_CHECK(length >= 1, "relative index tables: length must be >= 1, got ", length);
  ZT_CHECK(length < (int64_t{1} << 30), "relative index tables: length ", length, " is too large");
  int device = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&device));
  using Key = std::tuple<int, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  // Never destroyed (like the allocator it draws from): releasing at exit would race the CUDA teardown.
  static auto* cache = new std::map<Key, CachedTables>;
  const std::lock_guard<std::mutex> lock(mutex);
  const Key key{device, config.position_buckets, config.max_relative_positions, length};
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, build_and_upload(config, length, device, stream)).first;
  return it->second.tables;
}

}  // namespace zt::kernels::gpu
