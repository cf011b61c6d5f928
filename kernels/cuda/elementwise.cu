#include "kernels/cuda/elementwise.cuh"

#include "kernels/cuda/pointwise.cuh"
#include "kernels/cuda/row_gather.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

struct AddOp {
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float a, float b) const { return a + b; }
};

struct ScaleOp {
  float alpha;
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t, float x) const { return alpha * x; }
};

struct FillOp {
  float value;
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t) const { return value; }
};

// x[i] * mask[i / dim]: row r = i / dim of x [rows, dim] is scaled by mask[r] (1 keeps, 0 zeroes padding).
template <typename MaskT>
struct MaskRowsOp {
  const MaskT* mask;  // [rows]
  int64_t dim;
  using Group = NoGroupState;
  __device__ Group group(uint64_t) const { return {}; }
  __device__ float operator()(const Group&, int64_t i, float x) const {
    return x * static_cast<float>(mask[i / dim]);
  }
};

// select_token_forward: output row b reads row b * L + token of x seen as [B * L, D].
struct TokenRowOfBatch {
  int64_t length, token;
  __device__ int64_t operator()(int64_t b) const { return b * length + token; }
};

// select_token_backward: row r = b * L + l of dx reads row b of dout where l == token, else zeros.
struct BatchRowOfToken {
  int64_t length, token;
  __device__ int64_t operator()(int64_t r) const { return r % length == token ? r / length : kZeroRow; }
};

void apply_row_mask(const Tensor& x, const Tensor& mask, const Tensor& out, cudaStream_t stream,
                    const char* op) {
  const int64_t dim = x.dim(-1);
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (mask.dtype() == DType::f32) {
      launch_pointwise<T, 1>(MaskRowsOp<float>{typed<float>(mask), dim}, x.numel(), typed<T>(out),
                             {typed<T>(x)}, stream, op);
    } else {
      launch_pointwise<T, 1>(MaskRowsOp<int64_t>{typed<int64_t>(mask), dim}, x.numel(), typed<T>(out),
                             {typed<T>(x)}, stream, op);
    }
  });
}

// dst[i] = src[i] converted (accumulate: dst[i] += src[i], summed in f32), for dtypes that differ: the
// casts around the f32 islands of a 16-bit model (logits, relative-table gradient). Small tensors only, so
// one scalar grid-stride loop rather than the vectorized launcher.
template <typename Dst, typename Src, bool kAccumulate>
__global__ void convert_kernel(Dst* __restrict__ dst, const Src* __restrict__ src, int64_t n) {
  for (int64_t i = global_thread_index(); i < n; i += grid_thread_count()) {
    const float value = to_float(src[i]);
    dst[i] = from_float<Dst>(kAccumulate ? to_float(dst[i]) + value : value);
  }
}

template <bool kAccumulate>
void launch_convert(const Tensor& src, const Tensor& dst, cudaStream_t stream, const char* op) {
  if (src.numel() == 0) return;
  dispatch_float_storage(dst.dtype(), op, [&](auto dst_tag) {
    using D = decltype(dst_tag);
    dispatch_float_storage(src.dtype(), op, [&](auto src_tag) {
      using S = decltype(src_tag);
      convert_kernel<D, S, kAccumulate>
          <<<blocks_for(src.numel(), kThreadsPerBlock), kThreadsPerBlock, 0, stream>>>(
              typed<D>(dst), typed<S>(src), src.numel());
    });
  });
  ZT_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

void add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  constexpr const char* op = "add";
  dispatch_float_storage(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 2>(AddOp{}, a.numel(), typed<T>(out), {typed<T>(a), typed<T>(b)}, stream, op);
  });
}

void add_inplace(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  constexpr const char* op = "add_inplace";
  if (dst.dtype() == DType::f32 && src.dtype() != DType::f32) {
    launch_convert<true>(src, dst, stream, op);
    return;
  }
  dispatch_float_storage(dst.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 2>(AddOp{}, dst.numel(), typed<T>(dst), {typed<T>(dst), typed<T>(src)}, stream, op);
  });
}

void scale(const Tensor& x, float alpha, const Tensor& out, cudaStream_t stream) {
  constexpr const char* op = "scale";
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 1>(ScaleOp{alpha}, x.numel(), typed<T>(out), {typed<T>(x)}, stream, op);
  });
}

void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  constexpr const char* op = "copy";
  if (src.dtype() != dst.dtype()) {
    launch_convert<false>(src, dst, stream, op);
    return;
  }
  dispatch_float_storage(src.dtype(), op, [](auto) {});  // float storage only, like every other op here
  if (dst.data() != src.data() && src.nbytes() > 0) {
    ZT_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream));
  }
}

void fill(const Tensor& dst, float value, cudaStream_t stream) {
  constexpr const char* op = "fill";
  dispatch_float_storage(dst.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_pointwise<T, 0>(FillOp{value}, dst.numel(), typed<T>(dst), {}, stream, op);
  });
}

void mask_rows_forward(const Tensor& x, const Tensor& mask, const Tensor& out, cudaStream_t stream) {
  apply_row_mask(x, mask, out, stream, "mask_rows_forward");
}

void mask_rows_backward(const Tensor& dy, const Tensor& mask, const Tensor& dx, cudaStream_t stream) {
  apply_row_mask(dy, mask, dx, stream, "mask_rows_backward");
}

void select_token_forward(const Tensor& x, int64_t token, const Tensor& out, cudaStream_t stream) {
  constexpr const char* op = "select_token_forward";
  dispatch_float_storage(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_gather_rows(TokenRowOfBatch{x.dim(1), token}, typed<T>(x), typed<T>(out), x.dim(0), x.dim(2),
                       stream, op);
  });
}

void select_token_backward(const Tensor& dout, int64_t token, const Tensor& dx, cudaStream_t stream) {
  constexpr const char* op = "select_token_backward";
  dispatch_float_storage(dx.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_gather_rows(BatchRowOfToken{dx.dim(1), token}, typed<T>(dout), typed<T>(dx), dx.dim(0) * dx.dim(1),
                       dx.dim(2), stream, op);
  });
}

}  // namespace zt::kernels::gpu
