// Disentangled attention on the GPU (formulas in kernels/disentangled_attention.h): batched GEMMs
// for every product, and three small kernels — the score/softmax/dropout kernel (32-query tiles), its
// backward, and the bucket gathers Gc/Gp. Every product is a GEMM, every row reduction is a warp.
//
// Layouts. Head h of a [B, L, D] feature tensor is the [L, d] matrix at column h*d with row stride D, so
//   - the L x L products (Q K^T, P~ V, ...) are one two-level batched GEMM over every (b, h)
//     (kernels/cuda/gemm.h: outer b with stride L*D, inner h with stride d): one launch filling the GPU, not
//     B launches of N blocks;
//   - the positional products see all B*L rows of a head at once (row stride D), so they are batched over
//     heads only: C2P = Q PK^T, P2C = K PQ^T, dQ += Gc PK, dPK += Gc^T Q, ... are one call each, with the
//     per-head scratch laid out head-major [N, B*L, W] (W = window of table rows c(i,j) reaches; rows
//     padded to window_pitch elements).
//
// Numerics. Scores, softmax and every reduction are f32 whatever the storage dtype T (reference §12.3).
// The saved probabilities P are stored in T (as HF keeps attention_probs in the model dtype): the softmax
// runs in f32 registers and each P_j is rounded to T once on store; backward converts P back to f32 in
// registers. For f32 storage the Q K^T product is written straight into the probs output and finished in
// place by the row kernel; for 16-bit storage it goes to an f32 score scratch (scores are not rounded).
// 16-bit GEMM inputs (P~ for the context, G, Gc, Gp for the gradients) are rounded to T once; P~ is
// computed from the stored P, P~ = T(P * factor), in forward and backward alike, so dV = P~^T dC uses the
// very P~ the forward multiplied by V.
//
// Determinism. No atomics: Gc[i,r] and Gp[j,r] are per-output gathers over the contiguous range of i - j
// that falls in bucket r (bucket(i - j) is monotone), summed in index order.
//
// Scratch per call (from the capped device allocator, released at return), with P = B*N*L*L elements:
//   forward:  scores in f32, 4*P bytes (16-bit T only; f32 finishes them in place in probs); P~ in T,
//             P * sizeof(T) (dropout only: without it P~ = P, read from probs); C2P and P2C, 4*N*B*L*Wp
//             bytes each (Wp = window_pitch, W rounded up to 8); the padded table windows, Wp*D*sizeof(T)
//   backward: dP/G in f32, 4*P bytes; P~ then G in T, P * sizeof(T) (skipped for f32 without dropout, which
//             uses the f32 buffers directly; without dropout P~ is probs itself); Gc and Gp,
//             N*B*L*Wp*sizeof(T) each. The short backward (L <= 128, short_disentangled_attention.cu) has
//             no f32 dP/G where it gathers Gc and Gp itself (one distance a bucket)
//   plus the mask as bytes [B, L]; the index tables (int32, 2L - 1 + 2W) are cached per length.
//
// The bucket gathers are in attention_bucket_gather.cu. The flash path (no [B, N, L, L] buffers) is
// flash_disentangled_attention*.cu; the host side both share is
// attention_host.cuh.
#include "kernels/cuda/disentangled_attention.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention_host.cuh"
#include "kernels/cuda/flash_disentangled_attention.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/relative_position.cuh"
#include "kernels/philox.h"
#include "runtime/check.h"
#include "runtime/cuda_check.h"
#include "runtime/env_switch.h"
#include "runtime/step_profile.h"

