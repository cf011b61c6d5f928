// Communicator: the collectives ZeRO needs (all-reduce, reduce-scatter, all-gather, broadcast, barrier) over
// a group of `world_size` ranks, behind one interface with these backends:
//
//   - in-process, host tensors (make_in_process_group): N ranks are N threads of one process working on CPU
//     tensors. Tests and CI run ZeRO with world sizes 2-4 this way, without GPUs. Sums are taken in rank
//     order (rank 0 + rank 1 + ...), so every rank gets bit-identical results that do not depend on timing.
//   - in-process, device tensors (make_in_process_device_group): N threads share ONE GPU, each rank with its
//     own stream. Collectives are GPU work on the caller's stream, ordered by events, never by host syncs:
//     ranks meet at a host rendezvous publishing their buffers and an "input ready" event; each rank's stream
//     waits for the others' events and runs a kernel reading their buffers directly (same device); a second
//     rendezvous publishes "done reading" events that each stream waits for before the call returns, so no
//     rank's later work overwrites a buffer a peer still reads. Results are bitwise the host backend's
//     (same rank-order f32 sums; 16-bit sums accumulate in f32 and round once). How ZeRO runs N ranks on the
//     one H200, and the GPU tests' reference.
//   - NCCL (make_nccl_communicator / make_nccl_group; CUDA builds with NCCL): one rank per GPU; collectives
//     are queued on the given stream. A watchdog thread polls an event recorded after each collective and
//     ncclCommGetAsyncError: a collective not done `NcclOptions::timeout` after it was queued (a rank
//     missing, hung or dead) or an NCCL error aborts the communicator (ncclCommAbort), and the next call on
//     it throws naming the rank and the collective. The normal path costs one event record per collective.
//   - multi-process launch (runtime/mpi_launch.h): `mpirun -np N train_mrpc ...` gives each process its rank
//     from the launcher's environment; make_launch_communicator builds the NCCL communicator (rank 0's NCCL
//     id reaches the others over MPI) or, for one rank, whatever the device needs.
//   - checked (make_checked_communicator): a debug decorator around any of the above. Before each collective
//     the ranks all_gather a descriptor (sequence number, op, dtype, sizes, root); when they disagree, every
//     rank throws an error showing the last collectives of each disagreeing rank side by side, instead of
//     hanging or mixing up buffers. Costs an extra small collective (and on devices a host sync) per call.
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
// rank and the sizes. The in-process backends check across ranks and throw on *every* rank (no rank is
// left waiting); NCCL checks only the calling rank's arguments (a cross-rank mismatch there hangs until the
// watchdog fires, or corrupts; wrap it in make_checked_communicator to find such bugs).
//
// A rank that fails outside a collective must call abort() (or hold an AbortGroupOnException guard) so the
// other ranks, blocked in a collective, throw "group aborted by rank r: why" instead of waiting forever
// (in-process). NCCL has no cross-process abort: the failing process exits, and mpirun ends the others.
//
//   auto comms = make_in_process_group(4);      // comms[r] belongs to the thread running rank r
//   std::thread t([&] { AbortGroupOnException guard(*comms[r]); comms[r]->all_reduce_sum(grads); });
//
//   LaunchInfo launch = detect_launch();        // mpirun -np N, or one process (runtime/mpi_launch.h)
//   auto comm = make_launch_communicator(launch, DeviceKind::cuda);   // drives GPU launch.local_rank
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
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
  virtual std::string_view backend_name() const = 0;  // "in-process", "in-process-device", "nccl", ...
  // Where the tensors passed to this communicator must live: -1 for host memory, else the CUDA device.
  virtual int cuda_device() const = 0;

  virtual void all_reduce_sum(const Tensor& in_out, CommStream stream = nullptr) = 0;
  virtual void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream = nullptr) = 0;
  virtual void all_gather(const Tensor& input, const Tensor& output, CommStream stream = nullptr) = 0;
  virtual void broadcast(const Tensor& in_out, int root, CommStream stream = nullptr) = 0;
  // Returns once every rank has called barrier (NCCL: also synchronizes `stream`, so it blocks the host).
  virtual void barrier(CommStream stream = nullptr) = 0;

  // Marks the group failed: ranks waiting in (or later entering) a collective throw an error naming this
  // rank and `reason`. Never throws; safe to call from a catch block or a destructor.
  virtual void abort(std::string_view reason) noexcept = 0;

  // Throws the failure a background check found (NCCL: a collective past its timeout, an asynchronous NCCL
  // error); a no-op for backends whose errors surface in the call itself. Every collective starts with it,
  // so a failure surfaces at the next collective at the latest; call it after host syncs to learn sooner.
  virtual void check_async_error() {}
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

// world_size ranks over the one CUDA device `device` (tensors must be device memory of it; streams are the
// callers', nullptr meaning the legacy default stream). Same checks, abort and timeout as the host group;
// the timeout covers the host rendezvous (a rank that never calls). At most kMaxDeviceGroupWorld ranks.
// Needs a CUDA build (throws otherwise). all_reduce_sum and outputs that overlap another rank's input go
// through a per-rank scratch buffer (grown on demand, with a host sync when it grows); the ZeRO forms
// (reduce_scatter into the own block, all_gather from it) write in place.
// After a failed collective (abort, timeout), synchronize the device before freeing the buffers passed to
// it: a peer's already queued kernel may still read them.
inline constexpr int kMaxDeviceGroupWorld = 16;
std::vector<std::unique_ptr<Communicator>> make_in_process_device_group(int world_size, int device,
                                                                        InProcessGroupOptions options = {});

struct CheckedCommunicatorOptions {
  int history = 8;  // collectives per rank shown in a mismatch report
};
// The collective-sequence debug mode described above. Takes over `inner`; every rank of the group must be
// wrapped (the descriptor exchange is itself a collective).
std::unique_ptr<Communicator> make_checked_communicator(std::unique_ptr<Communicator> inner,
                                                        CheckedCommunicatorOptions options = {});

struct NcclOptions {
  // A collective or barrier not done this long after it was queued aborts the communicator (a peer is
  // missing, hung or dead); the next call throws naming the rank and the op. It counts from the enqueue, so
  // it must cover the compute a comm stream waits for. Zero: no watchdog; barrier and destruction wait
  // forever.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // How long ncclCommInitRank may wait for every rank to join (ranks may start minutes apart). Zero: forever.
  std::chrono::milliseconds init_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds poll_interval{20};  // how often the watchdog looks
};

#if defined(ZT_WITH_CUDA) && defined(ZT_WITH_NCCL)
// ncclUniqueId as plain bytes, so launchers (MPI) can broadcast it without including <nccl.h>.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};
NcclUniqueId make_nccl_unique_id();  // call on rank 0, send to the others
// One rank of a multi-process group (one process per GPU): a non-blocking ncclCommInitRankConfig on
// `device`, waited for up to options.init_timeout (a rank that never starts is an error, not a hang).
// on_destroy, if set, runs after the NCCL communicator is released, with clean = false when it had failed
// or is destroyed during stack unwinding (mpi_launch finalizes MPI only on clean = true).
std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size,
                                                     int device, NcclOptions options = {},
                                                     std::function<void(bool clean)> on_destroy = {});
// One process driving several GPUs: communicator r runs on device_ids[r] (one NCCL group of
// ncclCommInitRankConfig calls). Drive each from its own host thread, as with the in-process group. NCCL
// refuses the same device twice (use make_in_process_device_group to run ranks on one GPU).
std::vector<std::unique_ptr<Communicator>> make_nccl_group(std::span<const int> device_ids,
                                                           NcclOptions options = {});
#endif

}  // namespace zt
