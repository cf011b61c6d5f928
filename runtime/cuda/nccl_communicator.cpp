// The NCCL communicator: one rank per GPU, every collective queued on the caller's stream, so collectives
// on a communication stream are ordered against compute by events, not host syncs (runtime/stream.h).
// Only the calling rank's arguments are checked (collective_argument_problem); NCCL cannot see the other
// ranks' arguments without an extra collective (make_checked_communicator adds one).
//
// Note [NCCL watchdog]
// NCCL kernels wait for their peers forever: a rank that died, hangs or called a different collective
// leaves the others spinning, and a host sync on their streams never returns. So the communicator is
// created non-blocking (config.blocking = 0: set-up and enqueue never block the host inside NCCL; an
// ncclInProgress answer is polled to completion with ncclCommGetAsyncError, set-up under init_timeout) and,
// with NcclOptions::timeout > 0, a watchdog thread polls every poll_interval:
//   - an event recorded after each collective (cudaEventQuery): one still pending `timeout` after its
//     collective was queued is a hang;
//   - ncclCommGetAsyncError: a network or peer failure NCCL saw in the background.
// Either ends in ncclCommAbort, which also makes the NCCL kernels exit, so host syncs return; the failure
// is kept and thrown by the next call on the communicator (and by check_async_error), naming the rank, the
// collective and its sequence number. The normal path pays one cudaEventRecord per collective. All NCCL
// calls on the communicator hold mutex_ (NCCL communicators are not thread-safe), except ncclCommAbort,
// which runs after comm_ was cleared under the mutex, so the failure is visible while the abort proceeds.
#ifdef ZT_WITH_NCCL

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>

#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cuda/device_scope.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"
#include "runtime/log.h"