namespace zt::kernels::gpu {
namespace {

using namespace attention_host;  // NOLINT(google-build-using-namespace): the shared host side

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The dropout multipliers of P[row, j0 .. j0 + 3] (row = (b N + h) L + i, j0 % 4 == 0): half of the Philox
// block of philox.h's attention draw (rows padded to 8 keys, so the four are in one block whatever L), as
// the CPU computes them; a thread covering 4 consecutive keys runs the 10 rounds once. Keys past L (the
// row's last group) get multipliers nobody reads.
__device__ __forceinline__ void dropout_factors4(const AttentionShape& s, int64_t row, int j0,
                                                 float factor[4]) {
  const uint64_t e = static_cast<uint64_t>(row) * attention_row_pitch(static_cast<uint64_t>(s.length)) +
                     static_cast<uint64_t>(j0);
  const PhiloxCounter block = philox_block(s.seed, s.site_id, e >> 3);
  const uint32_t bits = attention_keep_bits(block, attention_keep_threshold(s.dropout_p)) >> (e & 4);
#pragma unroll
  for (int q = 0; q < 4; ++q) factor[q] = (bits >> q) & 1u ? s.kept_scale : 0.0f;
}

constexpr float kMasked = -3.40282346638528859811704183484516925e+38f;  // finfo(f32).min
constexpr int kSoftmaxTileRows = 32;  // query rows per CTA of the forward softmax
constexpr int kMaxRowChunks = 8;      // rows held in registers: L <= 128 * kMaxRowChunks
static_assert(kStoredAttentionMaxLength == 128 * kMaxRowChunks);

// Four consecutive elements of T as one access (a lane's keys 4 lane + q of a chunk): one 16-byte f32 load
// instead of four 4-byte ones, one 8-byte store of P instead of four 2-byte ones. Used where the row kernels'
// `vector_rows` holds (L % 4 == 0 and the buffers aligned to a pack), so j0 = 128 c + 4 lane < L implies
// j0 + 3 < L; the same values either way.
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};
template <typename T>
__device__ __forceinline__ Pack4<T> load4(const T* p) {
  return *reinterpret_cast<const Pack4<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store4(T* p, const Pack4<T>& pack) {
  *reinterpret_cast<Pack4<T>*>(p) = pack;
}

// Calls f(std::integral_constant<int, C>) with C in {1, 2, 4, 8}, the fewest 128-key chunks that hold L keys.
template <typename F>
void dispatch_row_chunks(int64_t length, F&& f) {
  if (length <= 128) return f(std::integral_constant<int, 1>{});
  if (length <= 256) return f(std::integral_constant<int, 2>{});
  if (length <= 512) return f(std::integral_constant<int, 4>{});
  return f(std::integral_constant<int, kMaxRowChunks>{});
}

// Forward softmax: one CTA per (b, h, tile of 32 query rows), a warp per row, the row's scores in registers
// (lane: keys 128 c + 4 lane + q, q < 4, c < kChunks, so one Philox block serves a lane's 4 keys).
// In: scores row = Q_i . K_j (the content GEMM's output, f32), c2p / p2c [N, B*L, window_pitch] f32,
// diagonal index table. Out: probs row = P in T and, when given, dropped row = P~ in T.
//   a_j = ((Q_i.K_j + C2P[i, c(i,j)]) + P2C[j, c(i,j)]) / s, masked to finfo.min unless m_i m_j,
//   P = T(softmax(a)) (a fully masked row is uniform), P~_j = T(P_j * factor(e_j)).
// For f32, scores and probs are the same buffer (no __restrict__ on them): each lane reads its keys' scores
// before it writes the same keys' P, and no other lane touches them.
// P2C[j, c(i,j)] is a skew gather across keys (rows window_pitch floats apart: a 32-byte sector per key when
// a warp reads it along j, the largest cost of the previous row-per-warp kernel). For a tile's rows
// i0 .. i0 + 31 and a key j the buckets c(i, j) are 32 consecutive (monotone) entries of P2C row j, so the
// CTA first stages p2c_tile[t][j] = P2C[j, c(i0 + t, j)] with lanes along t (coalesced), then every row
// reads its P2C terms from shared memory.
// kWarps warps a CTA (each takes every kWarps-th row of the tile): 4 at L <= 128; longer rows make the slab
// [32, L + 1] f32 (33-65 KiB) the limit on CTAs per SM, and with 4 warps a CTA an SM then held 12 warps at
// L 512 — too few loads in flight (770 us per layer at B 8, L 512 on the H200, ~4x its HBM time), hence
// kSoftmaxWideWarps there. vector_rows: Pack4 accesses (see Pack4).
constexpr int kSoftmaxWideWarps = 16;
template <int kChunks>
constexpr int softmax_warps() {
  return kChunks == 1 ? kWarpsPerBlock : kSoftmaxWideWarps;
}
template <typename T, int kChunks, int kWarps>
__global__ void __launch_bounds__(kWarps * 32)
    attention_softmax_kernel(const float* scores, T* probs, T* __restrict__ dropped,
                             const float* __restrict__ c2p, const float* __restrict__ p2c,
                             const int32_t* __restrict__ diagonal, const uint8_t* __restrict__ keep,
                             AttentionShape s, bool vector_rows) {
  // The diagonal index table stays in global memory (L1-resident: 2 L - 1 ints a block). Staging it in shared
  // memory, with the P2C loop unrolled 4x, measured slower (PERFORMANCE.md, "The split f32 master").
  extern __shared__ float p2c_tile[];  // [kSoftmaxTileRows, L + 1]
  const int L = static_cast<int>(s.length), pitch = L + 1;
  const int64_t window_pitch = s.window_pitch;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int i0 = static_cast<int>(blockIdx.x) * kSoftmaxTileRows;
  const int64_t bh = blockIdx.y, h = bh % s.heads, b = bh / s.heads;
  const int64_t head_rows = (h * s.batch + b) * L;  // row (b, 0) of head h in the positional scratch
  if (s.p2c) {
    const int i = i0 + lane;
    for (int j = warp; j < L; j += kWarps) {
      if (i < L) p2c_tile[lane * pitch + j] = p2c[(head_rows + j) * window_pitch + diagonal[i - j + L - 1]];
    }
    __syncthreads();
  }
  const uint8_t* key_keep = keep + b * L;
  for (int t = warp; t < kSoftmaxTileRows && i0 + t < L; t += kWarps) {
    const int i = i0 + t;
    const int64_t row = bh * L + i;
    const float* a_row = scores + row * L;
    T* p = probs + row * L;
    const float* c2p_row = c2p + (head_rows + i) * window_pitch;
    const bool query_kept = key_keep[i] != 0;
    float x[kChunks][4];
    float row_max = kMasked;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int j0 = 128 * c + 4 * lane;
      float qk[4];
      if (vector_rows && j0 < L) {
        const float4 four = *reinterpret_cast<const float4*>(a_row + j0);
        qk[0] = four.x, qk[1] = four.y, qk[2] = four.z, qk[3] = four.w;
      } else {
#pragma unroll
        for (int q = 0; q < 4; ++q) qk[q] = j0 + q < L ? a_row[j0 + q] : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = j0 + q;
        x[c][q] = kMasked;
        if (j >= L) continue;
        float a = qk[q];
        if (s.c2p) a += c2p_row[diagonal[i - j + L - 1]];
        if (s.p2c) a += p2c_tile[t * pitch + j];
        a *= s.inverse_scale;
        x[c][q] = (query_kept && key_keep[j]) ? a : kMasked;
        row_max = fmaxf(row_max, x[c][q]);
      }
    }
    row_max = warp_max(row_max);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = 128 * c + 4 * lane + q;
        x[c][q] = j < L ? expf(x[c][q] - row_max) : 0.0f;
        sum += x[c][q];
      }
    }
    const float inverse = 1.0f / warp_sum(sum);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int j0 = 128 * c + 4 * lane;
      if (j0 >= L) break;
      float factor[4] = {1.0f, 1.0f, 1.0f, 1.0f};
      if (dropped != nullptr && s.dropout) dropout_factors4(s, row, j0, factor);
      if (vector_rows) {
        Pack4<T> prob, drop;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          prob.v[q] = from_float<T>(x[c][q] * inverse);  // the one rounding of P
          drop.v[q] = from_float<T>(to_float(prob.v[q]) * factor[q]);
        }
        store4(p + j0, prob);
        if (dropped != nullptr) store4(dropped + row * L + j0, drop);
        continue;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = j0 + q;
        if (j >= L) break;
        const T prob = from_float<T>(x[c][q] * inverse);  // the one rounding of P
        p[j] = prob;
        if (dropped != nullptr) dropped[row * L + j] = from_float<T>(to_float(prob) * factor[q]);
      }
    }
  }
}

