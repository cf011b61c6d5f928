#include "optim/zero/gradient_norm.h"

#include <bit>
#include <cstdint>

#include "optim/grad_clip.h"
#include "optim/zero/buffer_views.h"
#include "runtime/device.h"

#ifdef ZT_WITH_CUDA
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#endif

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

namespace {

// Sum of one double per (rank, unit) from every rank, in the same order everywhere: the 64-bit patterns
// travel through all_gather as i64 (the communicator sums only floating types up to f32, and an f32 sum
// would cost the norm the precision of the single-process double sum).
std::vector<double> all_gather_doubles(Communicator& comm, const std::vector<double>& local,
                                       DeviceKind device) {
  const int world = comm.world_size();
  const auto n = static_cast<int64_t>(local.size());
  std::vector<int64_t> bits(local.size()), gathered(static_cast<size_t>(world * n));
  for (size_t i = 0; i < local.size(); ++i) bits[i] = std::bit_cast<int64_t>(local[i]);
  if (device == DeviceKind::cpu) {
    comm.all_gather(Tensor(bits.data(), Shape{n}, DType::i64),
                    Tensor(gathered.data(), Shape{world * n}, DType::i64));
  } else {
    Arena scratch("norm exchange", flat_layout(n * (world + 1), DType::i64),
                  {.kind = MemoryKind::device, .category = MemoryCategory::scratch});
    const Tensor in(scratch.data(), Shape{n}, DType::i64, DeviceKind::cuda);
    const Tensor out(static_cast<int64_t*>(scratch.data()) + n, Shape{world * n}, DType::i64,
                     DeviceKind::cuda);
    copy_tensor(Tensor(bits.data(), Shape{n}, DType::i64), in);
    comm.all_gather(in, out, work_comm_stream());
    copy_tensor(out, Tensor(gathered.data(), Shape{world * n}, DType::i64));
  }
  std::vector<double> out(gathered.size());
  for (size_t i = 0; i < gathered.size(); ++i) out[i] = std::bit_cast<double>(gathered[i]);
  return out;
}

// Sum of squares (double) of each gradient slice, and the count of non-finite values over all of them, added
// to `non_finite`. On the GPU one kernel per slice writes into one device array read back once: a read-back
// per slice would wait, each time, behind the offload's gradient downloads on the copy engine.
#ifdef ZT_WITH_CUDA
// The first n per-slice statistics of `results` (written on the rank's stream), read back with one copy;
// their non-finite counts added to `non_finite`.
std::vector<double> read_back_grad_stats(const DeviceBuffer& results, size_t n, double& non_finite) {
  const cudaStream_t stream = work_stream();
  std::vector<gpu::GradStats> host(n);
  ZT_CUDA_CHECK(cudaMemcpyAsync(host.data(), results.data(), n * sizeof(gpu::GradStats),
                                cudaMemcpyDeviceToHost, stream));
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = host[i].sum_of_squares;
    non_finite += static_cast<double>(host[i].non_finite);
  }
  return out;
}
#endif

std::vector<double> sums_of_squares(const std::vector<Tensor>& slices, bool cpu, double& non_finite) {
  if (cpu) {
    std::vector<double> out(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) out[i] = sum_of_squares(host_span(slices[i]));
    return out;
  }
#ifdef ZT_WITH_CUDA
  DeviceBuffer results = device_allocator().allocate(slices.size() * sizeof(gpu::GradStats),
                                                     MemoryCategory::scratch, "gradient norm partials");
  for (size_t i = 0; i < slices.size(); ++i)
    gpu::grad_stats_async(slices[i], results.data_as<gpu::GradStats>() + i, work_stream());
  return read_back_grad_stats(results, slices.size(), non_finite);
#else
  ZT_FAIL("CUDA training needs a CUDA build");
#endif
}

}  // namespace

void GradientNorm::average_over_ranks() const {
  // 2. Mean over ranks on the CPU (true division, as torch divides); the GPU folds 1/W into the factor.
  // With offload the gradients already downloaded are divided too (the same float operation, so the
  // host copy equals the divided device values the norm is taken from).
  const auto w = static_cast<float>(comm_.world_size());
  for (const OwnedBlock& b : blocks_) {
    if (!plan_.streamed_gradients) {
      const Tensor grad = reducer_.block_gradients(b);
      for (float& x : host_span(grad)) x /= w;
    }
    if (offloaded_ != nullptr && offloaded_->downloaded(b.unit)) {
      const Tensor host_grad = offloaded_->host_gradients(b.unit);
      for (float& x : host_span(host_grad)) x /= w;
    }
  }
}

GradientSums GradientNorm::sums() const {
  const int W = comm_.world_size();
  const auto& units = partition_.units();
  const size_t U = units.size();
  const bool cpu = device_ == DeviceKind::cpu;
  // 3. Sums of squares per (rank, unit) slice, rank-major. Stage 0 holds every rank's slices itself.
  std::vector<double> sums(static_cast<size_t>(W) * U, 0.0);
  double non_finite = 0;
  bool early_stats = false;
#ifdef ZT_WITH_CUDA
  // The early gradient norm: the partials gradients_ready queued (the same slices, the same kernel).
  if (streams_.take_early_norm(U)) {
    early_stats = true;
    sums = read_back_grad_stats(reducer_.unit_stats_buffer(), U, non_finite);
  }
#endif
  if (early_stats) {
    // sums and non_finite are read back above
  } else if (plan_.stage == 0) {
    std::vector<Tensor> slices;
    for (int r = 0; r < W; ++r)
      for (size_t u = 0; u < U; ++u)
        slices.push_back(
            view(*reducer_.gradients(), DType::f32, partition_.slice_begin(u, r), units[u].slice_numel));
    sums = sums_of_squares(slices, cpu, non_finite);
  } else {
    std::vector<double> local;
    if (plan_.streamed_gradients) {  // the slices went down from the buckets: the host copies, or the
                                     // partials taken then
      // (step 5 checks that every unit's went down)
      if (cpu) {
        std::vector<Tensor> host_blocks;
        for (const OwnedBlock& b : blocks_) host_blocks.push_back(offloaded_->host_gradients(b.unit));
        local = sums_of_squares(host_blocks, true, non_finite);
      } else {
#ifdef ZT_WITH_CUDA
        local = read_back_grad_stats(reducer_.unit_stats_buffer(), U, non_finite);
#endif
      }
    } else {
      std::vector<Tensor> blocks;
      for (size_t u = 0; u < U; ++u) blocks.push_back(reducer_.block_gradients(blocks_[u]));
      local = sums_of_squares(blocks, cpu, non_finite);
    }
    local.push_back(non_finite);
    if (W == 1) {
      sums.assign(local.begin(), local.begin() + static_cast<std::ptrdiff_t>(U));
    } else {
      const std::vector<double> all = all_gather_doubles(comm_, local, device_);
      non_finite = 0;
      for (int r = 0; r < W; ++r) {
        for (size_t u = 0; u < U; ++u)
          sums[static_cast<size_t>(r) * U + u] = all[static_cast<size_t>(r) * (U + 1) + u];
        non_finite += all[static_cast<size_t>(r) * (U + 1) + U];
      }
    }
  }
  double total = 0;
  for (double x : sums) total += x;
  return {total, non_finite};
}

}  // namespace zt::optim
