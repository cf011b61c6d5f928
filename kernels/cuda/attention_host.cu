// The attention paths' shared host side (attention_host.cuh).
#include "kernels/cuda/attention_host.cuh"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/cuda/launch_common.cuh"
#include "kernels/relative_position.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu::attention_host {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;

template <typename M>
__global__ void mask_to_keep_kernel(const M* __restrict__ mask, uint8_t* __restrict__ keep, int64_t n) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < n) keep[e] = mask[e] != M(0) ? 1 : 0;
}

// The most slices attention_table_grad_slices gives.
constexpr int kMaxSlices = 16;

// dtable[window_begin + r, h*d + k] += sum over slices c (in order) of partial[h, c, r, k] (r < W of the
// [N, slices, window_pitch, d] partials), summed in f32 from 0 in slice order (the additions of the loop a
// slice at a time it replaces, in its order: the same bits). A thread owns kGroup consecutive k (a float4 of
// each slice when d % 4 == 0) and issues every slice's load before the first addition: a slice at a time,
// each addition waited out its load's L2 round trip (13.8 us for the 6.3 MB at 40 x 128 on the H100).
template <typename D, int kGroup>
__global__ void add_slice_partials_kernel(const float* __restrict__ partial, D* __restrict__ dtable,
                                          int slices, int64_t table_row, AttentionShape s) {
  const int64_t d = s.head_size, W = s.window, groups = d / kGroup, slice_stride = s.window_pitch * d;
  const int64_t total = s.heads * W * groups;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = e % groups * kGroup, r = (e / groups) % W, h = e / (groups * W);
    const float* first = partial + (h * slices * s.window_pitch + r) * d + k;
    float part[kMaxSlices][kGroup];
#pragma unroll
    for (int c = 0; c < kMaxSlices; ++c) {
      if (c >= slices) break;
      const cuda_detail::FloatSlice<float, kGroup> slice(first + c * slice_stride);
#pragma unroll
      for (int j = 0; j < kGroup; ++j) part[c][j] = slice[j];
    }
    D* out = dtable + (table_row + r) * s.features + h * d + k;
#pragma unroll
    for (int j = 0; j < kGroup; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kMaxSlices; ++c) {
        if (c >= slices) break;
        sum += part[c][j];
      }
      out[j] = from_float<D>(to_float(out[j]) + sum);
    }
  }
}

// partial [N, slices, Wp, d] f32 added into dtable's window rows in slice order (add_slice_partials_kernel).
void add_slice_partials(const float* partial, const Tensor& dtable, int64_t slices, int64_t table_row,
                        const AttentionShape& s, const char* op, cudaStream_t stream) {
  ZT_CHECK(slices <= kMaxSlices, op, ": ", slices, " table-gradient slices, at most ", kMaxSlices);
  dispatch_storage(dtable.dtype(), op, [&](auto tag) {
    using D = typename decltype(tag)::type;
    auto launch = [&](auto kernel, int64_t group) {
      kernel<<<grid_for(s.heads * s.window * s.head_size / group), kThreads, 0, stream>>>(
          partial, static_cast<D*>(dtable.data()), static_cast<int>(slices), table_row, s);
    };
    if (s.head_size % 4 == 0) {
      launch(add_slice_partials_kernel<D, 4>, 4);
    } else {
      launch(add_slice_partials_kernel<D, 1>, 1);
    }
    ZT_CUDA_CHECK_LAUNCH("attention_add_slice_partials");
  });
}

// Rows window_begin .. window_begin + W - 1 of a relative table [2k, D] (T) copied into a [window_pitch, D]
// scratch whose rows past W are zero: the operand of every positional GEMM, so their W-dimension can be the
// padded one.
DeviceBuffer padded_table_window(const Tensor& table, int64_t window_begin, const AttentionShape& s,
                                 cudaStream_t stream) {
  const size_t row_bytes = static_cast<size_t>(s.features) * dtype_size(table.dtype());
  DeviceBuffer window =
      scratch_buffer(static_cast<size_t>(s.window_pitch) * row_bytes, "attention.padded_table_window");
  ZT_CUDA_CHECK(cudaMemcpyAsync(window.data(),
                                static_cast<const char*>(table.data()) + window_begin * row_bytes,
                                static_cast<size_t>(s.window) * row_bytes, cudaMemcpyDeviceToDevice, stream));
  ZT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(window.data()) + s.window * row_bytes, 0,
                                static_cast<size_t>(s.window_pitch - s.window) * row_bytes, stream));
  return window;
}

}  // namespace