// One warp per row (b, h, i), the row in registers (lane: keys 128 c + 4 lane + q, as the forward). In: grad
// row = dP~ = dC_i . V_j (f32), probs row P (in T, read as f32). Out: G, in f32 over grad (write_f32) and,
// when grad_lowp is given, in T; with dropout and `dropped` given, P~ in T for dV = P~^T dC:
//   dP_j = factor_j dP~_j,  G_j = m_i m_j ? P_j (dP_j - sum_{k kept} P_k dP_k) / s : 0,
//   P~_j = T(P_j factor_j)   (every key, masked or not: the forward's dropped row, from the stored P)
// P~ comes from the factors the row needs anyway: a separate pass over P ran the Philox rounds a second time
// (34 us per layer at bs 40, SM-bound). write_f32 false: nothing reads G in f32 after this kernel (16-bit
// storage, where the GEMMs read G in T, and bucket gathers that read G in T too), so it is not stored.
template <typename T, int kChunks>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    attention_softmax_backward_kernel(float* __restrict__ grad, T* __restrict__ grad_lowp,
                                      T* __restrict__ dropped, bool write_f32, const T* __restrict__ probs,
                                      const uint8_t* __restrict__ keep, AttentionShape s, bool vector_rows) {
  const int64_t rows = s.batch * s.heads * s.length;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int L = static_cast<int>(s.length);
  const int i = static_cast<int>(row % L);
  const int64_t b = row / L / s.heads;
  const bool query_kept = keep[b * L + i] != 0;
  const uint8_t* key_keep = keep + b * L;
  float* g = grad + row * L;
  const T* p = probs + row * L;

  float dp[kChunks][4], prob[kChunks][4];
  float weighted = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int j0 = 128 * c + 4 * lane;
    float factor[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    if (s.dropout && j0 < L) dropout_factors4(s, row, j0, factor);
    float stored4[4], grad4[4];
    if (vector_rows && j0 < L) {
      const Pack4<T> pack = load4(p + j0);
      const float4 four = *reinterpret_cast<const float4*>(g + j0);
#pragma unroll
      for (int q = 0; q < 4; ++q) stored4[q] = to_float(pack.v[q]);
      grad4[0] = four.x, grad4[1] = four.y, grad4[2] = four.z, grad4[3] = four.w;
      if (dropped != nullptr) {
        Pack4<T> drop;
#pragma unroll
        for (int q = 0; q < 4; ++q) drop.v[q] = from_float<T>(stored4[q] * factor[q]);
        store4(dropped + row * L + j0, drop);
      }
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int j = j0 + q;
        stored4[q] = j < L ? to_float(p[j]) : 0.0f;
        grad4[q] = j < L ? g[j] : 0.0f;
        if (dropped != nullptr && j < L) dropped[row * L + j] = from_float<T>(stored4[q] * factor[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = j0 + q;
      const bool kept = j < L && query_kept && key_keep[j];
      const float stored = stored4[q];
      dp[c][q] = j < L ? grad4[q] * factor[q] : 0.0f;
      prob[c][q] = kept ? stored : 0.0f;  // masked keys drop out of the sum
      if (kept) weighted += prob[c][q] * dp[c][q];
    }
  }
  weighted = warp_sum(weighted);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int j0 = 128 * c + 4 * lane;
    if (vector_rows) {
      if (j0 >= L) break;
      float value[4];
      Pack4<T> low;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const bool kept = query_kept && key_keep[j0 + q];
        value[q] = kept ? prob[c][q] * (dp[c][q] - weighted) * s.inverse_scale : 0.0f;
        low.v[q] = from_float<T>(value[q]);
      }
      if (write_f32) *reinterpret_cast<float4*>(g + j0) = make_float4(value[0], value[1], value[2], value[3]);
      if (grad_lowp != nullptr) store4(grad_lowp + row * L + j0, low);
      continue;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int j = j0 + q;
      if (j >= L) break;
      const bool kept = query_kept && key_keep[j];
      const float value = kept ? prob[c][q] * (dp[c][q] - weighted) * s.inverse_scale : 0.0f;
      if (write_f32) g[j] = value;
      if (grad_lowp != nullptr) grad_lowp[row * L + j] = from_float<T>(value);
    }
  }
}

