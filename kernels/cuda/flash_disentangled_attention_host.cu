// The flash attention's host side (kernels: flash_disentangled_attention.cu): the checks, the mask bytes,
// the positional scores the kernels read, the kernels, then (backward) Gc / Gp rounded to T and the stored
// path's positional GEMMs.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention_host.cuh"
#include "kernels/cuda/disentangled_attention.cuh"
#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/launch_common.cuh"
#include "kernels/cuda/relative_position.cuh"
#include "kernels/disentangled_attention.h"
#include "kernels/relative_position.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/step_profile.h"

namespace zt::kernels::gpu {

using namespace attention_host;  // NOLINT(google-build-using-namespace): this file is that layer's client
using cuda_detail::from_float;

const char* flash_attention_unsupported(const Tensor& q, const DisentangledAttentionConfig& config) {
  if (q.dtype() != DType::bf16 && q.dtype() != DType::f16) return "the storage dtype is not bf16 or f16";
  if (q.rank() != 3 || config.num_heads <= 0 || q.dim(2) % config.num_heads != 0)
    return "q is not [B, L, D] with D a multiple of num_heads";
  if (q.dim(2) / config.num_heads != kFlashHeadSize) return "the head size is not 64";
  if (q.dim(0) * config.num_heads > 65535) return "B * num_heads is over 65535";
  if (q.dim(1) > (int64_t{1} << 30) / kFlashTile) return "the sequence length is over the grid's limit";
  return nullptr;
}

namespace {

struct FlashRun {
  Plan plan;
  DeviceBuffer keep, c2p_scores, p2c_scores;
  RelativeIndexTables tables;
  FlashAttentionParams params;
};

// The checks, the mask bytes, the index tables and the positional scores both directions need.
FlashRun prepare_flash(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                       const Tensor& pos_query, const Tensor& attention_mask,
                       const DisentangledAttentionConfig& config, const Tensor& context,
                       const Tensor& softmax_stats, const char* op, cudaStream_t stream) {
  FlashRun run;
  run.plan = plan_attention(q, k, v, pos_key, pos_query, attention_mask, config, op);
  AttentionShape& s = run.plan.shape;
  const DType T = run.plan.dtype;
  const char* unsupported = gpu::flash_attention_unsupported(q, config);
  ZT_CHECK(unsupported == nullptr, op, ": not supported: ", unsupported);
  check_tensor(context, T, q.shape(), op, "context");
  check_tensor(softmax_stats, DType::f32, Shape{s.batch, s.heads, s.length, 2}, op, "softmax_stats");
  using cuda_detail::is_aligned16;
  ZT_CHECK(is_aligned16(q.data()) && is_aligned16(k.data()) && is_aligned16(v.data()) &&
               is_aligned16(context.data()),
           op, ": q, k, v and context must be 16-byte aligned");
  if (s.batch == 0 || s.length == 0) return run;
  const int64_t BL = s.batch * s.length;
  run.keep = make_keep(attention_mask, BL, stream);
  FlashAttentionParams& p = run.params;
  if (s.c2p || s.p2c) {
    run.tables = relative_index_tables(config.positions, s.length, stream);
    set_window(s, run.tables.window);
    if (s.c2p)
      run.c2p_scores =
          positional_scores(q, pos_key, run.tables.window_begin, s, T, "attention.c2p_scores", stream);
    if (s.p2c)
      run.p2c_scores =
          positional_scores(k, pos_query, run.tables.window_begin, s, T, "attention.p2c_scores", stream);
    p.diagonal = run.tables.diagonal;
    p.c2p = run.c2p_scores.data_as<float>();
    p.p2c = run.p2c_scores.data_as<float>();
    p.window_pitch = static_cast<int>(s.window_pitch);
    p.staged = diagonals_reach_few_rows(config.positions, s.length, kFlashTile, kFlashTile);
  }
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.keep = run.keep.data_as<uint8_t>();
  p.context = context.data();
  p.stats = softmax_stats.data_as<float>();
  set_shape_and_dropout(p, s);
  return run;
}

// out[e] = T(in[e]) over n elements.
template <typename T>
__global__ void round_to_storage_kernel(const float* __restrict__ in, T* __restrict__ out, int64_t n) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[e] = from_float<T>(in[e]);
}

}  // namespace

void flash_disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& pos_key, const Tensor& pos_query,
                                          const Tensor& attention_mask,
                                          const DisentangledAttentionConfig& config, const Tensor& context,
                                          const Tensor& softmax_stats, cudaStream_t stream) {
  constexpr const char* op = "flash_disentangled_attention_forward";
  const FlashRun run =
      prepare_flash(q, k, v, pos_key, pos_query, attention_mask, config, context, softmax_stats, op, stream);
  const AttentionShape& s = run.plan.shape;
  if (s.batch == 0 || s.length == 0) return;
  StepProfile& prof = StepProfile::global();
  prof.mark("attn.fwd.c2p_p2c_gemm");
  launch_flash_attention_forward(run.params, run.plan.dtype, stream);
  prof.mark("attn.fwd.flash");
}