namespace zt {
namespace {

static_assert(sizeof(NcclUniqueId::bytes) == sizeof(ncclUniqueId), "NcclUniqueId must hold an ncclUniqueId");

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  ZT_FAIL("nccl communicator: no NCCL type for dtype ", dtype_name(dtype));
}

std::string nccl_error_text(ncclResult_t result) {
  const char* last = ncclGetLastError(nullptr);
  if (last == nullptr || last[0] == '\0') return ncclGetErrorString(result);
  return str(ncclGetErrorString(result), " (", last, ")");
}

// Errors after which the communicator still works (the call had no effect); anything else is fatal.
bool nccl_error_is_local(ncclResult_t result) {
  return result == ncclInvalidArgument || result == ncclInvalidUsage;
}

bool past(Clock::time_point start, std::chrono::milliseconds timeout) {
  return timeout.count() > 0 && Clock::now() - start > timeout;
}

// Polls a non-blocking communicator until the operation it is busy with has been issued (ncclSuccess).
// query(&state) is ncclCommGetAsyncError on it. Returns "" then, else why not (an NCCL error, or `timeout`
// passed); the caller aborts the communicator.
template <typename Query>
std::string wait_until_issued(Query&& query, std::chrono::milliseconds timeout) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = query(&state);
    if (status != ncclSuccess) return nccl_error_text(status);
    if (state == ncclSuccess) return "";
    if (state != ncclInProgress) return nccl_error_text(state);
    if (past(start, timeout)) return str("not done after ", timeout.count(), " ms");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, int device, NcclOptions options,
                   std::function<void(bool)> on_destroy)
      : comm_(comm),
        rank_(rank),
        world_size_(world_size),
        device_(device),
        options_(options),
        on_destroy_(std::move(on_destroy)) {
    if (options_.timeout.count() > 0) watchdog_ = std::thread([this] { watchdog_loop(); });
  }

  ~NcclCommunicator() override {
    if (watchdog_.joinable()) {
      {
        std::lock_guard lock(mutex_);
        stopping_ = true;
      }
      cv_.notify_all();
      watchdog_.join();
    }
    bool clean = false;
    ncclComm_t comm = nullptr;
    {
      std::lock_guard lock(mutex_);
      comm = std::exchange(comm_, nullptr);
      clean = failure_.empty() && std::uncaught_exceptions() == 0;
    }
    if (comm != nullptr) {
      int previous_device = device_;
      (void)cudaGetDevice(&previous_device);
      (void)cudaSetDevice(device_);
      // ncclCommFinalize flushes this rank's queued collectives; when unwinding (a rank failed) or when the
      // flush does not complete, abort rather than wait for peers that may be gone.
      clean = clean && finalize(comm);
      if (clean)
        (void)ncclCommDestroy(comm);
      else
        (void)ncclCommAbort(comm);
      (void)cudaSetDevice(previous_device);
    }
    for (const Pending& p : pending_) (void)cudaEventDestroy(p.event);
    for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
    if (on_destroy_) {
      try {
        on_destroy_(clean);
      } catch (const std::exception& e) {  // a destructor must not throw; the process is ending anyway
        ZT_LOG(error) << "nccl communicator rank " << rank_ << ": after destruction: " << e.what();
      }
    }
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "nccl"; }
  int cuda_device() const override { return device_; }

  void all_reduce_sum(const Tensor& in_out, CommStream stream) override {
    run(CollectiveKind::all_reduce_sum, in_out, in_out, 0, stream, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(in_out.data(), in_out.data(), static_cast<size_t>(in_out.numel()),
                           nccl_dtype(in_out.dtype()), ncclSum, comm, s);
    });
  }

  void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream) override {
    // recvcount is the per-rank shard n; the input holds world_size * n.
    run(CollectiveKind::reduce_scatter_sum, input, output, 0, stream, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclReduceScatter(input.data(), output.data(), static_cast<size_t>(output.numel()),
                               nccl_dtype(input.dtype()), ncclSum, comm, s);
    });
  }

  void all_gather(const Tensor& input, const Tensor& output, CommStream stream) override {
    // sendcount is the per-rank shard n; the output receives world_size * n.
    run(CollectiveKind::all_gather, input, output, 0, stream, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllGather(input.data(), output.data(), static_cast<size_t>(input.numel()),
                           nccl_dtype(input.dtype()), comm, s);
    });
  }

  void broadcast(const Tensor& in_out, int root, CommStream stream) override {
    run(CollectiveKind::broadcast, in_out, in_out, root, stream, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(in_out.data(), in_out.data(), static_cast<size_t>(in_out.numel()),
                           nccl_dtype(in_out.dtype()), root, comm, s);
    });
  }

  // NCCL has no barrier: an all-reduce of one float stands in for it, and the host waits for it like the
  // in-process barrier (barriers are for startup and checkpoints, not the step). The wait polls, so a
  // missing rank ends in the timeout error instead of a host sync that never returns.
  void barrier(CommStream stream) override {
    if (!barrier_token_) {
      DeviceScope scope(device_);
      barrier_token_ = device_allocator(device_).allocate(sizeof(float), MemoryCategory::communication,
                                                          "nccl barrier token");
    }
    const Tensor token(barrier_token_.data(), {1}, DType::f32, DeviceKind::cuda);
    cudaEvent_t done =
        run(CollectiveKind::barrier, token, token, 0, stream, [&](ncclComm_t comm, cudaStream_t s) {
          return ncclAllReduce(token.data(), token.data(), 1, ncclFloat32, ncclSum, comm, s);
        });
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        throw_if_failed_locked();
        const cudaError_t status = cudaEventQuery(done);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) ZT_CUDA_CHECK(status);
        poll_unless_watched(lock);
        throw_if_failed_locked();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  void abort(std::string_view reason) noexcept override {
    try {
      fail(str("nccl communicator: rank ", rank_, " of ", world_size_, " aborted it: ", reason));
    } catch (...) {  // allocating the message failed: abort without it
      fail_without_message();
    }
  }

  void check_async_error() override {
    std::unique_lock lock(mutex_);
    poll_unless_watched(lock);
    throw_if_failed_locked();
  }

 private:
  struct Pending {
    cudaEvent_t event;  // recorded on the collective's stream right after it
    CollectiveKind kind;
    uint64_t sequence;
    DType dtype;
    int64_t numel;
    Clock::time_point queued;
  };

  // Checks the arguments, issues `call` under the mutex and, with a watchdog or for a barrier, records the
  // completion event it watches (returned; nullptr when none was recorded).
  template <typename Call>
  cudaEvent_t run(CollectiveKind kind, const Tensor& input, const Tensor& output, int root, CommStream stream,
                  Call&& call) {
    const std::string problem =
        collective_argument_problem(kind, rank_, world_size_, input, output, root, DeviceKind::cuda);
    if (!problem.empty()) ZT_FAIL(problem);
    DeviceScope scope(device_);
    const auto s = static_cast<cudaStream_t>(stream);
    std::unique_lock lock(mutex_);
    throw_if_failed_locked();
    const uint64_t sequence = sequence_++;
    const std::string what = str(collective_name(kind), " #", sequence, " (", dtype_name(input.dtype()), ", ",
                                 input.numel(), " elements)");
    const ncclResult_t result = call(comm_, s);
    if (result == ncclInProgress) {
      lock.unlock();
      const std::string why = wait_until_issued(
          [&](ncclResult_t* state) {
            std::lock_guard query_lock(mutex_);
            // Aborted meanwhile (watchdog, abort()): failure_ says why, thrown below.
            return comm_ == nullptr ? ncclInvalidUsage : ncclCommGetAsyncError(comm_, state);
          },
          options_.timeout);
      if (!why.empty()) fail(str(where(), "NCCL could not issue ", what, ": ", why));
      lock.lock();
      throw_if_failed_locked();
    } else if (result != ncclSuccess) {
      const std::string message = str(where(), what, " failed: ", nccl_error_text(result));
      if (nccl_error_is_local(result)) ZT_FAIL(message);
      lock.unlock();
      fail(message);
      lock.lock();
      throw_if_failed_locked();
    }
    if (options_.timeout.count() == 0 && kind != CollectiveKind::barrier) return nullptr;
    cudaEvent_t event = take_event_locked();
    const cudaError_t recorded = cudaEventRecord(event, s);
    if (recorded != cudaSuccess) {
      free_events_.push_back(event);
      ZT_CUDA_CHECK(recorded);
    }
    pending_.push_back({event, kind, sequence, input.dtype(), input.numel(), Clock::now()});
    return event;
  }

  std::string where() const { return str("nccl communicator rank ", rank_, " of ", world_size_, ": "); }

  void throw_if_failed_locked() const {
    if (!failure_.empty()) throw Error(failure_);
    if (comm_ == nullptr) throw Error(where() + "the communicator was aborted");  // abort() without a message
  }

  cudaEvent_t take_event_locked() {
    if (!free_events_.empty()) {
      cudaEvent_t e = free_events_.back();
      free_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  // Without a watchdog thread nobody else would notice a hang or an NCCL error, so the rank's own thread
  // polls; with one, the rank's thread only reads the failure (it never blocks in an abort).
  void poll_unless_watched(std::unique_lock<std::mutex>& lock) {
    if (!watchdog_.joinable()) poll_and_abort(lock);
  }

  // poll_locked, then the abort it decided on, outside the mutex.
  void poll_and_abort(std::unique_lock<std::mutex>& lock) {
    ncclComm_t doomed = poll_locked();
    if (doomed == nullptr) return;
    lock.unlock();
    abort_comm(doomed);
    lock.lock();
  }

  // Retires finished collectives; a collective past the timeout or an NCCL error fails the communicator:
  // returns the communicator to abort then (nullptr otherwise).
  ncclComm_t poll_locked() {
    if (comm_ == nullptr) return nullptr;
    while (!pending_.empty()) {
      const cudaError_t status = cudaEventQuery(pending_.front().event);
      if (status == cudaErrorNotReady) break;
      if (status != cudaSuccess)
        return record_failure_locked(str(where(), "CUDA error while ", describe(pending_.front()), " ran: ",
                                         cudaGetErrorName(status), ": ", cudaGetErrorString(status)));
      free_events_.push_back(pending_.front().event);
      pending_.pop_front();
    }
    ncclResult_t state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm_, &state);
    if (status != ncclSuccess) state = status;
    if (state != ncclSuccess && state != ncclInProgress)
      return record_failure_locked(
          str(where(), "NCCL reported an asynchronous error",
              pending_.empty() ? std::string() : str(" during ", describe(pending_.front())), ": ",
              nccl_error_text(state)));
    // Collectives complete in queue order on one stream; across streams the oldest pending one is the
    // first to exceed the timeout anyway.
    if (!pending_.empty() && past(pending_.front().queued, options_.timeout))
      return record_failure_locked(str(where(), describe(pending_.front()), " did not complete within ",
                                       options_.timeout.count(),
                                       " ms (a rank is missing, hung, died or called a different "
                                       "collective); the communicator was aborted"));
    return nullptr;
  }

  std::string describe(const Pending& p) const {
    return str(collective_name(p.kind), " #", p.sequence, " (", dtype_name(p.dtype), ", ", p.numel,
               " elements)");
  }

  // Records the first failure and aborts the communicator (outside the mutex: ncclCommAbort may take a while
  // and the failure should be visible to the rank's thread meanwhile).
  void fail(std::string message) {
    ncclComm_t comm = nullptr;
    {
      std::lock_guard lock(mutex_);
      comm = record_failure_locked(std::move(message));
    }
    if (comm != nullptr) abort_comm(comm);
  }
  void fail_without_message() noexcept {
    ncclComm_t comm = nullptr;
    {
      std::lock_guard lock(mutex_);
      comm = std::exchange(comm_, nullptr);
    }
    if (comm != nullptr) abort_comm(comm);
  }
  ncclComm_t record_failure_locked(std::string message) {
    if (failure_.empty()) {
      failure_ = std::move(message);
      ZT_LOG(error) << failure_;
    }
    return std::exchange(comm_, nullptr);
  }
  void abort_comm(ncclComm_t comm) noexcept {
    (void)cudaSetDevice(device_);
    (void)ncclCommAbort(comm);
  }

  bool finalize(ncclComm_t comm) {
    const ncclResult_t result = ncclCommFinalize(comm);
    if (result != ncclSuccess && result != ncclInProgress) return false;
    return wait_until_issued([&](ncclResult_t* state) { return ncclCommGetAsyncError(comm, state); },
                             options_.timeout)
        .empty();
  }

  void watchdog_loop() {
    (void)cudaSetDevice(device_);
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      cv_.wait_for(lock, options_.poll_interval, [&] { return stopping_; });
      if (stopping_) break;
      poll_and_abort(lock);
    }
  }

  std::mutex mutex_;  // guards everything below that the watchdog also touches
  std::condition_variable cv_;
  ncclComm_t comm_ = nullptr;  // nullptr once aborted
  std::string failure_;        // the first failure; every later call throws it
  uint64_t sequence_ = 0;      // collectives issued so far, for messages
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  bool stopping_ = false;

  const int rank_;
  const int world_size_;
  const int device_;
  const NcclOptions options_;
  std::function<void(bool)> on_destroy_;
  DeviceBuffer barrier_token_;  // [1] f32, allocated at the first barrier
  std::thread watchdog_;        // started last: it uses the members above
};