// The row kernels run one warp per score row (b, h, i), kWarpsPerBlock rows per block of
// kWarpsPerBlock * 32 threads: the grid covers B*N*L rows, kWarpsPerBlock at a time.
unsigned int row_grid(const AttentionShape& s) {
  return blocks_for(s.batch * s.heads * s.length, kWarpsPerBlock);
}

// The per-(batch row, head) [L, d] blocks of a [B, L, D] tensor: outer over b (stride L*D), batch over h.
GemmOperand head_blocks(const void* data, DType dtype, const AttentionShape& s) {
  GemmOperand op = head_operand(data, dtype, 0, s);
  op.outer_stride = s.length * s.features;
  return op;
}
GemmOutput head_blocks_out(void* data, DType dtype, const AttentionShape& s) {
  GemmOutput out = head_output(data, dtype, 0, s);
  out.outer_stride = s.length * s.features;
  return out;
}

// The [L, L] blocks of a [B, N, L, L] tensor in the same (b, h) order.
GemmOperand score_blocks(const void* data, const AttentionShape& s) {
  const int64_t block = s.length * s.length;
  return {data, s.length, block, s.heads * block};
}
GemmOutput score_blocks_out(void* data, DType dtype, const AttentionShape& s) {
  const int64_t block = s.length * s.length;
  return {data, dtype, s.length, block, s.heads * block};
}

// Batched over every (b, h): one GEMM call where a loop over b would issue B small ones.
GemmProblem block_gemm(int64_t m, int64_t n, int64_t k, DType dtype, const AttentionShape& s) {
  GemmProblem p = head_gemm(m, n, k, dtype, s);
  p.outer = s.batch;
  return p;
}

// probs [B, N, L, L] is stored in T, the storage dtype of q, k, v (the CPU reference keeps it f32).
void check_probs(const Tensor& probs, DType storage, const AttentionShape& s, const char* op) {
  ZT_CHECK(s.length <= kStoredAttentionMaxLength, op, ": sequence length ", s.length,
           " is over the stored-probabilities GPU attention's limit of ", kStoredAttentionMaxLength,
           " (the softmax kernels hold a score row in registers; the flash attention has no limit)");
  ZT_CHECK(!probs.defined() || probs.dtype() == storage, op, ": probs must be ", dtype_name(storage),
           " on the GPU (the storage dtype of q, k, v), got ", probs.describe());
  check_tensor(probs, storage, Shape{s.batch, s.heads, s.length, s.length}, op, "probs");
}

size_t probs_elements(const AttentionShape& s) {
  return static_cast<size_t>(s.batch * s.heads * s.length * s.length);
}

// Whether the forward runs as one kernel (short_disentangled_attention.cu): 16-bit storage, heads of 64,
// L <= 128, its 16-byte copies aligned, and the table rows its windows hold enough.
bool short_forward_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                           const Tensor& pos_query, const Tensor& context, const Tensor& probs,
                           const DisentangledAttentionConfig& config, const AttentionShape& s, DType T) {
  using cuda_detail::is_aligned16;
  if (!short_attention_forward_shape(T, s.head_size, s.length)) return false;
  if (s.batch * s.heads > 65535 || !aligned_to(probs.data(), 4)) return false;
  if (!is_aligned16(q.data()) || !is_aligned16(k.data()) || !is_aligned16(v.data()) ||
      !is_aligned16(context.data()))
    return false;
  if (s.c2p && !is_aligned16(pos_key.data())) return false;
  if (s.p2c && !is_aligned16(pos_query.data())) return false;
  // A key tile's 127 diagonals within the 128 window rows its products cover, the CTA's 191 within its 192.
  return !(s.c2p || s.p2c) ||
         (diagonals_reach_few_rows(config.positions, s.length, 2 * kFlashTile - 1, 2 * kFlashTile) &&
          diagonals_reach_few_rows(config.positions, s.length, 3 * kFlashTile - 1, 3 * kFlashTile));
}

}  // namespace

