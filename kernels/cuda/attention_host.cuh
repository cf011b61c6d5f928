// The host side both GPU attention paths share (kernels/cuda/disentangled_attention.cu, the stored
// probabilities; flash_disentangled_attention_host.cu, the flash kernels): the argument checks and plan, the
// mask bytes, the positional scores C2P / P2C and the positional gradient GEMMs. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/relative_position.cuh"
#include "kernels/disentangled_attention.h"
#include "runtime/cuda_check.h"
#include "runtime/tensor.h"

namespace zt::kernels::gpu::attention_host {

constexpr int kThreads = 256;  // threads per block of the elementwise kernels

// Everything the kernels need, by value.
struct AttentionShape {
  int64_t batch = 0, length = 0, features = 0, heads = 0, head_size = 0;
  int64_t window = 0;  // W
  // W rounded up to 8: the row stride of the [N, B*L, W] positional scratch and the W-dimension of every
  // positional GEMM, which then see the padded table window (zero rows past W) and zero Gc/Gp columns past W.
  // With W itself (255 at L = 128) as a dimension and leading dimension, cuBLAS ran those GEMMs on align1
  // kernels (ncu on the H200: 64-87 us each, 8 per layer).
  int64_t window_pitch = 0;
  bool c2p = false, p2c = false;
  float inverse_scale = 1.0f;
  // Dropout: keep(e) = attention_keep(seed, site_id, e, ceil(p 2^16)) (philox.h), kept entries scaled by
  // kept_scale = 1 / (1 - p).
  bool dropout = false;
  float dropout_p = 0.0f, kept_scale = 1.0f;
  uint64_t seed = 0, site_id = 0;
};

struct Plan {
  AttentionShape shape;
  DType dtype = DType::f32;  // T, the storage dtype of q, k, v, context and their gradients
};

// The checks every entry point makes (q, k, v, mask, tables, dropout) and the shape they imply.
Plan plan_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                    const Tensor& pos_query, const Tensor& attention_mask,
                    const DisentangledAttentionConfig& config, const char* op);
void check_tensor(const Tensor& t, DType dtype, const Shape& shape, const char* op, const char* name);
// dpos_key / dpos_query (where the term is on): on the GPU, T or f32, the table's shape.
void check_table_grads(const AttentionShape& s, DType T, const Tensor& pos_key, const Tensor& pos_query,
                       const Tensor& dpos_key, const Tensor& dpos_query, const char* op);

// Whether every `diagonals` consecutive diagonals i - j (of the 2L - 1, by the host's c2p_index) reach fewer
// than `rows` table rows: the flash forward's staged slices (64, 64) and the short forward's table windows
// (127, 128) then cover every tile. True when the bucketing moves by at most one row per unit of i - j, as
// HF's log buckets and the unbucketed clamp do. Once per (bucketing, L, diagonals, rows), cached.
bool diagonals_reach_few_rows(const RelativePositionConfig& positions, int64_t length, int64_t diagonals,
                              int64_t rows);

// The kernels' shape, scale and dropout fields of p from s (FlashAttentionParams: the flash and short
// kernels).
void set_shape_and_dropout(FlashAttentionParams& p, const AttentionShape& s);

// The mask as bytes [n] (1 = kept), from i64, i32 or f32.
DeviceBuffer make_keep(const Tensor& mask, int64_t n, cudaStream_t stream);
void set_window(AttentionShape& s, int64_t window);
size_t positional_elements(const AttentionShape& s);
// Positional scores over all B*L rows of a head: rows table_w^T, [N, B*L, window_pitch] f32.
DeviceBuffer positional_scores(const Tensor& rows, const Tensor& table, int64_t window_begin,
                               const AttentionShape& s, DType T, const char* name, cudaStream_t stream);
// Gx = Gc (c2p) or Gp (p2c) in T: [N, B*L, Wp], or (band_width > 0, positional_grads_kernel only) its bands
// [N, B*L, band_width] (kernels::gathers_band_width): row (b, p) holds window rows a .. a + band_width - 1,
// a the multiple of 8 at or below p (Gc) or L - 1 - p (Gp: by_key), every other entry being zero.
struct BucketGrad {
  const void* data = nullptr;
  int64_t band_width = 0;
  bool by_key = false;
};
// d(rows) += Gx table_w and d(table_w) += Gx^T rows.
void positional_grads(const BucketGrad& grad, const Tensor& rows, const Tensor& table, const Tensor& drows,
                      const Tensor& dtable, int64_t window_begin, const AttentionShape& s, DType T,
                      const char* op, cudaStream_t stream);
// The same two products in one kernel over one read of Gx (attention_positional.cu): d(rows) += Gx table_w
// in place and the table product of each of the `slices` slices of B*L rows into partial [N, slices, Wp, d]
// f32 (for add_slice_partials). Where it applies: kernels::positional_kernel_shape (16-bit T, heads of 64,
// Wp <= 256, B*L split into more than one slice of whole 64-row tiles), 16-byte aligned operands (Gx too:
// a scratch buffer's alignment, checked at the launch) and the shared memory.
bool positional_grads_kernel_applies(const Tensor& rows, const Tensor& table, const Tensor& drows,
                                     const AttentionShape& s, DType T);
void positional_grads_kernel(const BucketGrad& grad, const Tensor& rows, const Tensor& table,
                             const Tensor& drows, float* partial, int64_t slices, int64_t window_begin,
                             const AttentionShape& s, DType T, cudaStream_t stream);

// The stored path's bucket gathers: Gc into gc (c2p) and Gp into gp (p2c), [N, B*L, window_pitch] in T,
// from G in f32 [B, N, L, L] (grad) or, where read_lowp (one-distance tables and the block kernel), from G in
// T (lowp). Summed in increasing index order (deterministic, no atomics). attention_bucket_gather.cu.
void bucket_gathers(const AttentionShape& s, DType T, const float* grad, const void* lowp, bool read_lowp,
                    void* gc, void* gp, const RelativeIndexTables& tables, const char* op,
                    cudaStream_t stream);
// Whether the gathers stage a whole G[b, h] per CTA (decided with G staged in f32, whichever it stages).
bool use_gather_block_kernel(const AttentionShape& s);

// Whether p is aligned to `bytes`.
inline bool aligned_to(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes) {
  if (bytes > (48 << 10)) {
    ZT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

unsigned int grid_for(int64_t n);  // blocks of kThreads for n items, at most 65535
GemmOperand head_operand(const void* data, DType dtype, int64_t row_offset, const AttentionShape& s);
GemmOutput head_output(void* data, DType dtype, int64_t row_offset, const AttentionShape& s);
GemmProblem head_gemm(int64_t m, int64_t n, int64_t k, DType dtype, const AttentionShape& s);

}  // namespace zt::kernels::gpu::attention_host