void flash_disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& pos_key, const Tensor& pos_query,
                                           const Tensor& attention_mask, const Tensor& context,
                                           const Tensor& softmax_stats, const Tensor& dcontext,
                                           const DisentangledAttentionConfig& config, const Tensor& dq,
                                           const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                           const Tensor& dpos_query, cudaStream_t stream) {
  constexpr const char* op = "flash_disentangled_attention_backward";
  FlashRun run =
      prepare_flash(q, k, v, pos_key, pos_query, attention_mask, config, context, softmax_stats, op, stream);
  const AttentionShape& s = run.plan.shape;
  const DType T = run.plan.dtype;
  check_tensor(dcontext, T, q.shape(), op, "dcontext");
  check_tensor(dq, T, q.shape(), op, "dq");
  check_tensor(dk, T, q.shape(), op, "dk");
  check_tensor(dv, T, q.shape(), op, "dv");
  using cuda_detail::is_aligned16;
  ZT_CHECK(is_aligned16(dcontext.data()) && is_aligned16(dq.data()) && is_aligned16(dk.data()) &&
               is_aligned16(dv.data()),
           op, ": dcontext, dq, dk and dv must be 16-byte aligned");
  check_table_grads(s, T, pos_key, pos_query, dpos_key, dpos_query, op);
  if (s.batch == 0 || s.length == 0) return;
  StepProfile& prof = StepProfile::global();
  prof.mark("attn.bwd.c2p_p2c_gemm");

  const size_t positional_bytes = positional_elements(s) * sizeof(float);
  DeviceBuffer c2p_grad32, p2c_grad32;
  if (s.c2p) {
    c2p_grad32 = scratch_buffer(positional_bytes, "attention.c2p_grad_f32");
    ZT_CUDA_CHECK(cudaMemsetAsync(c2p_grad32.data(), 0, positional_bytes, stream));
  }
  if (s.p2c) {
    p2c_grad32 = scratch_buffer(positional_bytes, "attention.p2c_grad_f32");
    ZT_CUDA_CHECK(cudaMemsetAsync(p2c_grad32.data(), 0, positional_bytes, stream));
  }
  // flash_backward_scratch_bytes: dQ's running sum, D, then the tile order counts and the ticket (zeroed).
  const auto rows = static_cast<size_t>(s.batch * s.heads * s.length);
  const size_t order_bytes =
      flash_backward_scratch_bytes(s.batch, s.heads, s.length) - rows * 65 * sizeof(float);
  const DeviceBuffer backward_scratch =
      scratch_buffer(flash_backward_scratch_bytes(s.batch, s.heads, s.length), "attention.flash_backward");
  FlashAttentionParams& p = run.params;
  p.dcontext = dcontext.data();
  p.dq_sum = backward_scratch.data_as<float>();
  p.row_dot = p.dq_sum + rows * kFlashHeadSize;
  p.tile_order = reinterpret_cast<int32_t*>(p.row_dot + rows);
  ZT_CUDA_CHECK(cudaMemsetAsync(p.tile_order, 0, order_bytes, stream));
  p.dq = dq.data();
  p.dk = dk.data();
  p.dv = dv.data();
  p.gc = c2p_grad32.data_as<float>();
  p.gp = p2c_grad32.data_as<float>();
  launch_flash_attention_backward(p, T, stream);
  run.c2p_scores = DeviceBuffer();  // the recomputed scores are dead: their memory goes back first
  run.p2c_scores = DeviceBuffer();
  prof.mark("attn.bwd.flash");

  // Gc and Gp rounded to T once, then the positional GEMMs of the stored path.
  auto positional = [&](DeviceBuffer& grad32, const Tensor& rows, const Tensor& table, const Tensor& drows,
                        const Tensor& dtable, const char* name) {
    const int64_t n = static_cast<int64_t>(positional_elements(s));
    DeviceBuffer grad = scratch_buffer(static_cast<size_t>(n) * dtype_size(T), name);
    dispatch_storage(T, op, [&](auto tag) {
      using S = typename decltype(tag)::type;
      round_to_storage_kernel<S>
          <<<grid_for(n), kThreads, 0, stream>>>(grad32.data_as<float>(), grad.data_as<S>(), n);
      ZT_CUDA_CHECK_LAUNCH("attention_round_bucket_grad");
    });
    grad32 = DeviceBuffer();
    positional_grads({grad.data()}, rows, table, drows, dtable, run.tables.window_begin, s, T, op, stream);
  };
  if (s.c2p) positional(c2p_grad32, q, pos_key, dq, dpos_key, "attention.c2p_grad");
  if (s.p2c) positional(p2c_grad32, k, pos_query, dk, dpos_query, "attention.p2c_grad");
  prof.mark("attn.bwd.positional_gemm");
}

}  // namespace zt::kernels::gpu
