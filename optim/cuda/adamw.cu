#include "optim/cuda/adamw.cuh"

#include "optim/split_master.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda_check.h"

namespace zt::optim::gpu {
namespace {

// Work unit: one block updates one chunk of one range. Ranges go to the kernel in its parameters, at most
// kMaxRangesPerLaunch per launch (the table stays under the 4 KB classic parameter limit); a model with more
// tensors takes several launches.
constexpr int kMaxRangesPerLaunch = 96;
constexpr int64_t kChunkElements = 8192;  // 256 threads x 8 float4s
constexpr int kThreads = 256;
constexpr int kVectorUnroll = 2;  // float4 groups a thread loads before it stores (kChunkElements / 1024 = 8)

struct RangeTable {
  int count;
  int64_t offset[kMaxRangesPerLaunch];
  int64_t numel[kMaxRangesPerLaunch];
  int64_t first_chunk[kMaxRangesPerLaunch + 1];  // prefix sum of ceil(numel / kChunkElements)
  bool weight_decay[kMaxRangesPerLaunch];
};

struct NoCopy {};

__device__ __forceinline__ void store_param16(NoCopy*, int64_t, float) {}
__device__ __forceinline__ void store_param16(__nv_bfloat16* out, int64_t i, float p) {
  reinterpret_cast<uint16_t*>(out)[i] = bf16_bits_nearest_even(p);
}
__device__ __forceinline__ void store_param16(__half* out, int64_t i, float p) {
  out[i] = __float2half_rn(p);
}
// Four consecutive copies (i a multiple of 4, the base 8-byte aligned) as one 8-byte store instead of four
// 2-byte ones: the same values, a quarter of the store instructions.
__device__ __forceinline__ void store_param16x4(NoCopy*, int64_t, const float4&) {}
__device__ __forceinline__ void store_param16x4(__nv_bfloat16* out, int64_t i, const float4& p) {
  const uint2 packed{
      bf16_bits_nearest_even(p.x) | (static_cast<uint32_t>(bf16_bits_nearest_even(p.y)) << 16),
      bf16_bits_nearest_even(p.z) | (static_cast<uint32_t>(bf16_bits_nearest_even(p.w)) << 16)};
  *reinterpret_cast<uint2*>(out + i) = packed;
}
__device__ __forceinline__ void store_param16x4(__half* out, int64_t i, const float4& p) {
  const __half2 lo = __halves2half2(__float2half_rn(p.x), __float2half_rn(p.y));
  const __half2 hi = __halves2half2(__float2half_rn(p.z), __float2half_rn(p.w));
  *reinterpret_cast<uint2*>(out + i) =
      make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
}

// One element, in the CPU's (torch's) order; the __f*_rn intrinsics forbid contraction into FMAs, which
// the CPU build does not do either (adamw.cpp is compiled without FMA contraction of these statements).
//   p = p * decay;  m = lerp(m, g, w);  v = v * b2 + (vw * g) * g
//   p = p + (step * m) / (sqrt(v) / bc2 + eps)
struct ElementUpdate {
  AdamWStepScalars s;
  float one_minus_w;
  float grad_scale;  // g *= grad_scale first (unscale and clip), the float product kernels::scale computes
  bool zero_grads;   // write 0 over each gradient once read

