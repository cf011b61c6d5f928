// One vectorized launcher for every pointwise op (GELU, dropout, add, scale, fill, row masks): an op is a
// small device functor, the launcher owns loads, stores, the alignment decision and the tail.
//
// Functor protocol (F is copied into the kernel's parameters):
//   using Group = ...;                                   state shared by the 4 elements [4g, 4g + 4): a
//                                                        Philox block for dropout, NoGroupState otherwise
//   __device__ Group group(uint64_t g) const;
//   __device__ float operator()(const Group&, int64_t i, float in_0, ..., float in_{K-1}) const;
//                                                        element i of the output from element i of each input
// Groups of 4 match kernels/philox.h: four consecutive indices share one Philox block, so a GPU thread runs
// the 10 rounds once per group, like the CPU loop.
//
// Work item: one Pack128<T> (4 f32 or 8 bf16/f16 elements) when every pointer is 16-byte aligned, else 4
// scalar elements; both are multiples of 4, so groups never straddle items. Each thread reads its inputs
// before writing its output at the same positions, so the output may alias any input.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/cuda/launch_common.cuh"

namespace zt::kernels::cuda_detail {

struct NoGroupState {};

template <typename T, int kInputs>
struct PointwiseArgs {
  T* out;                                  // [n]
  const T* in[kInputs > 0 ? kInputs : 1];  // kInputs arrays of [n]
  int64_t n;
};

template <typename F, int kInputs>
__device__ __forceinline__ float apply_pointwise(const F& f, const typename F::Group& state, int64_t i,
                                                 const float* in) {
  if constexpr (kInputs == 0) {
    return f(state, i);
  } else if constexpr (kInputs == 1) {
    return f(state, i, in[0]);
  } else {
    static_assert(kInputs == 2, "pointwise ops take at most two inputs");
    return f(state, i, in[0], in[1]);
  }
}

template <typename T, int kInputs, bool kVector, typename F>
__global__ void pointwise_kernel(const F f, const PointwiseArgs<T, kInputs> a) {
  constexpr int kItem = kVector ? Pack128<T>::kSize : 4;  // elements per work item, a multiple of 4
  constexpr int kSlots = kInputs > 0 ? kInputs : 1;
  const int64_t items = (a.n + kItem - 1) / kItem;
  for (int64_t item = global_thread_index(); item < items; item += grid_thread_count()) {
    const int64_t first = item * kItem;
    const bool full = first + kItem <= a.n;
    float in[kItem][kSlots];
#pragma unroll
    for (int k = 0; k < kInputs; ++k) {
      if (kVector && full) {
        const Pack128<T> pack = load128(a.in[k] + first);
#pragma unroll
        for (int j = 0; j < kItem; ++j) in[j][k] = to_float(pack.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < kItem; ++j) in[j][k] = first + j < a.n ? to_float(a.in[k][first + j]) : 0.0f;
      }
    }
    float out[kItem];
#pragma unroll
    for (int g = 0; g < kItem / 4; ++g) {
      const typename F::Group state = f.group(static_cast<uint64_t>(first / 4 + g));
#pragma unroll
      for (int lane = 0; lane < 4; ++lane) {
        const int j = g * 4 + lane;
        // Elements past n are never computed: a functor may index side arrays (a row mask) by i.
        out[j] = first + j < a.n ? apply_pointwise<F, kInputs>(f, state, first + j, in[j]) : 0.0f;
      }
    }
    if (kVector && full) {
      Pack128<T> pack;
#pragma unroll
      for (int j = 0; j < kItem; ++j) pack.v[j] = from_float<T>(out[j]);
      store128(a.out + first, pack);
    } else {
#pragma unroll
      for (int j = 0; j < kItem; ++j) {
        if (first + j < a.n) a.out[first + j] = from_float<T>(out[j]);
      }
    }
  }
}

// out[i] = f(..., i, in_0[i], ..., in_{K-1}[i]) for i in [0, n), on `stream`. `name` labels the launch.
template <typename T, int kInputs, typename F>
void launch_pointwise(const F& f, int64_t n, T* out, std::array<const T*, kInputs> in, cudaStream_t stream,
                      const char* name) {
  if (n == 0) return;
  PointwiseArgs<T, kInputs> args{};
  args.out = out;
  args.n = n;
  bool vector = is_aligned16(out);
  for (int k = 0; k < kInputs; ++k) {
    args.in[k] = in[k];
    vector = vector && is_aligned16(in[k]);
  }
  if (vector) {
    const int64_t items = (n + Pack128<T>::kSize - 1) / Pack128<T>::kSize;
    pointwise_kernel<T, kInputs, true><<<blocks_for(items), kThreadsPerBlock, 0, stream>>>(f, args);
  } else {
    pointwise_kernel<T, kInputs, false><<<blocks_for((n + 3) / 4), kThreadsPerBlock, 0, stream>>>(f, args);
  }
  ZT_CUDA_CHECK_LAUNCH(name);
}

}  // namespace zt::kernels::cuda_detail
