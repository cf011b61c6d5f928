#include "kernels/cuda/gelu.cuh"

#include "kernels/cuda/column_sum.cuh"
#include "kernels/cuda/gemm.cuh"
#include "kernels/cuda/pointwise.cuh"
#include "runtime/cuda_check.h"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

// gelu(x) = x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2; the same expression order as the CPU reference.
// e = erf(x / sqrt 2) is an argument so that the fused recompute-and-backward shares it: every kernel below
// evaluates these same two expressions, so they round (and contract into FMAs) alike.
__device__ __forceinline__ float gelu_of(float x, float e) {
  return 0.5f * x * (1.0f + e);
}
// dx = dy * (Phi(x) + x * phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
__device__ __forceinline__ float gelu_grad_of(float dy, float x, float e) {
  const float cdf = 0.5f * (1.0f + e);
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
__device__ __forceinline__ float erf_term(float x) {
  return erff(x * kInvSqrt2);
}

struct GeluForwardOp {
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float x) const { return gelu_of(x, erf_term(x)); }
};

struct GeluBackwardOp {
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float dy, float x) const {
    return gelu_grad_of(dy, x, erf_term(x));
  }
};

// A Pack128 stored as one 16-byte vector (st.global.wb, the default store policy): store128's copy of the
// struct came out as 2-byte-pair stores in this kernel's SASS.
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack128<T>& pack) {
  uint4 bits;
  memcpy(&bits, &pack, sizeof(bits));
  __stwb(reinterpret_cast<uint4*>(p), bits);
}

// y = gelu(x) with x and y 16-byte aligned (y may alias x: each thread reads its pack before writing it):
// one Pack128 a thread per step, then the last n % pack elements one a thread; every element is
// GeluForwardOp's expression, so the bits are launch_pointwise's. That kernel, which the unaligned case
// still takes, checks every element of a pack against n and stores it through a struct copy: ~50
// instructions an element (sm_90a SASS), which held [5120, 6144] bf16 at 61.7 us (zt_bench, H100) against
// 51.7 here (126 MB: 2.4 TB/s).
template <typename T>
__global__ void gelu_forward_vector_kernel(const T* x, T* y, int64_t n) {
  constexpr int kPack = Pack128<T>::kSize;
  const int64_t packs = n / kPack;
  for (int64_t p = global_thread_index(); p < packs; p += grid_thread_count()) {
    const Pack128<T> xs = load128(x + p * kPack);
    Pack128<T> ys;
#pragma unroll
    for (int k = 0; k < kPack; ++k) ys.v[k] = from_float<T>(GeluForwardOp{}({}, 0, to_float(xs.v[k])));
    store_pack(y + p * kPack, ys);
  }
  const int64_t i = packs * kPack + global_thread_index();
  if (i < n) y[i] = from_float<T>(GeluForwardOp{}({}, 0, to_float(x[i])));
}

// y = gelu(x) and dx = dy * gelu'(x) for the Pack128 at element `first` of each tensor; returns dx's pack
// (what was stored, for the column sums below). dy's pack is read before dx's is written.
template <typename T>
__device__ __forceinline__ Pack128<T> gelu_step_pack(const T* dy, const T* x, T* y, T* dx, int64_t first) {
  const Pack128<T> xs = load128(x + first), ds = load128(dy + first);
  Pack128<T> ys, dxs;
#pragma unroll
  for (int k = 0; k < Pack128<T>::kSize; ++k) {
    const float xi = to_float(xs.v[k]), e = erf_term(xi);
    ys.v[k] = from_float<T>(gelu_of(xi, e));
    dxs.v[k] = from_float<T>(gelu_grad_of(to_float(ds.v[k]), xi, e));
  }
  store128(y + first, ys);
  store128(dx + first, dxs);
  return dxs;
}

// y = gelu(x), dx = dy * gelu'(x): one Pack128 of each tensor per work item on the vector path (every pointer
// 16-byte aligned; the last partial pack element by element), single elements otherwise. Each thread reads
// dy[i] before writing dx[i], so dx may alias dy.
template <typename T, bool kVector>
__global__ void gelu_recompute_backward_kernel(const T* dy, const T* x, T* y, T* dx, int64_t n) {
  constexpr int kItem = kVector ? Pack128<T>::kSize : 1;
  const int64_t items = (n + kItem - 1) / kItem;
  auto one = [&](int64_t i) {
    const float xi = to_float(x[i]), e = erf_term(xi);
    const float d = to_float(dy[i]);
    y[i] = from_float<T>(gelu_of(xi, e));
    dx[i] = from_float<T>(gelu_grad_of(d, xi, e));
  };
  for (int64_t item = global_thread_index(); item < items; item += grid_thread_count()) {
    const int64_t first = item * kItem;
    if (kVector && first + kItem <= n) {
      gelu_step_pack(dy, x, y, dx, first);
    } else {
      for (int64_t i = first; i < first + kItem && i < n; ++i) one(i);
    }
  }
}