  __device__ __forceinline__ void operator()(float decay, float& p, float g, float& m, float& v) const {
    if (grad_scale != 1.0f) g = __fmul_rn(grad_scale, g);
    float new_p = __fmul_rn(p, decay);
    const float new_m = s.m_weight_is_small ? __fadd_rn(m, __fmul_rn(s.m_weight, __fsub_rn(g, m)))
                                            : __fsub_rn(g, __fmul_rn(__fsub_rn(g, m), one_minus_w));
    float new_v = __fmul_rn(v, s.beta2);
    new_v = __fadd_rn(new_v, __fmul_rn(__fmul_rn(s.v_weight, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(new_v), s.bias_correction2_sqrt), s.eps);
    new_p = __fadd_rn(new_p, __fdiv_rn(__fmul_rn(s.neg_step_size, new_m), denom));
    p = new_p;
    m = new_m;
    v = new_v;
  }
};

// The range of chunk `chunk` (the last k with first_chunk[k] <= chunk) and the chunk's elements [begin, end).
__device__ __forceinline__ int chunk_elements(const RangeTable& table, int64_t chunk, int64_t& begin,
                                              int64_t& end) {
  int lo = 0, hi = table.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.first_chunk[mid] <= chunk) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  begin = table.offset[lo] + (chunk - table.first_chunk[lo]) * kChunkElements;
  end = min(table.offset[lo] + table.numel[lo], begin + kChunkElements);
  return lo;
}

// Block b updates chunk b of the table: range k with first_chunk[k] <= b < first_chunk[k + 1], elements
// [offset + (b - first_chunk[k]) * kChunkElements, ...) clipped to the range. float4 accesses where the
// chunk start is 4-aligned and the bases are 16-byte aligned (`vector_bases`; the 16-bit copy's 8-byte
// aligned), scalars for the rest. Each thread loads kVectorUnroll float4 groups of all four arrays before it
// updates and stores any (2 x 64 bytes in flight a thread: the kernel is bound by HBM latency x bandwidth).
template <typename Half>
__global__ void adamw_multi_tensor_kernel(const ElementUpdate update, const RangeTable table,
                                          bool vector_bases, float* params, float* grads, float* exp_avg,
                                          float* exp_avg_sq, Half* params16) {
  int64_t begin = 0, end = 0;
  const int k = chunk_elements(table, blockIdx.x, begin, end);
  const float decay = table.weight_decay[k] ? update.s.decay_factor : 1.0f;  // x * 1 == x exactly
  int64_t scalar_from = begin;
  if (vector_bases && begin % 4 == 0) {
    const int64_t vector_end = begin + (end - begin) / 4 * 4;
    constexpr int64_t kStride = 4 * kThreads;  // elements between a thread's consecutive float4 groups
    for (int64_t i = begin + 4 * static_cast<int64_t>(threadIdx.x); i < vector_end;
         i += kStride * kVectorUnroll) {
      float4 p[kVectorUnroll], g[kVectorUnroll], m[kVectorUnroll], v[kVectorUnroll];
#pragma unroll
      for (int u = 0; u < kVectorUnroll; ++u) {
        const int64_t j = i + u * kStride;
        if (j >= vector_end) break;
        p[u] = *reinterpret_cast<const float4*>(params + j);
        g[u] = *reinterpret_cast<const float4*>(grads + j);
        m[u] = *reinterpret_cast<const float4*>(exp_avg + j);
        v[u] = *reinterpret_cast<const float4*>(exp_avg_sq + j);
      }
#pragma unroll
      for (int u = 0; u < kVectorUnroll; ++u) {
        const int64_t j = i + u * kStride;
        if (j >= vector_end) break;
        update(decay, p[u].x, g[u].x, m[u].x, v[u].x);
        update(decay, p[u].y, g[u].y, m[u].y, v[u].y);
        update(decay, p[u].z, g[u].z, m[u].z, v[u].z);
        update(decay, p[u].w, g[u].w, m[u].w, v[u].w);
        if (update.zero_grads) *reinterpret_cast<float4*>(grads + j) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4*>(params + j) = p[u];
        *reinterpret_cast<float4*>(exp_avg + j) = m[u];
        *reinterpret_cast<float4*>(exp_avg_sq + j) = v[u];
        store_param16x4(params16, j, p[u]);
      }
    }
    scalar_from = vector_end;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < end; i += kThreads) {
    float p = params[i], m = exp_avg[i], v = exp_avg_sq[i];
    update(decay, p, grads[i], m, v);
    if (update.zero_grads) grads[i] = 0.0f;
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    store_param16(params16, i, p);
  }
}

// The split master (optim/split_master.h): the master of element e is joined from hi[e] (the bf16 compute
// copy), lo[e] and bit e of `up`, updated as adamw_multi_tensor_kernel updates an f32 master, and split
// again, so every stored bit equals what the f32-master kernel stores. A thread owns 8 consecutive
// elements — one byte of `up` (ranges start at multiples of 8, checked on the host), read, rewritten and
// stored whole, so no two threads write one byte; bits of elements past the range keep their values. With
// 16-byte aligned bases: one 16-byte access of hi and of lo, two of grads, m and v (128 bytes in flight a
// thread), else element by element.
__global__ void adamw_split_master_kernel(const ElementUpdate update, const RangeTable table,
                                          bool vector_bases, uint16_t* hi, uint16_t* lo, uint8_t* up,
                                          float* grads, float* exp_avg, float* exp_avg_sq) {
  int64_t begin = 0, end = 0;
  const int k = chunk_elements(table, blockIdx.x, begin, end);
  const float decay = table.weight_decay[k] ? update.s.decay_factor : 1.0f;
  for (int64_t e0 = begin + 8 * static_cast<int64_t>(threadIdx.x); e0 < end; e0 += 8 * kThreads) {
    const int n = static_cast<int>(min(int64_t{8}, end - e0));
    uint32_t bits = up[e0 / 8];
    if (n == 8 && vector_bases) {
      uint4 hi8 = *reinterpret_cast<const uint4*>(hi + e0);
      uint4 lo8 = *reinterpret_cast<const uint4*>(lo + e0);
      float4 g[2], m[2], v[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        g[h] = *reinterpret_cast<const float4*>(grads + e0 + 4 * h);
        m[h] = *reinterpret_cast<const float4*>(exp_avg + e0 + 4 * h);
        v[h] = *reinterpret_cast<const float4*>(exp_avg_sq + e0 + 4 * h);
      }
      uint16_t* hs = reinterpret_cast<uint16_t*>(&hi8);
      uint16_t* ls = reinterpret_cast<uint16_t*>(&lo8);
      float* gs = reinterpret_cast<float*>(g);
      float* ms = reinterpret_cast<float*>(m);
      float* vs = reinterpret_cast<float*>(v);
      uint32_t new_bits = 0;
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        float p = join_master_value(hs[q], ls[q], (bits >> q) & 1u);
        update(decay, p, gs[q], ms[q], vs[q]);
        const SplitMasterValue split = split_master_value(p);
        hs[q] = split.hi;
        ls[q] = split.lo;
        new_bits |= static_cast<uint32_t>(split.up) << q;
      }
      *reinterpret_cast<uint4*>(hi + e0) = hi8;
      *reinterpret_cast<uint4*>(lo + e0) = lo8;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (update.zero_grads)
          *reinterpret_cast<float4*>(grads + e0 + 4 * h) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4*>(exp_avg + e0 + 4 * h) = m[h];
        *reinterpret_cast<float4*>(exp_avg_sq + e0 + 4 * h) = v[h];
      }
      bits = new_bits;
    } else {
      for (int q = 0; q < n; ++q) {
        const int64_t e = e0 + q;
        float p = join_master_value(hi[e], lo[e], (bits >> q) & 1u);
        float m = exp_avg[e], v = exp_avg_sq[e];
        update(decay, p, grads[e], m, v);
        if (update.zero_grads) grads[e] = 0.0f;
        exp_avg[e] = m;
        exp_avg_sq[e] = v;
        const SplitMasterValue split = split_master_value(p);
        hi[e] = split.hi;
        lo[e] = split.lo;
        bits = (bits & ~(1u << q)) | (static_cast<uint32_t>(split.up) << q);
      }
    }
    up[e0 / 8] = static_cast<uint8_t>(bits);
  }
}

