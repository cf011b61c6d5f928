#include "optim/zero_step.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "optim/grad_clip.h"
#include "runtime/check.h"

namespace zt::optim {
namespace {

Tensor flat_f32(std::span<float> x) {
  return Tensor(x.data(), Shape{static_cast<int64_t>(x.size())}, DType::f32);
}

// Sum of one double per rank, added in rank order, identical on every rank. The communicator sums only
// floating types up to f32, and an f32 sum of squares would cost the clip factor precision the
// single-process norm (double) has, so each rank's double travels bit for bit through all_gather as the
// 64-bit pattern of an i64 ([1] per rank, [W] gathered).
double all_sum_double(Communicator& comm, double local) {
  const int world = comm.world_size();
  std::vector<int64_t> bits(static_cast<size_t>(world));
  int64_t mine = std::bit_cast<int64_t>(local);
  comm.all_gather(Tensor(&mine, Shape{1}, DType::i64), Tensor(bits.data(), Shape{world}, DType::i64));
  double sum = 0;
  for (int64_t b : bits) sum += std::bit_cast<double>(b);
  return sum;
}

}  // namespace

double zero2_step(Communicator& comm, std::span<float> grads, std::span<float> params, ZeroShardState state,
                  const ZeroPartition& partition, AdamW& adamw, double lr, double max_grad_norm) {
  const int rank = comm.rank();
  const int world = comm.world_size();
  ZT_CHECK(partition.world_size() == world, "zero2_step: partition is for ", partition.world_size(),
           " ranks, communicator has ", world);
  const auto total = static_cast<size_t>(partition.total_numel());
  const auto shard = static_cast<size_t>(partition.shard_numel());
  ZT_CHECK(grads.size() == total && params.size() == total, "zero2_step: grads [", grads.size(),
           "] and params [", params.size(), "] must both be [", total, "]");
  ZT_CHECK(state.exp_avg.size() == shard && state.exp_avg_sq.size() == shard, "zero2_step: exp_avg [",
           state.exp_avg.size(), "] and exp_avg_sq [", state.exp_avg_sq.size(), "] must both be [", shard,
           "]");

  const auto begin = static_cast<size_t>(partition.shard_begin(rank));
  const std::span<float> grad_shard = grads.subspan(begin, shard);
  const std::span<float> param_shard = params.subspan(begin, shard);
  const std::vector<ShardPiece>& pieces = partition.pieces(rank);
  auto piece_of = [](std::span<float> shard_buffer, const ShardPiece& p) {
    return shard_buffer.subspan(static_cast<size_t>(p.shard_offset), static_cast<size_t>(p.numel));
  };
  const int threads = adamw.num_threads();

  // 1. Rank r's block of the flat buffer becomes the rank-order sum of everyone's block r.
  comm.reduce_scatter_sum(flat_f32(grads), flat_f32(grad_shard));

  // 2-3. Mean over ranks (a true division, so W = 3 rounds like torch's div_), then the squared norm of the
  // pieces only: padding holds whatever the ranks' buffers had there and must not leak into the norm.
  const auto w = static_cast<float>(world);
  double local_sq = 0;
  for (const ShardPiece& p : pieces) {
    const std::span<float> g = piece_of(grad_shard, p);
    for (float& x : g) x /= w;
    local_sq += sum_of_squares(g, threads);
  }
  const double norm = std::sqrt(all_sum_double(comm, local_sq));
  if (!std::isfinite(norm)) return norm;
  if (max_grad_norm > 0) {
    const double coef = clip_coefficient(norm, max_grad_norm);
    if (coef < 1.0)
      for (const ShardPiece& p : pieces)
        scale_in_place(piece_of(grad_shard, p), static_cast<float>(coef), threads);
  }

  // 4. Shard-relative ranges over [shard] views of params and grads, matching the [shard] m and v.
  const std::vector<TensorRange> ranges = partition.shard_ranges(rank);
  adamw.begin_step();
  adamw.update(
      {.params = param_shard, .grads = grad_shard, .exp_avg = state.exp_avg, .exp_avg_sq = state.exp_avg_sq},
      ranges, lr);

  // 5. Everyone's updated shard into everyone's params (the input aliases this rank's block of the output).
  comm.all_gather(flat_f32(param_shard), flat_f32(params));
  return norm;
}

}  // namespace zt::optim