bool short_attention_forward_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const DisentangledAttentionConfig& config, const Tensor& context,
                                     const Tensor& probs) {
  const Plan plan =
      plan_attention(q, k, v, pos_key, pos_query, attention_mask, config, "short_attention_forward_applies");
  return short_forward_applies(q, k, v, pos_key, pos_query, context, probs, config, plan.shape, plan.dtype);
}

void disentangled_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                    const Tensor& pos_query, const Tensor& attention_mask,
                                    const DisentangledAttentionConfig& config, const Tensor& context,
                                    const Tensor& probs, cudaStream_t stream) {
  constexpr const char* op = "disentangled_attention_forward";
  Plan plan = plan_attention(q, k, v, pos_key, pos_query, attention_mask, config, op);
  AttentionShape& s = plan.shape;
  const DType T = plan.dtype;
  check_tensor(context, T, q.shape(), op, "context");
  check_probs(probs, T, s, op);
  if (s.batch == 0 || s.length == 0 || s.features == 0) return;
  const int64_t L = s.length, d = s.head_size, BL = s.batch * s.length;

  const DeviceBuffer keep = make_keep(attention_mask, BL, stream);
  RelativeIndexTables tables;
  if (s.c2p || s.p2c) {
    tables = relative_index_tables(config.positions, L, stream);
    set_window(s, tables.window);
  }

  StepProfile& prof = StepProfile::global();
  if (short_forward_applies(q, k, v, pos_key, pos_query, context, probs, config, s, T)) {
    FlashAttentionParams p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.keep = keep.data_as<uint8_t>();
    p.context = context.data();
    p.probs = probs.data();
    if (s.c2p || s.p2c) {
      p.diagonal = tables.diagonal;
      p.window_begin = static_cast<int>(tables.window_begin);
      p.table_rows = static_cast<int>((s.c2p ? pos_key : pos_query).dim(0));  // both tables' [2S, D]
    }
    if (s.c2p) p.pos_key = pos_key.data();
    if (s.p2c) p.pos_query = pos_query.data();
    set_shape_and_dropout(p, s);
    launch_short_attention_forward(p, T, stream);
    prof.mark("attn.fwd.short");
    return;
  }

  // Content scores Q K^T in f32, one call batched over every (b, h): for f32 storage straight into probs
  // (finished in place by the softmax kernel), for 16-bit storage into an f32 scratch, so the scores are
  // never rounded to T (only P is, once).
  const bool scores_in_probs = T == DType::f32;
  DeviceBuffer score_scratch;
  if (!scores_in_probs)
    score_scratch = scratch_buffer(probs_elements(s) * sizeof(float), "attention.content_scores");
  float* scores_data = scores_in_probs ? probs.data_as<float>() : score_scratch.data_as<float>();
  {
    GemmProblem p = block_gemm(L, L, d, T, s);
    p.a = head_blocks(q.data(), T, s);
    p.b = head_blocks(k.data(), T, s);
    p.transpose_b = true;
    p.c = score_blocks_out(scores_data, DType::f32, s);
    gemm(p, stream);
  }
  // Sub-segments of the model's attention segment (no-ops unless profiling, runtime/step_profile.h).
  prof.mark("attn.fwd.qk_gemm");
  // Positional scores over all B*L rows of a head: C2P = Q PK_w^T, P2C = K PQ_w^T, [N, B*L, W] f32.
  DeviceBuffer c2p_scores, p2c_scores;
  if (s.c2p)
    c2p_scores = positional_scores(q, pos_key, tables.window_begin, s, T, "attention.c2p_scores", stream);
  if (s.p2c)
    p2c_scores = positional_scores(k, pos_query, tables.window_begin, s, T, "attention.p2c_scores", stream);
  prof.mark("attn.fwd.c2p_p2c_gemm");

  // P~ in T for the context GEMM; without dropout P~ = P, read from probs (already in T).
  const bool dropped_is_probs = !s.dropout;
  DeviceBuffer dropped;
  if (!dropped_is_probs)
    dropped = scratch_buffer(probs_elements(s) * dtype_size(T), "attention.dropped_probs");
  dispatch_storage(T, op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_row_chunks(L, [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value, kWarps = softmax_warps<kChunks>();
      const auto kernel = attention_softmax_kernel<S, kChunks, kWarps>;
      const size_t shared = s.p2c ? static_cast<size_t>(kSoftmaxTileRows * (L + 1)) * sizeof(float) : 0;
      allow_shared_bytes(kernel, shared);
      const dim3 grid(static_cast<unsigned>((L + kSoftmaxTileRows - 1) / kSoftmaxTileRows),
                      static_cast<unsigned>(s.batch * s.heads));
      const bool vector_rows = L % 4 == 0 && aligned_to(scores_data, 16) &&
                               aligned_to(probs.data(), 4 * sizeof(S)) &&
                               (dropped_is_probs || aligned_to(dropped.data(), 4 * sizeof(S)));
      kernel<<<grid, kWarps * 32, shared, stream>>>(scores_data, static_cast<S*>(probs.data()),
                                                    dropped_is_probs ? nullptr : dropped.data_as<S>(),
                                                    c2p_scores.data_as<float>(), p2c_scores.data_as<float>(),
                                                    tables.diagonal, keep.data_as<uint8_t>(), s, vector_rows);
      ZT_CUDA_CHECK_LAUNCH("attention_softmax");
    });
  });
  prof.mark("attn.fwd.softmax");

  // context = P~ V for every (b, h) in one call.
  const void* p_tilde = dropped_is_probs ? static_cast<const void*>(probs.data()) : dropped.data();
  {
    GemmProblem p = block_gemm(L, d, L, T, s);
    p.a = score_blocks(p_tilde, s);
    p.b = head_blocks(v.data(), T, s);
    p.c = head_blocks_out(context.data(), T, s);
    gemm(p, stream);
  }
  prof.mark("attn.fwd.pv_gemm");
}

