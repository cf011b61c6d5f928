// The in-process communicator: ranks are threads sharing one InProcessGroup.
//
// Note [in-process collective protocol]
// Every collective is: post (each rank publishes what it called and its buffers) -> rendezvous -> validate
// and read (each rank checks all posts the same way and reads the other ranks' inputs into its own scratch)
// -> rendezvous -> write (each rank writes only its own output). Reads of others' buffers all happen
// between the two rendezvous and writes only after the second, so in-place forms (output aliasing input)
// are safe and a rank's buffers are free again when its call returns. Validation after the first rendezvous
// sees every rank's arguments, so a mismatch throws the same error on every rank instead of leaving ranks
// waiting for a partner that already threw.
#include "runtime/communicator.h"

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "runtime/check.h"
#include "runtime/in_process_group.h"

namespace zt {

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce_sum:
      return "all_reduce_sum";
    case CollectiveKind::reduce_scatter_sum:
      return "reduce_scatter_sum";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::barrier:
      return "barrier";
  }
  return "unknown collective";
}

namespace {

using detail::has_output;
using detail::is_sum;

std::string tensor_problem(const Tensor& t, const char* what, DeviceKind expected_device) {
  if (!t.defined()) return str(what, " is undefined (null data)");
  if (!t.is_contiguous()) return str(what, " ", t.describe(), " is not contiguous");
  if (t.device() != expected_device)
    return str(what, " ", t.describe(), " is on the wrong device (this backend needs ",
               expected_device == DeviceKind::cpu ? "cpu" : "cuda", " tensors)");
  return "";
}

}  // namespace

std::string collective_argument_problem(CollectiveKind kind, int rank, int world_size, const Tensor& input,
                                        const Tensor& output, int root, DeviceKind expected_device) {
  const std::string where = str(collective_name(kind), " on rank ", rank, " of ", world_size, ": ");
  if (kind == CollectiveKind::barrier) return "";
  if (auto p = tensor_problem(input, has_output(kind) ? "input" : "tensor", expected_device); !p.empty())
    return where + p;
  if (is_sum(kind) &&
      !(input.dtype() == DType::f32 || input.dtype() == DType::bf16 || input.dtype() == DType::f16))
    return str(where, "sums take f32, bf16 or f16, got ", dtype_name(input.dtype()));
  if (kind == CollectiveKind::broadcast && (root < 0 || root >= world_size))
    return str(where, "root ", root, " is not a rank in [0, ", world_size, ")");
  if (!has_output(kind)) return "";
  if (auto p = tensor_problem(output, "output", expected_device); !p.empty()) return where + p;
  if (output.dtype() != input.dtype())
    return str(where, "input is ", dtype_name(input.dtype()), " but output is ", dtype_name(output.dtype()));
  if (kind == CollectiveKind::reduce_scatter_sum && input.numel() != output.numel() * world_size)
    return str(where, "input has ", input.numel(), " elements and output ", output.numel(),
               "; input must be world_size (", world_size, ") x output = ", output.numel() * world_size);
  if (kind == CollectiveKind::all_gather && output.numel() != input.numel() * world_size)
    return str(where, "input has ", input.numel(), " elements and output ", output.numel(),
               "; output must be world_size (", world_size, ") x input = ", input.numel() * world_size);
  return "";
}

namespace {

using detail::InProcessGroup;
using detail::Post;

// 16-bit storage <-> f32 for the rank-order sums, which round once, at the end (f32 sums in place).
float load_float(const bf16* p, int64_t i) {
  return bf16_to_float(p[i]);
}
float load_float(const f16* p, int64_t i) {
  return f16_to_float(p[i]);
}
void store_float(bf16* p, int64_t i, float v) {
  p[i] = float_to_bf16(v);
}
void store_float(f16* p, int64_t i, float v) {
  p[i] = float_to_f16(v);
}

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  std::string_view backend_name() const override { return "in-process"; }