// The same step with dx's column sums (the bias gradient of the projection that produced x) taken from the
// values it writes: column_sum_into's pass 1 (kernels/cuda/column_sum.cuh) with each row's Pack128 of x and
// dy turned into y and dx on the way, so the partials are bitwise those of a column sum over the stored dx
// while dx is never read back (at the FFN's [5120, 6144] bf16: 63 MB, ~20 us a layer). The vector path only:
// cols a multiple of the pack, every pointer 16-byte aligned.
template <typename T>
__global__ void gelu_recompute_backward_column_sum_kernel(const T* dy, const T* x, T* y, T* dx, int64_t rows,
                                                          int64_t cols, int64_t rows_per_chunk,
                                                          float* __restrict__ partial) {
  constexpr int kVec = Pack128<T>::kSize;
  const auto step = [&](int64_t r, int64_t c0, float(&v)[kVec]) {
    const Pack128<T> dxs = gelu_step_pack(dy, x, y, dx, r * cols + c0);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] = to_float(dxs.v[k]);  // the stored value, as a column sum reads it
  };
  column_sum_partials<kVec>(step, rows, cols, rows_per_chunk, partial);
}

// The fused kernel runs (cols / 256) x chunks blocks of 256 threads, each thread walking rows_per_chunk / 8
// rows — fewer threads than the flat kernel's one per 16-byte pack. On the H200 it was 8 us a layer slower
// than the two passes at the FFN's bs 8 (192 blocks on 132 SMs) and 9 us faster at bs 40 (960 blocks;
// docs/bench/2026-12-04-h200-session8), so `automatic` takes it from 4 blocks per SM on.
bool takes_fused_column_sums(dim3 grid, GeluColumnSumPath path) {
  if (path != GeluColumnSumPath::automatic) return path == GeluColumnSumPath::fused;
  return int64_t{grid.x} * grid.y >= 4 * int64_t{current_device_multiprocessors()};
}

}  // namespace

void gelu_forward(const Tensor& x, const Tensor& y, cudaStream_t stream) {
  constexpr const char* op = "gelu_forward";
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.numel();
    if (n > 0 && is_aligned16(x.data()) && is_aligned16(y.data())) {
      gelu_forward_vector_kernel<T><<<cuda_detail::blocks_for(std::max<int64_t>(n / Pack128<T>::kSize, 1)),
                                      kThreadsPerBlock, 0, stream>>>(typed<T>(x), typed<T>(y), n);
      ZT_CUDA_CHECK_LAUNCH(op);
    } else {
      launch_pointwise<T, 1>(GeluForwardOp{}, n, typed<T>(y), {typed<T>(x)}, stream, op);
    }
  });
}

void gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& dx, cudaStream_t stream) {
  constexpr const char* op = "gelu_backward";
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 2>(GeluBackwardOp{}, x.numel(), typed<T>(dx), {typed<T>(dy), typed<T>(x)}, stream,
                           op);
  });
}

void gelu_recompute_and_backward(const Tensor& dy, const Tensor& x, const Tensor& y, const Tensor& dx,
                                 const Tensor& dx_column_sum, GradWrite write, cudaStream_t stream,
                                 GeluColumnSumPath path) {
  constexpr const char* op = "gelu_recompute_and_backward";
  const bool sums = dx_column_sum.defined() && dx_column_sum.data() != nullptr;
  const int64_t cols = x.rank() == 0 ? 1 : x.dim(-1);
  const int64_t n = x.numel(), rows = cols == 0 ? 0 : n / cols;
  if (n == 0) {
    if (sums)
      column_sum_into(dx.data(), dx.dtype(), rows, cols, dx_column_sum.data_as<float>(), write, stream);
    return;
  }
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const bool vector = is_aligned16(dy.data()) && is_aligned16(x.data()) && is_aligned16(y.data()) &&
                        is_aligned16(dx.data());
    const ColumnSumPlan plan(rows);
    if (sums && vector && cols % Pack128<T>::kSize == 0 &&
        takes_fused_column_sums(plan.grid(cols, Pack128<T>::kSize), path)) {
      DeviceBuffer partial =
          scratch_buffer(static_cast<size_t>(plan.chunks * cols) * sizeof(float), "gelu_column_sum");
      gelu_recompute_backward_column_sum_kernel<T>
          <<<plan.grid(cols, Pack128<T>::kSize), ColumnSumPlan::block(), 0, stream>>>(
              typed<T>(dy), typed<T>(x), typed<T>(y), typed<T>(dx), rows, cols, plan.rows_per_chunk,
              partial.data_as<float>());
      ZT_CUDA_CHECK_LAUNCH(op);
      add_chunk_partials(partial.data_as<float>(), plan.chunks, cols, dx_column_sum.data_as<float>(), write,
                         stream);
      return;
    }
    if (vector) {
      gelu_recompute_backward_kernel<T, true>
          <<<cuda_detail::blocks_for((n + Pack128<T>::kSize - 1) / Pack128<T>::kSize), kThreadsPerBlock, 0,
             stream>>>(typed<T>(dy), typed<T>(x), typed<T>(y), typed<T>(dx), n);
    } else {
      gelu_recompute_backward_kernel<T, false><<<cuda_detail::blocks_for(n), kThreadsPerBlock, 0, stream>>>(
          typed<T>(dy), typed<T>(x), typed<T>(y), typed<T>(dx), n);
    }
    ZT_CUDA_CHECK_LAUNCH(op);
    // Elsewhere the column sums are their own pass over the dx just written: the same bits.
    if (sums)
      column_sum_into(dx.data(), dx.dtype(), rows, cols, dx_column_sum.data_as<float>(), write, stream);
  });
}

}  // namespace zt::kernels::gpu