unsigned int grid_for(int64_t n) {
  const unsigned int blocks = blocks_for(n, kThreads);
  return blocks < 65535u ? blocks : 65535u;
}

// A head of a [rows, D] feature tensor: [rows, d] at column h*d, batched over heads with stride d.
GemmOperand head_operand(const void* data, DType dtype, int64_t row_offset, const AttentionShape& s) {
  const char* base =
      static_cast<const char*>(data) + row_offset * s.features * static_cast<int64_t>(dtype_size(dtype));
  return {base, s.features, s.head_size};
}

GemmOutput head_output(void* data, DType dtype, int64_t row_offset, const AttentionShape& s) {
  char* base = static_cast<char*>(data) + row_offset * s.features * static_cast<int64_t>(dtype_size(dtype));
  return {base, dtype, s.features, s.head_size};
}

// Batched over heads: C[h] = alpha op(A[h]) op(B[h]) + beta C[h].
GemmProblem head_gemm(int64_t m, int64_t n, int64_t k, DType dtype, const AttentionShape& s) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = s.heads;
  p.input_dtype = dtype;
  return p;
}

void check_tensor(const Tensor& t, DType dtype, const Shape& shape, const char* op, const char* name) {
  check_cuda_arg(t, dtype, op, name);
  ZT_CHECK(t.shape() == shape, op, ": ", name, " must be ", shape.to_string(), ", got ",
           t.shape().to_string());
}

Plan plan_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                    const Tensor& pos_query, const Tensor& attention_mask,
                    const DisentangledAttentionConfig& config, const char* op) {
  check_cuda_arg(q, op, "q");
  ZT_CHECK(is_storage_dtype(q.dtype()), op, ": q must be f32, bf16 or f16, got ", q.describe());
  ZT_CHECK(q.rank() == 3, op, ": q must be [B, L, D], got ", q.describe());
  check_tensor(k, q.dtype(), q.shape(), op, "k");
  check_tensor(v, q.dtype(), q.shape(), op, "v");
  Plan plan;
  plan.dtype = q.dtype();
  AttentionShape& s = plan.shape;
  s.batch = q.dim(0);
  s.length = q.dim(1);
  s.features = q.dim(2);
  s.heads = config.num_heads;
  ZT_CHECK(s.heads > 0 && s.features % s.heads == 0, op, ": hidden size ", s.features,
           " is not a multiple of num_heads ", s.heads);
  s.head_size = s.features / s.heads;
  ZT_CHECK(config.dropout_p >= 0.0f && config.dropout_p < 1.0f, op, ": dropout_p must be in [0, 1), got ",
           config.dropout_p);
  s.inverse_scale = 1.0f / disentangled_attention_scale(s.head_size, config);
  s.c2p = config.c2p;
  s.p2c = config.p2c;
  s.dropout = config.dropout_p > 0.0f;
  s.dropout_p = config.dropout_p;
  s.kept_scale = 1.0f / (1.0f - config.dropout_p);
  s.seed = config.seed;
  s.site_id = config.site_id;

  check_cuda_arg(attention_mask, op, "attention_mask");
  ZT_CHECK(attention_mask.shape() == (Shape{s.batch, s.length}), op,
           ": attention_mask must be [B, L] = ", Shape{s.batch, s.length}.to_string(), ", got ",
           attention_mask.shape().to_string());
  ZT_CHECK(attention_mask.dtype() == DType::i64 || attention_mask.dtype() == DType::i32 ||
               attention_mask.dtype() == DType::f32,
           op, ": attention_mask must be i64, i32 or f32, got ", attention_mask.describe());
  if (s.c2p || s.p2c) {
    const int64_t span = config.positions.att_span();
    ZT_CHECK(span > 0, op, ": the relative-position span must be positive");
    if (s.c2p) check_tensor(pos_key, q.dtype(), Shape{2 * span, s.features}, op, "pos_key");
    if (s.p2c) check_tensor(pos_query, q.dtype(), Shape{2 * span, s.features}, op, "pos_query");
  }
  return plan;
}