  void all_reduce_sum(const Tensor& in_out, CommStream) override {
    run(CollectiveKind::all_reduce_sum, in_out, in_out, 0);
  }
  void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream) override {
    run(CollectiveKind::reduce_scatter_sum, input, output, 0);
  }
  void all_gather(const Tensor& input, const Tensor& output, CommStream) override {
    run(CollectiveKind::all_gather, input, output, 0);
  }
  void broadcast(const Tensor& in_out, int root, CommStream) override {
    run(CollectiveKind::broadcast, in_out, in_out, root);
  }
  void barrier(CommStream) override { group_->post_and_wait(rank_, Post{}); }
  int cuda_device() const override { return -1; }
  void abort(std::string_view reason) noexcept override { group_->abort(rank_, reason); }

 private:
  void run(CollectiveKind kind, const Tensor& input, const Tensor& output, int root) {
    const int world = world_size();
    Post mine{
        .kind = kind,
        .dtype = input.dtype(),
        .input = static_cast<const std::byte*>(input.data()),
        .input_numel = input.numel(),
        .output_numel = has_output(kind) ? output.numel() : input.numel(),
        .root = root,
        .problem = collective_argument_problem(kind, rank_, world, input, output, root, DeviceKind::cpu)};
    group_->post_and_wait(rank_, std::move(mine));
    group_->validate_posts();
    const int64_t out_numel = group_->post(rank_).output_numel;
    const size_t out_bytes = static_cast<size_t>(out_numel) * dtype_size(input.dtype());
    scratch_.resize(out_bytes);
    switch (input.dtype()) {
      case DType::f32:
        read_into_scratch<float>(kind, out_numel, root);
        break;
      case DType::bf16:
        read_into_scratch<bf16>(kind, out_numel, root);
        break;
      case DType::f16:
        read_into_scratch<f16>(kind, out_numel, root);
        break;
      default:  // only gathers and broadcasts reach here (validated): raw copies, counted in bytes
        read_into_scratch<std::byte>(kind, out_numel * static_cast<int64_t>(dtype_size(input.dtype())), root);
        break;
    }
    group_->wait(rank_);  // every rank has finished reading every input
    if (out_bytes > 0) std::memcpy(output.data(), scratch_.data(), out_bytes);
  }

  template <typename T>
  void read_into_scratch(CollectiveKind kind, int64_t out_numel, int root) {
    const int world = world_size();
    T* out = reinterpret_cast<T*>(scratch_.data());
    auto input_of = [&](int r) { return reinterpret_cast<const T*>(group_->post(r).input); };
    switch (kind) {
      case CollectiveKind::all_reduce_sum:
      case CollectiveKind::reduce_scatter_sum: {
        if constexpr (!std::is_same_v<T, std::byte>) {
          // all_reduce reads all n elements, reduce_scatter this rank's block [rank*n, (rank+1)*n).
          const int64_t begin = kind == CollectiveKind::reduce_scatter_sum ? rank_ * out_numel : 0;
          if constexpr (std::is_same_v<T, float>) {
            // Rank-order sum, elementwise: ((x0 + x1) + x2) + ..., the same on every rank.
            std::memcpy(out, input_of(0) + begin, static_cast<size_t>(out_numel) * sizeof(float));
            for (int r = 1; r < world; ++r) {
              const float* in = input_of(r) + begin;
              for (int64_t i = 0; i < out_numel; ++i) out[i] += in[i];
            }
          } else {
            accumulator_.assign(static_cast<size_t>(out_numel), 0.0f);
            for (int r = 0; r < world; ++r) {
              const T* in = input_of(r) + begin;
              for (int64_t i = 0; i < out_numel; ++i)
                accumulator_[static_cast<size_t>(i)] += load_float(in, i);
            }
            for (int64_t i = 0; i < out_numel; ++i) store_float(out, i, accumulator_[static_cast<size_t>(i)]);
          }
        }
        return;
      }
      case CollectiveKind::all_gather: {
        const int64_t n = out_numel / world;
        for (int r = 0; r < world; ++r)
          std::memcpy(out + r * n, input_of(r), static_cast<size_t>(n) * sizeof(T));
        return;
      }
      case CollectiveKind::broadcast:
        std::memcpy(out, input_of(root), static_cast<size_t>(out_numel) * sizeof(T));
        return;
      case CollectiveKind::barrier:
        return;
    }
  }

  std::shared_ptr<InProcessGroup> group_;
  int rank_;
  std::vector<std::byte> scratch_;  // this rank's result, [output bytes], written out after the rendezvous
  std::vector<float> accumulator_;  // f32 sums of 16-bit inputs, [output elements]
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_group(int world_size,
                                                                 InProcessGroupOptions options) {
  ZT_CHECK(world_size >= 1, "make_in_process_group: world_size must be >= 1, got ", world_size);
  auto group = std::make_shared<InProcessGroup>(world_size, options);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return comms;
}

#ifndef ZT_WITH_CUDA
std::vector<std::unique_ptr<Communicator>> make_in_process_device_group(int, int, InProcessGroupOptions) {
  ZT_FAIL(
      "make_in_process_device_group: this build has no CUDA backend (configured with ZT_CUDA=OFF or "
      "without nvcc)");
}
#endif

}  // namespace zt