namespace {

// dV = P~^T dC for every (b, h) in one call (P~ the dropped probabilities, or P without dropout).
void value_grad_product(const void* p_tilde, const Tensor& dcontext, const Tensor& dv,
                        const AttentionShape& s, DType T, cudaStream_t stream) {
  const int64_t L = s.length, d = s.head_size;
  GemmProblem dv_gemm = block_gemm(L, d, L, T, s);
  dv_gemm.a = score_blocks(p_tilde, s);
  dv_gemm.transpose_a = true;
  dv_gemm.b = head_blocks(dcontext.data(), T, s);
  dv_gemm.c = head_blocks_out(dv.data(), T, s);
  gemm(dv_gemm, stream);
  StepProfile::global().mark("attn.bwd.dv_gemm");
}

// dQ = G K and dK = G^T Q from G (in T, or the f32 G for f32 storage), for every (b, h) in one call each.
void score_grad_products(const Tensor& q, const Tensor& k, const void* g, const Tensor& dq, const Tensor& dk,
                         const AttentionShape& s, DType T, cudaStream_t stream) {
  const int64_t L = s.length, d = s.head_size;
  GemmProblem dq_gemm = block_gemm(L, d, L, T, s);
  dq_gemm.a = score_blocks(g, s);
  dq_gemm.b = head_blocks(k.data(), T, s);
  dq_gemm.c = head_blocks_out(dq.data(), T, s);
  gemm(dq_gemm, stream);
  GemmProblem dk_gemm = dq_gemm;
  dk_gemm.transpose_a = true;
  dk_gemm.b = head_blocks(q.data(), T, s);
  dk_gemm.c = head_blocks_out(dk.data(), T, s);
  gemm(dk_gemm, stream);
  StepProfile::global().mark("attn.bwd.dq_dk_gemm");
}

// The bucket gathers' outputs Gc (c2p) and Gp (p2c) in T (empty for an absent term): [N, B*L, window_pitch],
// or [N, B*L, band_width] as bands (BucketGrad; band_width > 0).
struct BucketGrads {
  DeviceBuffer c2p, p2c;
  int64_t band_width = 0;
  BucketGrad c2p_grad() const { return {c2p.data(), band_width, false}; }
  BucketGrad p2c_grad() const { return {p2c.data(), band_width, true}; }
};
BucketGrads bucket_grad_buffers(const AttentionShape& s, DType T, int64_t band_width = 0) {
  const size_t row = static_cast<size_t>(band_width > 0 ? band_width : s.window_pitch);
  const size_t bytes = static_cast<size_t>(s.heads * s.batch * s.length) * row * dtype_size(T);
  BucketGrads grads;
  grads.band_width = band_width;
  if (s.c2p) grads.c2p = scratch_buffer(bytes, "attention.c2p_grad");
  if (s.p2c) grads.p2c = scratch_buffer(bytes, "attention.p2c_grad");
  return grads;
}

// The positional terms over all B*L rows of a head, with Gx = Gc or Gp: d(rows) += Gx table_w and d(table_w)
// += Gx^T rows.
void positional_backward(const BucketGrads& grads, const Tensor& q, const Tensor& k, const Tensor& pos_key,
                         const Tensor& pos_query, const Tensor& dq, const Tensor& dk, const Tensor& dpos_key,
                         const Tensor& dpos_query, const RelativeIndexTables& tables, const AttentionShape& s,
                         DType T, const char* op, cudaStream_t stream) {
  if (s.c2p)
    positional_grads(grads.c2p_grad(), q, pos_key, dq, dpos_key, tables.window_begin, s, T, op, stream);
  if (s.p2c)
    positional_grads(grads.p2c_grad(), k, pos_query, dk, dpos_query, tables.window_begin, s, T, op, stream);
  StepProfile::global().mark("attn.bwd.positional_gemm");
}

// Whether the backward up to the GEMMs reading G and P~ runs as one kernel (short_disentangled_attention.cu):
// the forward's shapes with L a multiple of 8, its 16-byte copies aligned (P's [L, L] blocks copied 16 bytes
// at a time).
bool short_backward_applies(const Tensor& v, const Tensor& dcontext, const Tensor& probs,
                            const AttentionShape& s, DType T) {
  using cuda_detail::is_aligned16;
  return short_attention_forward_shape(T, s.head_size, s.length) && s.length % 8 == 0 &&
         s.batch * s.heads <= 65535 && is_aligned16(v.data()) && is_aligned16(dcontext.data()) &&
         is_aligned16(probs.data());
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                        const Tensor& pos_query, const Tensor& attention_mask, const Tensor& probs,
                        const Tensor& dcontext, const DisentangledAttentionConfig& config, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv, const Tensor& dpos_key, const Tensor& dpos_query,
                        cudaStream_t stream) {
  constexpr const char* op = "disentangled_attention_backward";
  Plan plan = plan_attention(q, k, v, pos_key, pos_query, attention_mask, config, op);
  AttentionShape& s = plan.shape;
  const DType T = plan.dtype;
  check_probs(probs, T, s, op);
  check_tensor(dcontext, T, q.shape(), op, "dcontext");
  check_tensor(dq, T, q.shape(), op, "dq");
  check_tensor(dk, T, q.shape(), op, "dk");
  check_tensor(dv, T, q.shape(), op, "dv");
  check_table_grads(s, T, pos_key, pos_query, dpos_key, dpos_query, op);
  if (s.batch == 0 || s.length == 0 || s.features == 0) return;
  const int64_t L = s.length, d = s.head_size, BL = s.batch * s.length;
  const int64_t element = static_cast<int64_t>(dtype_size(T));

  const DeviceBuffer keep = make_keep(attention_mask, BL, stream);
  RelativeIndexTables tables;
  if (s.c2p || s.p2c) {
    tables = relative_index_tables(config.positions, L, stream);
    set_window(s, tables.window);
  }
  // dP~ = dC V^T (f32) first; the softmax backward then writes G (f32 and / or T, see below) and, with
  // dropout, P~ in T (without it P~ = P: probs itself, already in T); then dV = P~^T dC.
  const bool f32_storage = T == DType::f32;
  // The one-distance bucket gathers read G in T (bucket_gather_block_kernel): then nothing reads G in f32.
  const bool gathers_read_lowp =
      !f32_storage && (s.c2p || s.p2c) && tables.one_distance_per_bucket && use_gather_block_kernel(s);
  // G in f32 is read only by the f32 GEMMs and the f32-staging bucket gathers.
  const bool g_f32_read = f32_storage || ((s.c2p || s.p2c) && !gathers_read_lowp);
  StepProfile& prof = StepProfile::global();
  // 16-bit heads of 64 at L <= 128: dP~, the softmax backward and, with one distance a bucket, the bucket
  // gathers in one kernel (no f32 dP~ / G buffer); else it writes G in f32 for the gather kernels. Then the
  // GEMMs: dV = P~^T dC, dQ = G K, dK = G^T Q and the positional terms.
  if (short_backward_applies(v, dcontext, probs, s, T)) {
    const bool positional = s.c2p || s.p2c;
    const bool fused_gathers = positional && tables.one_distance_per_bucket;
    // The unrun candidates (docs/DESIGN.md's rule; FlashAttentionParams says what each changes): the kernel's
    // own dV, dQ, dK, and the gathers as bands where the positional kernel reads them.
    const bool products = read_env_switch("ZT_SHORT_BACKWARD_PRODUCTS") &&
                          cuda_detail::is_aligned16(q.data()) && cuda_detail::is_aligned16(k.data());
    const bool banded = read_env_switch("ZT_GATHER_BANDS") && fused_gathers &&
                        (!s.c2p || positional_grads_kernel_applies(q, pos_key, dq, s, T)) &&
                        (!s.p2c || positional_grads_kernel_applies(k, pos_query, dk, s, T));
    DeviceBuffer lowp, dropped;
    if (!products) {
      lowp = scratch_buffer(probs_elements(s) * element, "attention.score_grad_lowp");
      if (s.dropout) dropped = scratch_buffer(probs_elements(s) * element, "attention.dropped_probs");
    }
    DeviceBuffer grad;
    if (positional && !fused_gathers)
      grad = scratch_buffer(probs_elements(s) * sizeof(float), "attention.score_grad");
    const BucketGrads grads = bucket_grad_buffers(s, T, banded ? gathers_band_width(s.length) : 0);
    FlashAttentionParams p;
    p.v = v.data();
    p.dcontext = dcontext.data();
    p.keep = keep.data_as<uint8_t>();
    p.probs = probs.data();
    p.score_grad_lowp = lowp.data();
    p.dropped_probs = dropped.data();
    p.score_grad_f32 = grad.data_as<float>();
    p.content_products = products;
    if (products) {
      p.q = q.data();
      p.k = k.data();
      p.dq = dq.data();
      p.dk = dk.data();
      p.dv = dv.data();
    }
    if (fused_gathers) {
      p.gc_lowp = grads.c2p.data();
      p.gp_lowp = grads.p2c.data();
      p.rel_first = tables.rel_first;
      p.window = static_cast<int>(s.window);
      p.window_pitch = static_cast<int>(s.window_pitch);
      p.gathers_band_width = static_cast<int>(grads.band_width);
    }
    set_shape_and_dropout(p, s);
    launch_short_attention_backward(p, T, stream);
    prof.mark("attn.bwd.short");
    if (!products) {
      value_grad_product(s.dropout ? dropped.data() : probs.data(), dcontext, dv, s, T, stream);
      score_grad_products(q, k, lowp.data(), dq, dk, s, T, stream);
    }
    if (positional && !fused_gathers) {
      bucket_gathers(s, T, grad.data_as<float>(), nullptr, false, grads.c2p.data(), grads.p2c.data(), tables,
                     op, stream);
      prof.mark("attn.bwd.bucket_gather");
    }
    positional_backward(grads, q, k, pos_key, pos_query, dq, dk, dpos_key, dpos_query, tables, s, T, op,
                        stream);
    return;
  }
  DeviceBuffer lowp, dropped;
  if (!f32_storage) lowp = scratch_buffer(probs_elements(s) * element, "attention.score_grad_lowp");
  if (s.dropout) dropped = scratch_buffer(probs_elements(s) * element, "attention.dropped_probs");
  const void* p_tilde = s.dropout ? dropped.data() : probs.data();

  DeviceBuffer grad = scratch_buffer(probs_elements(s) * sizeof(float), "attention.score_grad");
  {
    GemmProblem dp_gemm = block_gemm(L, L, d, T, s);
    dp_gemm.a = head_blocks(dcontext.data(), T, s);
    dp_gemm.b = head_blocks(v.data(), T, s);
    dp_gemm.transpose_b = true;
    dp_gemm.c = score_blocks_out(grad.data(), DType::f32, s);
    gemm(dp_gemm, stream);
  }
  prof.mark("attn.bwd.dp_gemm");
  dispatch_storage(T, op, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_row_chunks(L, [&](auto chunks) {
      const bool vector_rows =
          L % 4 == 0 && aligned_to(grad.data(), 16) && aligned_to(probs.data(), 4 * sizeof(S)) &&
          aligned_to(lowp.data(), 4 * sizeof(S)) && aligned_to(dropped.data(), 4 * sizeof(S));
      attention_softmax_backward_kernel<S, decltype(chunks)::value>
          <<<row_grid(s), kWarpsPerBlock * 32, 0, stream>>>(
              grad.data_as<float>(), lowp.data_as<S>(), dropped.data_as<S>(), g_f32_read,
              static_cast<S*>(probs.data()), keep.data_as<uint8_t>(), s, vector_rows);
      ZT_CUDA_CHECK_LAUNCH("attention_softmax_backward");
    });
  });
  prof.mark("attn.bwd.softmax");
  value_grad_product(p_tilde, dcontext, dv, s, T, stream);
  score_grad_products(q, k, f32_storage ? grad.data() : lowp.data(), dq, dk, s, T, stream);
  const BucketGrads grads = bucket_grad_buffers(s, T);
  if (s.c2p || s.p2c) {  // both gathers from one staged G per (b, h) where it fits in shared memory
    bucket_gathers(s, T, grad.data_as<float>(), lowp.data(), gathers_read_lowp, grads.c2p.data(),
                   grads.p2c.data(), tables, op, stream);
  }
  prof.mark("attn.bwd.bucket_gather");
  positional_backward(grads, q, k, pos_key, pos_query, dq, dk, dpos_key, dpos_query, tables, s, T, op,
                      stream);
}

}  // namespace

void disentangled_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pos_key,
                                     const Tensor& pos_query, const Tensor& attention_mask,
                                     const Tensor& probs, const Tensor& dcontext,
                                     const DisentangledAttentionConfig& config, const Tensor& dq,
                                     const Tensor& dk, const Tensor& dv, const Tensor& dpos_key,
                                     const Tensor& dpos_query, cudaStream_t stream) {
  attention_backward(q, k, v, pos_key, pos_query, attention_mask, probs, dcontext, config, dq, dk, dv,
                     dpos_key, dpos_query, stream);
}

}  // namespace zt::kernels::gpu