// out[k] = master[offset + k] (join) or master[offset + k] = in[k] (split), k < n: a thread per byte of
// `up` (the elements it covers inside [offset, offset + n)), so a split that starts or ends inside a byte
// keeps the other elements' bits.
template <bool kJoin>
__global__ void split_master_copy_kernel(uint16_t* hi, uint16_t* lo, uint8_t* up, float* values,
                                         int64_t offset, int64_t n) {
  const int64_t first_byte = offset / 8, bytes = (offset + n + 7) / 8 - first_byte;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < bytes;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t byte = first_byte + t;
    uint32_t bits = up[byte];
    const int64_t from = max(8 * byte, offset), to = min(8 * byte + 8, offset + n);
    for (int64_t e = from; e < to; ++e) {
      const int q = static_cast<int>(e - 8 * byte);
      if constexpr (kJoin) {
        values[e - offset] = join_master_value(hi[e], lo[e], (bits >> q) & 1u);
      } else {
        const SplitMasterValue split = split_master_value(values[e - offset]);
        hi[e] = split.hi;
        lo[e] = split.lo;
        bits = (bits & ~(1u << q)) | (static_cast<uint32_t>(split.up) << q);
      }
    }
    if constexpr (!kJoin) up[byte] = static_cast<uint8_t>(bits);
  }
}