ncclConfig_t nonblocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // see Note [NCCL watchdog]
  return config;
}

// Waits for the set-up of a non-blocking communicator; aborts it and throws when it fails or times out.
void wait_for_init(ncclComm_t comm, int rank, int world_size, const NcclOptions& options) {
  const std::string why = wait_until_issued(
      [&](ncclResult_t* state) { return ncclCommGetAsyncError(comm, state); }, options.init_timeout);
  if (why.empty()) return;
  (void)ncclCommAbort(comm);
  ZT_FAIL("nccl communicator rank ", rank, " of ", world_size, ": ncclCommInitRank failed: ", why,
          " (did every rank start, on its own GPU, and can the ranks reach each other?)");
}

}  // namespace

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  ZT_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size,
                                                     int device, NcclOptions options,
                                                     std::function<void(bool)> on_destroy) {
  ZT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "make_nccl_communicator: rank ", rank,
           " is not in [0, ", world_size, ")");
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.bytes.data(), sizeof(nccl_id));
  DeviceScope scope(device);
  ncclConfig_t config = nonblocking_config();
  ncclComm_t comm = nullptr;
  const ncclResult_t result = ncclCommInitRankConfig(&comm, world_size, nccl_id, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    if (comm != nullptr) (void)ncclCommAbort(comm);
    ZT_FAIL("nccl communicator rank ", rank, " of ", world_size, ": ncclCommInitRank on device ", device,
            " failed: ", nccl_error_text(result));
  }
  wait_for_init(comm, rank, world_size, options);
  return std::make_unique<NcclCommunicator>(comm, rank, world_size, device, options, std::move(on_destroy));
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(std::span<const int> device_ids,
                                                           NcclOptions options) {
  ZT_CHECK(!device_ids.empty(), "make_nccl_group: no devices given");
  ZT_CHECK(std::unordered_set<int>(device_ids.begin(), device_ids.end()).size() == device_ids.size(),
           "make_nccl_group: a device is listed twice; NCCL runs one rank per GPU (use "
           "make_in_process_device_group for several ranks on one GPU)");
  const int world_size = static_cast<int>(device_ids.size());
  const NcclUniqueId id = make_nccl_unique_id();
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.bytes.data(), sizeof(nccl_id));
  std::vector<ncclComm_t> raw(device_ids.size(), nullptr);
  {
    DeviceScope scope(device_ids[0]);
    ncclConfig_t config = nonblocking_config();
    ZT_NCCL_CHECK(ncclGroupStart());
    ncclResult_t result = ncclSuccess;
    for (int r = 0; r < world_size && (result == ncclSuccess || result == ncclInProgress); ++r) {
      ZT_CUDA_CHECK(cudaSetDevice(device_ids[static_cast<size_t>(r)]));
      result = ncclCommInitRankConfig(&raw[static_cast<size_t>(r)], world_size, nccl_id, r, &config);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (result == ncclSuccess || result == ncclInProgress) result = end;
    if (result != ncclSuccess && result != ncclInProgress) {
      for (ncclComm_t c : raw)
        if (c != nullptr) (void)ncclCommAbort(c);
      ZT_FAIL("make_nccl_group: ncclCommInitRank failed: ", nccl_error_text(result));
    }
  }
  for (int r = 0; r < world_size; ++r) {
    try {
      wait_for_init(raw[static_cast<size_t>(r)], r, world_size, options);
    } catch (...) {
      for (int q = r + 1; q < world_size; ++q) (void)ncclCommAbort(raw[static_cast<size_t>(q)]);
      for (int q = 0; q < r; ++q) (void)ncclCommAbort(raw[static_cast<size_t>(q)]);
      throw;
    }
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(device_ids.size());
  for (int r = 0; r < world_size; ++r)
    comms.push_back(std::make_unique<NcclCommunicator>(raw[static_cast<size_t>(r)], r, world_size,
                                                       device_ids[static_cast<size_t>(r)], options,
                                                       std::function<void(bool)>{}));
  return comms;
}

}  // namespace zt

#endif  // ZT_WITH_NCCL
