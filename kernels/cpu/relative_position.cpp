#include "kernels/relative_position.h"

#include <algorithm>
#include <cmath>

#include "runtime/check.h"

namespace zt::kernels {

RelativePositionConfig RelativePositionConfig::from_model_config(int64_t position_buckets,
                                                                 int64_t max_relative_positions,
                                                                 int64_t max_position_embeddings) {
  RelativePositionConfig config;
  config.position_buckets = position_buckets;
  config.max_relative_positions =
      max_relative_positions < 1 ? max_position_embeddings : max_relative_positions;
  ZT_CHECK(config.att_span() > 0, "relative positions: attention span must be positive (position_buckets ",
           position_buckets, ", max_relative_positions ", config.max_relative_positions, ")");
  return config;
}

int64_t make_log_bucket_position(int64_t relative_position, int64_t bucket_size, int64_t max_position) {
  ZT_CHECK(bucket_size >= 2, "make_log_bucket_position: bucket_size must be >= 2, got ", bucket_size);
  ZT_CHECK(max_position > 1, "make_log_bucket_position: max_position must be > 1, got ", max_position);
  const int64_t mid = bucket_size / 2;
  const int64_t r = relative_position;
  const int64_t abs_pos = (r < mid && r > -mid) ? mid - 1 : (r < 0 ? -r : r);
  if (abs_pos <= mid) return r;
  // Every step in fp32, like HF: int / int true division gives fp32, torch.tensor(python float) is fp32,
  // and the product with (mid - 1) and the sum with mid stay fp32. Using one log for numerator and
  // denominator makes |r| = max_position - 1 land exactly on an integer, as in HF.
  const float ratio = static_cast<float>(abs_pos) / static_cast<float>(mid);
  const float max_ratio =
      static_cast<float>(static_cast<double>(max_position - 1) / static_cast<double>(mid));
  const float scaled = std::log(ratio) / std::log(max_ratio) * static_cast<float>(mid - 1);
  const float log_pos = std::ceil(scaled) + static_cast<float>(mid);
  const int64_t magnitude = static_cast<int64_t>(log_pos);
  return r < 0 ? -magnitude : magnitude;
}

int64_t relative_bucket(int64_t relative_position, const RelativePositionConfig& config) {
  if (!config.bucketed()) return relative_position;
  return make_log_bucket_position(relative_position, config.position_buckets, config.max_relative_positions);
}

int64_t c2p_index(int64_t query, int64_t key, const RelativePositionConfig& config) {
  const int64_t span = config.att_span();
  return std::clamp<int64_t>(relative_bucket(query - key, config) + span, 0, 2 * span - 1);
}

namespace {

// Fills out[a,b] = clamp(sign * bucket(a - b) + S, 0, 2S - 1). The bucket depends only on a - b, so it is
// computed once per diagonal rather than once per element (log is the expensive part).
void fill_index_table(const RelativePositionConfig& config, int64_t sign, const Tensor& out,
                      const char* what) {
  ZT_CHECK(out.device() == DeviceKind::cpu, what, ": output must be a CPU tensor, got ", out.describe());
  ZT_CHECK(out.rank() == 2, what, ": output must be [query_length, key_length], got ", out.describe());
  ZT_CHECK(out.is_contiguous(), what, ": output must be contiguous");
  ZT_CHECK(out.dtype() == DType::i64 || out.dtype() == DType::i32, what, ": output must be i64 or i32, got ",
           out.describe());
  ZT_CHECK(config.att_span() > 0, what, ": attention span must be positive");
  const int64_t rows = out.dim(0), cols = out.dim(1), span = config.att_span();
  for (int64_t diagonal = -(cols - 1); diagonal <= rows - 1; ++diagonal) {
    const int64_t index =
        std::clamp<int64_t>(sign * relative_bucket(diagonal, config) + span, 0, 2 * span - 1);
    const int64_t first_row = std::max<int64_t>(0, diagonal);
    const int64_t last_row = std::min(rows - 1, diagonal + cols - 1);
    for (int64_t a = first_row; a <= last_row; ++a) {
      const int64_t b = a - diagonal;
      if (out.dtype() == DType::i64) {
        out.data_as<int64_t>()[a * cols + b] = index;
      } else {
        out.data_as<int32_t>()[a * cols + b] = static_cast<int32_t>(index);
      }
    }
  }
}

}  // namespace

void build_c2p_index(const RelativePositionConfig& config, const Tensor& out) {
  fill_index_table(config, +1, out, "build_c2p_index");
}

void build_p2c_index(const RelativePositionConfig& config, const Tensor& out) {
  fill_index_table(config, -1, out, "build_p2c_index");
}

}  // namespace zt::kernels