DeviceBuffer make_keep(const Tensor& mask, int64_t n, cudaStream_t stream) {
  DeviceBuffer keep = scratch_buffer(static_cast<size_t>(n), "attention.keep");
  const unsigned int grid = blocks_for(n, kThreads);
  switch (mask.dtype()) {
    case DType::i64:
      mask_to_keep_kernel<int64_t>
          <<<grid, kThreads, 0, stream>>>(mask.data_as<int64_t>(), keep.data_as<uint8_t>(), n);
      break;
    case DType::i32:
      mask_to_keep_kernel<int32_t>
          <<<grid, kThreads, 0, stream>>>(mask.data_as<int32_t>(), keep.data_as<uint8_t>(), n);
      break;
    default:
      mask_to_keep_kernel<float>
          <<<grid, kThreads, 0, stream>>>(mask.data_as<float>(), keep.data_as<uint8_t>(), n);
      break;
  }
  ZT_CUDA_CHECK_LAUNCH("attention_mask_to_keep");
  return keep;
}

void set_window(AttentionShape& s, int64_t window) {
  s.window = window;
  s.window_pitch = (window + 7) / 8 * 8;
}

size_t positional_elements(const AttentionShape& s) {
  return static_cast<size_t>(s.heads * s.batch * s.length * s.window_pitch);
}

// Positional scores over all B*L rows of a head: rows table_w^T, [N, B*L, window_pitch] f32 (C2P = Q PK_w^T,
// P2C = K PQ_w^T).
DeviceBuffer positional_scores(const Tensor& rows, const Tensor& table, int64_t window_begin,
                               const AttentionShape& s, DType T, const char* name, cudaStream_t stream) {
  const int64_t BL = s.batch * s.length;
  DeviceBuffer out = scratch_buffer(positional_elements(s) * sizeof(float), name);
  const DeviceBuffer window = padded_table_window(table, window_begin, s, stream);
  GemmProblem p = head_gemm(BL, s.window_pitch, s.head_size, T, s);
  p.a = head_operand(rows.data(), T, 0, s);
  p.b = head_operand(window.data(), T, 0, s);
  p.transpose_b = true;
  p.c = {out.data(), DType::f32, s.window_pitch, BL * s.window_pitch};
  gemm(p, stream);
  return out;
}

// The positional terms of the backward, shared by every path: with Gx = Gc (c2p) or Gp (p2c) in T,
// d(rows) += Gx table_w and d(table_w) += Gx^T rows.
void positional_grads(const BucketGrad& grad, const Tensor& rows, const Tensor& table, const Tensor& drows,
                      const Tensor& dtable, int64_t window_begin, const AttentionShape& s, DType T,
                      const char* op, cudaStream_t stream) {
  const int64_t table_row = window_begin, BL = s.batch * s.length, d = s.head_size;
  // d(table_w) += Gx^T rows: per head a [W, d] output (255 x 64 at L = 128) summed over k = B*L rows. As
  // one GEMM per head that is 24 heads x a few output tiles for 132 SMs: the two tables took 9.9 ms of the
  // 91.5 ms bs-40 step (H200). So k is split into slices, partial products go to f32 scratch
  // [N, slices, Wp, d], and one kernel adds the slices in order into dtable (deterministic).
  const int64_t slices = attention_table_grad_slices(BL);
  auto partials = [&] {
    return scratch_buffer(static_cast<size_t>(s.heads * slices * s.window_pitch * d) * sizeof(float),
                          "attention.table_grad_partials");
  };
  const bool kernel = positional_grads_kernel_applies(rows, table, drows, s, T);
  ZT_CHECK(kernel || grad.band_width == 0, op, ": bucket gradients in bands need the positional kernel");
  if (kernel) {
    const DeviceBuffer partial = partials();
    positional_grads_kernel(grad, rows, table, drows, partial.data_as<float>(), slices, table_row, s, T,
                            stream);
    add_slice_partials(partial.data_as<float>(), dtable, slices, table_row, s, op, stream);
    return;
  }
  const DeviceBuffer window = padded_table_window(table, table_row, s, stream);
  GemmProblem into_rows = head_gemm(BL, d, s.window_pitch, T, s);
  into_rows.a = {grad.data, s.window_pitch, BL * s.window_pitch};
  into_rows.b = head_operand(window.data(), T, 0, s);
  into_rows.c = head_output(drows.data(), T, 0, s);
  into_rows.beta = 1.0f;
  gemm(into_rows, stream);
  if (slices == 1) {
    GemmProblem into_table = head_gemm(s.window, d, BL, T, s);
    into_table.a = {grad.data, s.window_pitch, BL * s.window_pitch};
    into_table.transpose_a = true;
    into_table.b = head_operand(rows.data(), T, 0, s);
    into_table.c = head_output(dtable.data(), dtable.dtype(), table_row, s);
    into_table.beta = 1.0f;
    gemm(into_table, stream);
    return;
  }
  // The k slices as the inner level of a two-level batch (outer: heads).
  const int64_t slice_rows = BL / slices;
  const DeviceBuffer partial = partials();
  GemmProblem into_partials = head_gemm(s.window_pitch, d, slice_rows, T, s);
  into_partials.batch = slices;  // inner: k slices of one head
  into_partials.outer = s.heads;
  into_partials.a = {grad.data, s.window_pitch, slice_rows * s.window_pitch, BL * s.window_pitch};
  into_partials.transpose_a = true;
  into_partials.b = {rows.data(), s.features, slice_rows * s.features, s.head_size};
  into_partials.c = {partial.data(), DType::f32, d, s.window_pitch * d, slices * s.window_pitch * d};
  gemm(into_partials, stream);
  add_slice_partials(partial.data_as<float>(), dtable, slices, table_row, s, op, stream);
}

