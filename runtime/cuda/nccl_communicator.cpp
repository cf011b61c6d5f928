// The NCCL communicator: one rank per GPU, every collective queued on the caller's stream, so collectives
// on a communication stream are ordered against compute by events, not host syncs (runtime/stream.h).
// Only the calling rank's arguments are checked (collective_argument_problem); NCCL cannot see the other
// ranks' arguments without an extra collective.
#ifdef ZT_WITH_NCCL

#include <nccl.h>

#include <cstring>

#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cuda_check.h"
#include "runtime/device_allocator.h"

namespace zt {
namespace {

static_assert(sizeof(NcclUniqueId::bytes) == sizeof(ncclUniqueId), "NcclUniqueId must hold an ncclUniqueId");

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

// Makes the communicator's device current for the duration of a call and restores the caller's after, so a
// thread driving one rank never leaves another rank's device selected.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    ZT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) ZT_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }  // best effort: destructors must not throw
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world_size, int device)
      : comm_(comm), rank_(rank), world_size_(world_size), device_(device) {}
  ~NcclCommunicator() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);  // error ignored: nothing useful to do in a destructor
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string_view backend_name() const override { return "nccl"; }

  void all_reduce_sum(const Tensor& in_out, CommStream stream) override {
    check(CollectiveKind::all_reduce_sum, in_out, in_out, 0);
    DeviceScope scope(device_);
    ZT_NCCL_CHECK(ncclAllReduce(in_out.data(), in_out.data(), static_cast<size_t>(in_out.numel()),
                                nccl_dtype(in_out.dtype()), ncclSum, comm_, as_stream(stream)));
  }

  void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream) override {
    check(CollectiveKind::reduce_scatter_sum, input, output, 0);
    DeviceScope scope(device_);
    // recvcount is the per-rank shard n; the input holds world_size * n.
    ZT_NCCL_CHECK(ncclReduceScatter(input.data(), output.data(), static_cast<size_t>(output.numel()),
                                    nccl_dtype(input.dtype()), ncclSum, comm_, as_stream(stream)));
  }

  void all_gather(const Tensor& input, const Tensor& output, CommStream stream) override {
    check(CollectiveKind::all_gather, input, output, 0);
    DeviceScope scope(device_);
    // sendcount is the per-rank shard n; the output receives world_size * n.
    ZT_NCCL_CHECK(ncclAllGather(input.data(), output.data(), static_cast<size_t>(input.numel()),
                                nccl_dtype(input.dtype()), comm_, as_stream(stream)));
  }

  void broadcast(const Tensor& in_out, int root, CommStream stream) override {
    check(CollectiveKind::broadcast, in_out, in_out, root);
    DeviceScope scope(device_);
    ZT_NCCL_CHECK(ncclBroadcast(in_out.data(), in_out.data(), static_cast<size_t>(in_out.numel()),
                                nccl_dtype(in_out.dtype()), root, comm_, as_stream(stream)));
  }

  // NCCL has no barrier: an all-reduce of one float stands in for it, and the stream sync makes it block
  // the host like the in-process barrier (barriers are for startup and checkpoints, not the step).
  void barrier(CommStream stream) override {
    DeviceScope scope(device_);
    if (!barrier_token_)
      barrier_token_ = device_allocator(device_).allocate(sizeof(float), MemoryCategory::communication,
                                                          "nccl barrier token");
    ZT_NCCL_CHECK(ncclAllReduce(barrier_token_.data(), barrier_token_.data(), 1, ncclFloat32, ncclSum, comm_,
                                as_stream(stream)));
    ZT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  }

  // ncclCommAbort also unblocks this rank's pending NCCL work; the other ranks' NCCL calls fail or time out
  // on their own (NCCL has no cross-process abort message). The communicator is unusable afterwards.
  void abort(std::string_view) noexcept override {
    if (comm_ == nullptr) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  static cudaStream_t as_stream(CommStream stream) { return static_cast<cudaStream_t>(stream); }

  void check(CollectiveKind kind, const Tensor& input, const Tensor& output, int root) const {
    ZT_CHECK(comm_ != nullptr, collective_name(kind), " on rank ", rank_,
             ": the NCCL communicator was aborted");
    const std::string problem =
        collective_argument_problem(kind, rank_, world_size_, input, output, root, DeviceKind::cuda);
    if (!problem.empty()) ZT_FAIL(problem);
  }

  ncclComm_t comm_ = nullptr;
  int rank_;
  int world_size_;
  int device_;
  DeviceBuffer barrier_token_;  // [1] f32, allocated at the first barrier
};

}  // namespace

NcclUniqueId make_nccl_unique_id() {
  ncclUniqueId id;
  ZT_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int world_size,
                                                     int device) {
  ZT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "make_nccl_communicator: rank ", rank,
           " is not in [0, ", world_size, ")");
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.bytes.data(), sizeof(nccl_id));
  DeviceScope scope(device);
  ncclComm_t comm = nullptr;
  ZT_NCCL_CHECK(ncclCommInitRank(&comm, world_size, nccl_id, rank));
  return std::make_unique<NcclCommunicator>(comm, rank, world_size, device);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(std::span<const int> device_ids) {
  ZT_CHECK(!device_ids.empty(), "make_nccl_group: no devices given");
  const int world_size = static_cast<int>(device_ids.size());
  std::vector<ncclComm_t> raw(device_ids.size(), nullptr);
  ZT_NCCL_CHECK(ncclCommInitAll(raw.data(), world_size, device_ids.data()));
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(device_ids.size());
  for (int r = 0; r < world_size; ++r)
    comms.push_back(std::make_unique<NcclCommunicator>(raw[static_cast<size_t>(r)], r, world_size,
                                                       device_ids[static_cast<size_t>(r)]));
  return comms;
}

}  // namespace zt

#endif  // ZT_WITH_NCCL
