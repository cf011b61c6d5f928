#include "kernels/cpu/embedding.h"

#include <cstdint>
#include <cstring>

#include "kernels/arg_checks.h"

namespace zt::kernels::cpu {
namespace {

// out must be the ids' shape with the embedding width appended.
void check_rows_shape(const Tensor& rows, const Tensor& ids, int64_t dim, const char* op, const char* name) {
  bool same = rows.rank() == ids.rank() + 1 && rows.dim(-1) == dim;
  for (int i = 0; same && i < ids.rank(); ++i) same = rows.dim(i) == ids.dim(i);
  ZT_CHECK(same, op, ": ", name, " must have shape ids ", ids.shape().to_string(), " + [", dim, "], got ",
           rows.shape().to_string());
}

void check_ids_in_range(const int64_t* ids, int64_t n, int64_t vocab, const char* op) {
  for (int64_t t = 0; t < n; ++t) {
    ZT_CHECK(ids[t] >= 0 && ids[t] < vocab, op, ": id ", ids[t], " at position ", t, " is outside [0, ",
             vocab, ")");
  }
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  constexpr const char* op = "embedding_forward";
  check_cpu_arg(ids, DType::i64, op, "ids");
  check_cpu_arg(table, DType::f32, op, "table");
  check_cpu_arg(out, DType::f32, op, "out");
  ZT_CHECK(table.rank() == 2, op, ": table must be [V, D], got ", table.describe());
  const int64_t vocab = table.dim(0), dim = table.dim(1), n = ids.numel();
  check_rows_shape(out, ids, dim, op, "out");
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
  check_cpu_arg(ids, DType::i64, op, "ids");
  check_cpu_arg(dout, DType::f32, op, "dout");
  check_cpu_arg(dtable, DType::f32, op, "dtable");
  ZT_CHECK(dtable.rank() == 2, op, ": dtable must be [V, D], got ", dtable.describe());
  const int64_t vocab = dtable.dim(0), dim = dtable.dim(1), n = ids.numel();
  check_rows_shape(dout, ids, dim, op, "dout");
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