void check_table_grads(const AttentionShape& s, DType T, const Tensor& pos_key, const Tensor& pos_query,
                       const Tensor& dpos_key, const Tensor& dpos_query, const char* op) {
  auto check = [&](const Tensor& grad, const Tensor& table, const char* name) {
    check_cuda_arg(grad, op, name);
    ZT_CHECK(grad.dtype() == T || grad.dtype() == DType::f32, op, ": ", name, " must be ", dtype_name(T),
             " or f32, got ", grad.describe());
    ZT_CHECK(grad.shape() == table.shape(), op, ": ", name, " must be ", table.shape().to_string(), ", got ",
             grad.shape().to_string());
  };
  if (s.c2p) check(dpos_key, pos_key, "dpos_key");
  if (s.p2c) check(dpos_query, pos_query, "dpos_query");
}

void set_shape_and_dropout(FlashAttentionParams& p, const AttentionShape& s) {
  p.batch = static_cast<int>(s.batch);
  p.length = static_cast<int>(s.length);
  p.heads = static_cast<int>(s.heads);
  p.features = static_cast<int>(s.features);
  p.inverse_scale = s.inverse_scale;
  p.dropout = s.dropout;
  p.dropout_p = s.dropout_p;
  p.kept_scale = s.kept_scale;
  p.seed = s.seed;
  p.site_id = s.site_id;
}

bool diagonals_reach_few_rows(const RelativePositionConfig& positions, int64_t length, int64_t diagonals,
                              int64_t rows) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  static std::mutex mutex;
  static auto* cache = new std::map<Key, bool>;  // never destroyed, like the index-table cache
  const std::lock_guard<std::mutex> lock(mutex);
  const Key key{positions.position_buckets, positions.max_relative_positions, length, diagonals, rows};
  if (const auto it = cache->find(key); it != cache->end()) return it->second;
  const int64_t all = 2 * length - 1;
  std::vector<int64_t> row(static_cast<size_t>(all));
  for (int64_t t = 0; t < all; ++t) row[static_cast<size_t>(t)] = c2p_index(t - (length - 1), 0, positions);
  bool covers = true;
  for (int64_t t = 0; t < all && covers; ++t) {
    const int64_t last = std::min(t + diagonals - 1, all - 1);
    covers = row[static_cast<size_t>(last)] - row[static_cast<size_t>(t)] < rows;
  }
  cache->emplace(key, covers);
  return covers;
}

}  // namespace zt::kernels::gpu::attention_host