void check_f32_buffer(const Tensor& t, int64_t size, const char* name) {
  ZT_CHECK(t.data() != nullptr || size == 0, "adamw_update (cuda): ", name, " is undefined");
  ZT_CHECK(t.dtype() == DType::f32, "adamw_update (cuda): ", name, " must be f32, got ", t.describe());
  ZT_CHECK(t.device() == DeviceKind::cuda, "adamw_update (cuda): ", name, " must be a CUDA tensor, got ",
           t.describe());
  ZT_CHECK(t.is_contiguous(), "adamw_update (cuda): ", name, " must be contiguous");
  ZT_CHECK(t.numel() == size, "adamw_update (cuda): ", name, " has ", t.numel(), " elements, params ", size);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Calls launch(table, chunks) for each batch of at most kMaxRangesPerLaunch non-empty ranges.
template <typename Launch>
void for_each_range_batch(std::span<const TensorRange> ranges, const Launch& launch) {
  size_t next = 0;  // the first range not yet launched
  while (next < ranges.size()) {
    RangeTable table{};
    int64_t chunks = 0;
    for (; next < ranges.size() && table.count < kMaxRangesPerLaunch; ++next) {
      const TensorRange& range = ranges[next];
      if (range.numel == 0) continue;
      const int k = table.count++;
      table.offset[k] = range.offset;
      table.numel[k] = range.numel;
      table.weight_decay[k] = range.weight_decay;
      table.first_chunk[k] = chunks;
      chunks += (range.numel + kChunkElements - 1) / kChunkElements;
    }
    table.first_chunk[table.count] = chunks;
    if (chunks == 0) continue;
    ZT_CHECK(chunks < (int64_t{1} << 31), "adamw_update (cuda): ", chunks, " chunks exceed the grid limit");
    launch(table, static_cast<unsigned>(chunks));
  }
}

template <typename Half>
void launch_batches(const ElementUpdate& update, std::span<const TensorRange> ranges, bool vector_bases,
                    float* params, float* grads, float* exp_avg, float* exp_avg_sq, Half* params16,
                    cudaStream_t stream) {
  for_each_range_batch(ranges, [&](const RangeTable& table, unsigned chunks) {
    adamw_multi_tensor_kernel<Half><<<chunks, kThreads, 0, stream>>>(update, table, vector_bases, params,
                                                                     grads, exp_avg, exp_avg_sq, params16);
    ZT_CUDA_CHECK_LAUNCH("adamw_multi_tensor");
  });
}

}  // namespace

void adamw_update(const AdamWStepScalars& scalars, const Tensor& params, const Tensor& grads,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, std::span<const TensorRange> ranges,
                  const Tensor& params16, cudaStream_t stream, float grad_scale, bool zero_grads) {
  const int64_t size = params.numel();
  check_f32_buffer(params, size, "params");
  check_f32_buffer(grads, size, "grads");
  check_f32_buffer(exp_avg, size, "exp_avg");
  check_f32_buffer(exp_avg_sq, size, "exp_avg_sq");
  check_adamw_ranges(ranges, size, "adamw_update (cuda)");
  const bool vector_bases = aligned16(params.data()) && aligned16(grads.data()) &&
                            aligned16(exp_avg.data()) && aligned16(exp_avg_sq.data()) &&
                            reinterpret_cast<uintptr_t>(params16.data()) % 8 == 0;
  const ElementUpdate update{scalars, 1.0f - scalars.m_weight, grad_scale, zero_grads};
  float* p = static_cast<float*>(params.data());
  float* g = static_cast<float*>(grads.data());
  float* m = static_cast<float*>(exp_avg.data());
  float* v = static_cast<float*>(exp_avg_sq.data());
  if (params16.data() == nullptr) {
    launch_batches<NoCopy>(update, ranges, vector_bases, p, g, m, v, nullptr, stream);
    return;
  }
  ZT_CHECK(params16.device() == DeviceKind::cuda && params16.is_contiguous() && params16.numel() == size,
           "adamw_update (cuda): params16 must be a contiguous CUDA tensor of ", size, " elements, got ",
           params16.describe());
  if (params16.dtype() == DType::bf16) {
    launch_batches(update, ranges, vector_bases, p, g, m, v, static_cast<__nv_bfloat16*>(params16.data()),
                   stream);
  } else if (params16.dtype() == DType::f16) {
    launch_batches(update, ranges, vector_bases, p, g, m, v, static_cast<__half*>(params16.data()), stream);
  } else {
    ZT_FAIL("adamw_update (cuda): params16 must be bf16 or f16, got ", params16.describe());
  }
}

