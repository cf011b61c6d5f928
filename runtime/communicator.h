// Communicator: the collectives ZeRO needs (all-reduce, reduce-scatter, all-gather, broadcast, barrier) over
// a group of `world_size` ranks, behind one interface with two backends:
//
//   - in-process: N ranks are N threads of one process working on CPU tensors. Tests and CI run ZeRO with
//     world sizes 2-4 this way, without GPUs. Sums are taken in rank order (rank 0 + rank 1 + ...), so every
//     rank gets bit-identical results that do not depend on thread timing.
//   - NCCL (CUDA builds with NCCL): one rank per GPU; collectives are queued on the given stream.
//
// Shapes (n = elements per rank, W = world_size; tensors must be contiguous, only numel matters):
//   all_reduce_sum(x)            x [n] in/out: x = sum over ranks of x
//   reduce_scatter_sum(in, out)  in [W*n], out [n]: out = sum over ranks of in[rank*n, (rank+1)*n)
//   all_gather(in, out)          in [n], out [W*n]: out[s*n, (s+1)*n) = rank s's in
//   broadcast(x, root)           x [n] in/out: x = root's x
// In-place forms work: reduce_scatter with out aliasing in[rank*n ...], all_gather with in aliasing
// out[rank*n ...] (the ZeRO flat-buffer case: a rank's shard is a view into the padded full buffer).
// Sums take f32, bf16 and f16 (16-bit inputs are accumulated in f32 in-process and rounded once; NCCL
// reduces in the storage type); all_gather and broadcast move any dtype.
//
// Errors: a wrong size (reduce_scatter out != in / W, all_gather out != W * in), a non-contiguous tensor,
// or ranks disagreeing on the collective, dtype, sizes or root throw zt::Error naming the collective, the
// rank and the sizes. The in-process backend checks across ranks and throws on *every* rank (no rank is
// left waiting); NCCL checks only the calling rank's arguments (a cross-rank mismatch there hangs or
// corrupts, as in every NCCL program).
//
// A rank that fails outside a collective must call abort() (or hold an AbortGroupOnException guard) so the
// other ranks, blocked in a collective, throw "group aborted by rank r: why" instead of waiting forever.
//
//   auto comms = make_in_process_group(4);      // comms[r] belongs to the thread running rank r
//   std::thread t([&] { AbortGroupOnException guard(*comms[r]); comms[r]->all_reduce_sum(grads); });
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace zt {

// cudaStream_t in CUDA builds (converts implicitly); nullptr is the default stream. Ignored in-process.
using CommStream = void*;

enum class CollectiveKind : uint8_t { all_reduce_sum, reduce_scatter_sum, all_gather, broadcast, barrier };
std::string_view collective_name(CollectiveKind kind);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string_view backend_name() const = 0;  // "in-process", "nccl"

  virtual void all_reduce_sum(const Tensor& in_out, CommStream stream = nullptr) = 0;
  virtual void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream = nullptr) = 0;
  virtual void all_gather(const Tensor& input, const Tensor& output, CommStream stream = nullptr) = 0;
  virtual void broadcast(const Tensor& in_out, int root, CommStream stream = nullptr) = 0;
  // Returns once every rank has called barrier (NCCL: also synchronizes `stream`, so it blocks the host).
  virtual void barrier(CommStream stream = nullptr) = 0;

  // Marks the group failed: ranks waiting in (or later entering) a collective throw an error naming this
  // rank and `reason`. Never throws; safe to call from a catch block or a destructor.
  virtual void abort(std::string_view reason) noexcept = 0;
};

// Aborts the group if the scope is left by an exception, so one failing rank cannot hang the others.
class AbortGroupOnException {
 public:
  explicit AbortGroupOnException(Communicator& comm) : comm_(comm), exceptions_(std::uncaught_exceptions()) {}
  ~AbortGroupOnException() {
    if (std::uncaught_exceptions() > exceptions_) comm_.abort("rank left its work by an exception");
  }
  AbortGroupOnException(const AbortGroupOnException&) = delete;
  AbortGroupOnException& operator=(const AbortGroupOnException&) = delete;

 private:
  Communicator& comm_;
  int exceptions_;
};

// Checks one rank's own arguments (contiguity, device, dtype, the W*n / n size relation, root range).
// Returns "" when they are fine, else a message naming the collective, the rank and the sizes. Shared by
// the backends; `output` is ignored for all_reduce_sum and broadcast.
std::string collective_argument_problem(CollectiveKind kind, int rank, int world_size, const Tensor& input,
                                        const Tensor& output, int root, DeviceKind expected_device);

struct InProcessGroupOptions {
  // A rank waiting longer than this for the others aborts the group with a message naming the ranks that
  // never arrived (hang detection for tests). Zero: wait forever.
  std::chrono::milliseconds timeout{0};
};

// world_size communicators sharing one group; communicator r must be used by one thread (rank r) at a time.
std::vector<std::unique_ptr<Communicator>> make_in_process_group(int world_size,
                                                                 InProcessGroupOptions options = {});

#if defined(ZT_WITH_CUDA) && defined(ZT_WITH_NCCL)
// ncclUniqueId as plain bytes, so launchers (MPI) can broadcast it without including <nccl.h>.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};
NcclUniqueId make_nccl_unique_id();  // call on rank 0, send to the others
// One rank of a multi-process group (one process per GPU): ncclCommInitRank on `device`.
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size,
                                                     int device);
// One process driving several GPUs: communicator r runs on device_ids[r] (ncclCommInitAll). Drive each
// from its own host thread, as with the in-process group.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(std::span<const int> device_ids);
#endif

}  // namespace zt
