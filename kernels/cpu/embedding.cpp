#include "kernels/cpu/embedding.h"

#include <cstdint>
#include <cstring>

#include "runtime/check.h"

namespace zt::kernels::cpu {
namespace {

void check_ids_in_range(const int64_t* ids, int64_t n, int64_t vocab, const char* op) {
  for (int64_t t = 0; t < n; ++t) {
    ZT_CHECK(ids[t] >= 0 && ids[t] < vocab, op, ": id ", ids[t], " at position ", t, " is outside [0, ",
             vocab, ")");
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  constexpr const char* op = "embedding_forward";
  const int64_t vocab = table.dim(0), dim = table.dim(1), n = ids.numel();
  const int64_t* id = ids.data_as<int64_t>();
  check_ids_in_range(id, n, vocab, op);
  const float* rows = table.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(dst + t * dim, rows + id[t] * dim, static_cast<size_t>(dim) * sizeof(float));
  }
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable, int64_t padding_idx) {
  constexpr const char* op = "embedding_backward";
  const int64_t vocab = dtable.dim(0), dim = dtable.dim(1), n = ids.numel();
  const int64_t* id = ids.data_as<int64_t>();
  check_ids_in_range(id, n, vocab, op);
  const float* src = dout.data_as<float>();
  float* rows = dtable.data_as<float>();
  for (int64_t t = 0; t < n; ++t) {
    if (id[t] == padding_idx) continue;
    float* row = rows + id[t] * dim;
    const float* g = src + t * dim;
    for (int64_t j = 0; j < dim; ++j) row[j] += g[j];
  }
}

}  // namespace zt::kernels::cpu