namespace {

// hi bf16 [N], lo 2-byte [N] (bf16-typed storage of raw bits), up i32 [>= ceil(N / 32)] (bit e of byte e /
// 8): contiguous CUDA tensors; returns N.
int64_t check_split_master(const SplitMaster& master, const char* op) {
  const int64_t size = master.hi.numel();
  for (const auto& [t, name] : {std::pair<const Tensor&, const char*>{master.hi, "hi"}, {master.lo, "lo"}}) {
    ZT_CHECK(t.data() != nullptr && t.device() == DeviceKind::cuda && t.is_contiguous() &&
                 t.dtype() == DType::bf16 && t.numel() == size,
             op, ": the split master's ", name, " must be a contiguous CUDA bf16 tensor of ", size,
             " elements, got ", t.describe());
  }
  ZT_CHECK(master.up.data() != nullptr && master.up.device() == DeviceKind::cuda &&
               master.up.is_contiguous() && master.up.dtype() == DType::i32 && master.up.numel() * 32 >= size,
           op,
           ": the split master's rounding bits must be a contiguous CUDA i32 tensor of >= ", (size + 31) / 32,
           " words, got ", master.up.describe());
  return size;
}

uint16_t* bits16(const Tensor& t) {
  return static_cast<uint16_t*>(t.data());
}

}  // namespace

void adamw_update_split_master(const AdamWStepScalars& scalars, const SplitMaster& master,
                               const Tensor& grads, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                               std::span<const TensorRange> ranges, cudaStream_t stream, float grad_scale,
                               bool zero_grads) {
  const int64_t size = check_split_master(master, "adamw_update_split_master");
  check_f32_buffer(grads, size, "grads");
  check_f32_buffer(exp_avg, size, "exp_avg");
  check_f32_buffer(exp_avg_sq, size, "exp_avg_sq");
  check_adamw_ranges(ranges, size, "adamw_update (cuda)");
  for (const TensorRange& r : ranges) {
    ZT_CHECK(r.numel == 0 || r.offset % 8 == 0, "adamw_update_split_master: range at element ", r.offset,
             " does not start at a multiple of 8 (a thread owns one byte of rounding bits)");
  }
  const bool vector_bases = aligned16(master.hi.data()) && aligned16(master.lo.data()) &&
                            aligned16(grads.data()) && aligned16(exp_avg.data()) &&
                            aligned16(exp_avg_sq.data());
  const ElementUpdate update{scalars, 1.0f - scalars.m_weight, grad_scale, zero_grads};
  for_each_range_batch(ranges, [&](const RangeTable& table, unsigned chunks) {
    adamw_split_master_kernel<<<chunks, kThreads, 0, stream>>>(
        update, table, vector_bases, bits16(master.hi), bits16(master.lo),
        static_cast<uint8_t*>(master.up.data()), static_cast<float*>(grads.data()),
        static_cast<float*>(exp_avg.data()), static_cast<float*>(exp_avg_sq.data()));
    ZT_CUDA_CHECK_LAUNCH("adamw_split_master");
  });
}

namespace {
template <bool kJoin>
void copy_split_master(const SplitMaster& master, int64_t offset, const Tensor& values, cudaStream_t stream,
                       const char* op) {
  const int64_t size = check_split_master(master, op);
  check_f32_buffer(values, values.numel(), "values");
  const int64_t n = values.numel();
  ZT_CHECK(offset >= 0 && offset + n <= size, op, ": elements [", offset, ", ", offset + n,
           ") outside the split master of ", size);
  if (n == 0) return;
  const int64_t bytes = (offset + n + 7) / 8 - offset / 8;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((bytes + kThreads - 1) / kThreads, 65535));
  split_master_copy_kernel<kJoin><<<blocks, kThreads, 0, stream>>>(
      bits16(master.hi), bits16(master.lo), static_cast<uint8_t*>(master.up.data()),
      static_cast<float*>(values.data()), offset, n);
  ZT_CUDA_CHECK_LAUNCH(op);
}
}  // namespace

void join_split_master(const SplitMaster& master, int64_t offset, const Tensor& out, cudaStream_t stream) {
  copy_split_master<true>(master, offset, out, stream, "join_split_master");
}

void write_split_master(const Tensor& values, const SplitMaster& master, int64_t offset,
                        cudaStream_t stream) {
  copy_split_master<false>(master, offset, values, stream, "write_split_master");
}

}  // namespace zt::optim::gpu
