#include "kernels/cuda/cross_entropy.cuh"

#include "kernels/cuda/launch_common.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;

// logsumexp(z[0..C)) = max + log(sum_c exp(z[c] - max)), the sum in double over lane-strided classes,
// warp-reduced; every lane returns it.
__device__ double warp_log_sum_exp(const float* z, int64_t classes, int lane) {
  float row_max = -INFINITY;
  for (int64_t c = lane; c < classes; c += 32) row_max = fmaxf(row_max, z[c]);
  row_max = warp_max(row_max);
  double sum = 0.0;
  for (int64_t c = lane; c < classes; c += 32) sum += exp(static_cast<double>(z[c]) - row_max);
  return static_cast<double>(row_max) + log(warp_sum(sum));
}

// One block of 8 warps; warp w handles rows w, w + 8, ... in order, then the 8 warp totals are added in
// warp order:  loss = (sum_{kept n} lse(z_n) - z_n[y_n]) / |kept|, 0 when nothing is kept.
__global__ void cross_entropy_forward_kernel(const float* logits, const int64_t* labels, int64_t rows,
                                             int64_t classes, float* loss) {
  __shared__ double warp_total[kWarpsPerBlock];
  __shared__ int64_t warp_kept[kWarpsPerBlock];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  double total = 0.0;
  int64_t kept = 0;
  for (int64_t n = warp; n < rows; n += kWarpsPerBlock) {
    const int64_t y = labels[n];
    if (y < 0) continue;
    ++kept;
    const float* zn = logits + n * classes;
    const double lse = warp_log_sum_exp(zn, classes, lane);
    total += y < classes ? lse - static_cast<double>(zn[y]) : static_cast<double>(NAN);
  }
  if (lane == 0) {
    warp_total[warp] = total;
    warp_kept[warp] = kept;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    int64_t count = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      sum += warp_total[w];
      count += warp_kept[w];
    }
    loss[0] = count == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(count));
  }
}

// dz[n, c] = dloss / |kept| * (softmax(z_n)[c] - [c == y_n]) for kept rows, 0 for ignored ones. Every block
// first counts |kept| over all labels (N is small), then each warp handles one row at a time.
__global__ void cross_entropy_backward_kernel(const float* logits, const int64_t* labels, int64_t rows,
                                              int64_t classes, float dloss, float* dlogits) {
  __shared__ int64_t block_kept;
  if (threadIdx.x == 0) block_kept = 0;
  __syncthreads();
  int64_t kept = 0;
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) kept += labels[n] >= 0;
  atomicAdd(reinterpret_cast<unsigned long long*>(&block_kept), static_cast<unsigned long long>(kept));
  __syncthreads();
  const double row_scale =
      block_kept == 0 ? 0.0 : static_cast<double>(dloss) / static_cast<double>(block_kept);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  for (int64_t n = first; n < rows; n += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const float* zn = logits + n * classes;
    float* dzn = dlogits + n * classes;
    const int64_t y = labels[n];
    if (y < 0) {
      for (int64_t c = lane; c < classes; c += 32) dzn[c] = 0.0f;
      continue;
    }
    const double lse = warp_log_sum_exp(zn, classes, lane);
    for (int64_t c = lane; c < classes; c += 32) {
      const double softmax = exp(static_cast<double>(zn[c]) - lse);
      dzn[c] = y < classes ? static_cast<float>(row_scale * (softmax - (c == y ? 1.0 : 0.0))) : NAN;
    }
  }
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& loss,
                           cudaStream_t stream) {
  constexpr const char* op = "cross_entropy_forward";
  cross_entropy_forward_kernel<<<1, kThreadsPerBlock, 0, stream>>>(
      typed<float>(logits), typed<int64_t>(labels), logits.dim(0), logits.dim(1), typed<float>(loss));
  ZT_CUDA_CHECK_LAUNCH(op);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& labels, float dloss, const Tensor& dlogits,
                            cudaStream_t stream) {
  constexpr const char* op = "cross_entropy_backward";
  const int64_t rows = logits.dim(0);
  if (rows == 0) return;
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 1, 1024));
  cross_entropy_backward_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(
      typed<float>(logits), typed<int64_t>(labels), rows, logits.dim(1), dloss, typed<float>(dlogits));
  ZT_CUDA_CHECK_LAUNCH(op);
}

}  // namespace zt::kernels::gpu
