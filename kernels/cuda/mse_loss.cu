#include "kernels/cuda/launch_common.cuh"
#include "kernels/cuda/mse_loss.cuh"

namespace zt::kernels::gpu {
namespace {

using namespace cuda_detail;

constexpr int kWarpsPerBlock = kThreadsPerBlock / 32;

// Thread t sums rows t, t + blockDim, ... in order; then warps, then the warp totals in warp order.
// Writes sum_{kept} (z - y)^2 and |kept| of all rows into the block's shared outputs.
__device__ void block_squared_error(const float* z, const float* y, int64_t rows, double* total,
                                    int64_t* kept) {
  __shared__ double warp_total[kWarpsPerBlock];
  __shared__ int64_t warp_kept[kWarpsPerBlock];
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
    if (isnan(y[n])) continue;
    const double d = static_cast<double>(z[n]) - static_cast<double>(y[n]);
    sum += d * d;
    ++count;
  }
  sum = warp_sum(sum);
  count = warp_sum(count);
  if (lane == 0) {
    warp_total[warp] = sum;
    warp_kept[warp] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    int64_t c = 0;
    for (int w = 0; w < kWarpsPerBlock; ++w) {
      s += warp_total[w];
      c += warp_kept[w];
    }
    *total = s;
    *kept = c;
  }
  __syncthreads();
}

__global__ void mse_loss_forward_kernel(const float* z, const float* y, int64_t rows, float* loss) {
  __shared__ double total;
  __shared__ int64_t kept;
  block_squared_error(z, y, rows, &total, &kept);
  if (threadIdx.x == 0) loss[0] = kept == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(kept));
}

// One block (N is a batch): counts |kept|, then dz[n] = 2 dloss (z[n] - y[n]) / |kept|, 0 for NaN targets.
__global__ void mse_loss_backward_kernel(const float* z, const float* y, int64_t rows, float dloss,
                                         float* dz) {
  __shared__ double total;
  __shared__ int64_t kept;
  block_squared_error(z, y, rows, &total, &kept);
  const double scale = kept == 0 ? 0.0 : 2.0 * static_cast<double>(dloss) / static_cast<double>(kept);
  for (int64_t n = threadIdx.x; n < rows; n += blockDim.x) {
    dz[n] = isnan(y[n]) ? 0.0f
                        : static_cast<float>(scale * (static_cast<double>(z[n]) - static_cast<double>(y[n])));
  }
}

}  // namespace

void mse_loss_forward(const Tensor& predictions, const Tensor& targets, const Tensor& loss,
                      cudaStream_t stream) {
  constexpr const char* op = "mse_loss_forward";
  mse_loss_forward_kernel<<<1, kThreadsPerBlock, 0, stream>>>(
      typed<float>(predictions), typed<float>(targets), predictions.dim(0), typed<float>(loss));
  ZT_CUDA_CHECK_LAUNCH(op);
}

void mse_loss_backward(const Tensor& predictions, const Tensor& targets, float dloss,
                       const Tensor& dpredictions, cudaStream_t stream) {
  constexpr const char* op = "mse_loss_backward";
  if (predictions.dim(0) == 0) return;
  mse_loss_backward_kernel<<<1, kThreadsPerBlock, 0, stream>>>(typed<float>(predictions),
                                                               typed<float>(targets), predictions.dim(0),
                                                               dloss, typed<float>(dpredictions));
  ZT_CUDA_CHECK_LAUNCH(op);
}

}  // namespace zt::kernels::gpu
