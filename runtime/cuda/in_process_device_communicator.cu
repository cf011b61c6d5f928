// The in-process device communicator: ranks are host threads, each driving its own stream on ONE GPU, and
// collectives are kernels and copies that read the other ranks' buffers directly (same device).
//
// Note [device rendezvous protocol]
// A collective on rank r, stream s_r:
//   1. record ready[r] on s_r (r's input is complete once s_r gets there); post the call and its buffers;
//      rendezvous A; every rank validates every post the same way (a mismatch throws on every rank before
//      anything is queued, and the group stays usable).
//   2. s_r waits for ready[q] of every rank q; queue the kernel or copies that read the peers' buffers and
//      write r's output, or r's scratch when the output overlaps bytes another rank reads (all_reduce always:
//      its output is the input everyone reads); record done[r] on s_r; rendezvous B.
//   3. s_r waits for done[q] of every q (no peer reads r's buffers any more); copy scratch -> output when it
//      was used; record finished on s_r. Work the caller queues on s_r after the call may overwrite r's
//      input and output.
// Every rank re-records its events only in its next collective, which it starts after rendezvous B of this
// one; every rank issues its waits on this collective's events before it arrives at B (ready) or before it
// arrives at the next A (done), so each cudaStreamWaitEvent sees this collective's record. The host never
// waits for the GPU, except when a scratch buffer grows (its old block may still be read by queued work).
//
// Sums run in rank order per element, ((x0 + x1) + x2) + ..., f32 from x0 as is and 16-bit types in f32 from
// 0 with one rounding: the host backend's order (runtime/communicator.cpp), so f32 results are bitwise
// equal and 16-bit ones too for finite values (NaN payloads may differ: the device rounding functions
// return a canonical NaN).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cuda/device_scope.h"
#include "runtime/cuda_check.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/in_process_group.h"

namespace zt {
namespace {

using detail::has_output;
using detail::InProcessGroup;
using detail::Post;

// Storage types of the sums and their f32 conversions; 16-bit values are handled as raw bits (zt::bf16 and
// zt::f16 are a uint16_t).
struct SumF32 {
  using T = float;
  static constexpr bool kStartFromZero = false;  // the host copies rank 0's value, then adds
  __device__ static float load(T x) { return x; }
  __device__ static T store(float x) { return x; }
};
struct SumBf16 {
  using T = uint16_t;
  static constexpr bool kStartFromZero = true;  // the host accumulates from 0.0f (so -0 sums to +0)
  __device__ static float load(T x) { return __uint_as_float(static_cast<uint32_t>(x) << 16); }
  __device__ static T store(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
struct SumF16 {
  using T = uint16_t;
  static constexpr bool kStartFromZero = true;
  __device__ static float load(T x) { return __half2float(__ushort_as_half(x)); }
  __device__ static T store(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

template <typename T>
struct PeerPointers {
  const T* p[kMaxDeviceGroupWorld];  // [world] each rank's first summed element
};

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// out[i] = rank-order sum over r < world of in.p[r][i], i < packs * V; V elements per thread (16-byte
// loads when V > 1, for which the caller checked the alignment of every pointer).
template <typename Op, int V>
__global__ void rank_order_sum_kernel(PeerPointers<typename Op::T> in, int world, int64_t packs,
                                      typename Op::T* out) {
  using P = Pack<typename Op::T, V>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs; i += stride) {
    const P first = reinterpret_cast<const P*>(in.p[0])[i];
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = Op::kStartFromZero ? __fadd_rn(0.0f, Op::load(first.v[v])) : Op::load(first.v[v]);
    for (int r = 1; r < world; ++r) {
      const P x = reinterpret_cast<const P*>(in.p[r])[i];
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = __fadd_rn(acc[v], Op::load(x.v[v]));
    }
    P result;
#pragma unroll
    for (int v = 0; v < V; ++v) result.v[v] = Op::store(acc[v]);
    reinterpret_cast<P*>(out)[i] = result;
  }
}

template <typename Op, int V>
void launch_rank_order_sum(const PeerPointers<typename Op::T>& in, int world, int64_t count,
                           typename Op::T* out, int sm_count, cudaStream_t stream) {
  const int64_t packs = count / V;
  if (packs == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = std::clamp<int64_t>((packs + kBlock - 1) / kBlock, 1, int64_t{sm_count} * 4);
  rank_order_sum_kernel<Op, V><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(in, world, packs, out);
  ZT_CUDA_CHECK_LAUNCH("rank_order_sum_kernel");
}

// dst[i] = sum over ranks of inputs[r][i], i < count: 16-byte vectors where every pointer allows, the rest
// (or everything, when one is misaligned) one element per thread.
template <typename Op>
void rank_order_sum(const std::vector<const std::byte*>& inputs, int64_t count, std::byte* dst, int sm_count,
                    cudaStream_t stream) {
  using T = typename Op::T;
  constexpr int V = 16 / sizeof(T);
  PeerPointers<T> in{};
  bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  for (size_t r = 0; r < inputs.size(); ++r) {
    in.p[r] = reinterpret_cast<const T*>(inputs[r]);
    aligned = aligned && reinterpret_cast<uintptr_t>(inputs[r]) % 16 == 0;
  }
  const int world = static_cast<int>(inputs.size());
  T* out = reinterpret_cast<T*>(dst);
  const int64_t vector_count = aligned ? count / V * V : 0;
  launch_rank_order_sum<Op, V>(in, world, vector_count, out, sm_count, stream);
  if (vector_count == count) return;
  for (int r = 0; r < world; ++r) in.p[r] += vector_count;
  launch_rank_order_sum<Op, 1>(in, world, count - vector_count, out + vector_count, sm_count, stream);
}

// Where `ptr` must be device memory of `device`: "" when it is, else what it is.
std::string memory_problem(const void* ptr, const char* what, int device) {
  cudaPointerAttributes attributes{};
  const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // the query's failure must not surface at an unrelated later call
    return str(what, " is not CUDA memory (", cudaGetErrorString(status), ")");
  }
  if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged)
    return str(what, " is host memory; this group needs memory of CUDA device ", device);
  if (attributes.device != device)
    return str(what, " is memory of CUDA device ", attributes.device, "; this group runs on device ", device);
  return "";
}

bool overlaps(const std::byte* a_begin, const std::byte* a_end, const std::byte* b_begin,
              const std::byte* b_end) {
  return a_begin < b_end && b_begin < a_end;
}

// What the ranks of one device group share: the rendezvous, the device and each rank's two events.
struct DeviceGroupShared {
  DeviceGroupShared(int world_size, int device_index, InProcessGroupOptions options)
      : rendezvous(world_size, options), device(device_index) {
    DeviceScope scope(device);
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    for (int r = 0; r < world_size; ++r) {
      ready.push_back(nullptr);
      ZT_CUDA_CHECK(cudaEventCreateWithFlags(&ready.back(), cudaEventDisableTiming));
      done.push_back(nullptr);
      ZT_CUDA_CHECK(cudaEventCreateWithFlags(&done.back(), cudaEventDisableTiming));
    }
  }
  ~DeviceGroupShared() {
    for (cudaEvent_t e : ready) (void)cudaEventDestroy(e);
    for (cudaEvent_t e : done) (void)cudaEventDestroy(e);
  }
  DeviceGroupShared(const DeviceGroupShared&) = delete;
  DeviceGroupShared& operator=(const DeviceGroupShared&) = delete;

  InProcessGroup rendezvous;
  int device;
  int sm_count = 1;
  std::vector<cudaEvent_t> ready;  // [world] rank r's input is ready (see Note [device rendezvous protocol])
  std::vector<cudaEvent_t> done;   // [world] rank r has finished reading the other ranks' buffers
};

class InProcessDeviceCommunicator final : public Communicator {
 public:
  InProcessDeviceCommunicator(std::shared_ptr<DeviceGroupShared> group, int rank)
      : group_(std::move(group)), rank_(rank) {
    DeviceScope scope(group_->device);
    ZT_CUDA_CHECK(cudaEventCreateWithFlags(&finished_, cudaEventDisableTiming));
  }
  ~InProcessDeviceCommunicator() override {
    // The scratch block returns to the allocator's cache, reusable at once: queued copies from it must end.
    if (finished_recorded_) (void)cudaEventSynchronize(finished_);
    (void)cudaEventDestroy(finished_);
  }
  InProcessDeviceCommunicator(const InProcessDeviceCommunicator&) = delete;
  InProcessDeviceCommunicator& operator=(const InProcessDeviceCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return group_->rendezvous.world_size(); }
  std::string_view backend_name() const override { return "in-process-device"; }
  int cuda_device() const override { return group_->device; }

  void all_reduce_sum(const Tensor& in_out, CommStream stream) override {
    run(CollectiveKind::all_reduce_sum, in_out, in_out, 0, stream);
  }
  void reduce_scatter_sum(const Tensor& input, const Tensor& output, CommStream stream) override {
    run(CollectiveKind::reduce_scatter_sum, input, output, 0, stream);
  }
  void all_gather(const Tensor& input, const Tensor& output, CommStream stream) override {
    run(CollectiveKind::all_gather, input, output, 0, stream);
  }
  void broadcast(const Tensor& in_out, int root, CommStream stream) override {
    run(CollectiveKind::broadcast, in_out, in_out, root, stream);
  }
  // Like NCCL's: returns when every rank's work queued before the barrier has finished (each stream waits
  // for every rank's ready event, then the host waits for the stream).
  void barrier(CommStream stream) override { run(CollectiveKind::barrier, Tensor(), Tensor(), 0, stream); }
  void abort(std::string_view reason) noexcept override { group_->rendezvous.abort(rank_, reason); }

 private:
  const Post& post(int rank) const { return group_->rendezvous.post(rank); }

  void run(CollectiveKind kind, const Tensor& input, const Tensor& output, int root, CommStream comm_stream) {
    DeviceScope scope(group_->device);
    const auto stream = static_cast<cudaStream_t>(comm_stream);
    const int world = world_size();
    InProcessGroup& rendezvous = group_->rendezvous;
    std::string problem =
        collective_argument_problem(kind, rank_, world, input, output, root, DeviceKind::cuda);
    if (problem.empty() && kind != CollectiveKind::barrier) problem = memory_problems(kind, input, output);
    try {
      ZT_CUDA_CHECK(cudaEventRecord(group_->ready[static_cast<size_t>(rank_)], stream));
    } catch (const std::exception& e) {  // the peers are (or will be) waiting for this rank's post
      rendezvous.abort(rank_, e.what());
      throw;
    }
    rendezvous.post_and_wait(rank_, Post{.kind = kind,
                                         .dtype = input.defined() ? input.dtype() : DType::f32,
                                         .input = static_cast<const std::byte*>(input.data()),
                                         .output = static_cast<std::byte*>(output.data()),
                                         .input_numel = input.numel(),
                                         .output_numel = has_output(kind) ? output.numel() : input.numel(),
                                         .root = root,
                                         .problem = std::move(problem)});
    rendezvous.validate_posts();

    // Past validation every rank goes on to rendezvous B: a rank failing before it must abort the group.
    bool used_scratch = false;
    try {
      if (finished_recorded_ && stream != last_stream_)  // the scratch may still be read on the old stream
        ZT_CUDA_CHECK(cudaStreamWaitEvent(stream, finished_, 0));
      for (int q = 0; q < world; ++q)
        if (q != rank_) ZT_CUDA_CHECK(cudaStreamWaitEvent(stream, group_->ready[static_cast<size_t>(q)], 0));
      used_scratch = enqueue(kind, root, stream);
      ZT_CUDA_CHECK(cudaEventRecord(group_->done[static_cast<size_t>(rank_)], stream));
    } catch (const std::exception& e) {
      rendezvous.abort(rank_, str("rank ", rank_, " failed in ", collective_name(kind), ": ", e.what()));
      (void)cudaStreamSynchronize(stream);  // this rank's queued reads of the peers' buffers end first
      throw;
    }
    try {
      rendezvous.wait(rank_);
    } catch (...) {
      (void)cudaStreamSynchronize(stream);
      throw;
    }
    for (int q = 0; q < world; ++q)
      if (q != rank_) ZT_CUDA_CHECK(cudaStreamWaitEvent(stream, group_->done[static_cast<size_t>(q)], 0));
    if (used_scratch)
      ZT_CUDA_CHECK(
          cudaMemcpyAsync(output.data(), scratch_.data(), output.nbytes(), cudaMemcpyDeviceToDevice, stream));
    ZT_CUDA_CHECK(cudaEventRecord(finished_, stream));
    finished_recorded_ = true;
    last_stream_ = stream;
    if (kind == CollectiveKind::barrier) ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  std::string memory_problems(CollectiveKind kind, const Tensor& input, const Tensor& output) const {
    const std::string where = str(collective_name(kind), " on rank ", rank_, " of ", world_size(), ": ");
    const int device = group_->device;
    if (auto p = memory_problem(input.data(), has_output(kind) ? "input" : "tensor", device);
        input.numel() > 0 && !p.empty())
      return where + p;
    if (auto p = memory_problem(output.data(), "output", device);
        has_output(kind) && output.numel() > 0 && !p.empty())
      return where + p;
    return "";
  }

  // Queues this rank's reads and writes (after the waits for every ready event). Returns whether the result
  // went to the scratch buffer, to be copied to the output once every peer is done reading.
  bool enqueue(CollectiveKind kind, int root, cudaStream_t stream) {
    const Post& me = post(rank_);
    const int world = world_size();
    const size_t element = dtype_size(me.dtype);
    switch (kind) {
      case CollectiveKind::all_reduce_sum:
      case CollectiveKind::reduce_scatter_sum: {
        const int64_t n = me.output_numel;
        const int64_t begin = kind == CollectiveKind::reduce_scatter_sum ? rank_ * n : 0;
        const bool direct = output_is_private(kind, root);
        std::byte* dst = direct ? me.output : scratch(static_cast<size_t>(n) * element);
        std::vector<const std::byte*> inputs;
        for (int r = 0; r < world; ++r)
          inputs.push_back(post(r).input + static_cast<size_t>(begin) * element);
        if (me.dtype == DType::f32)
          rank_order_sum<SumF32>(inputs, n, dst, group_->sm_count, stream);
        else if (me.dtype == DType::bf16)
          rank_order_sum<SumBf16>(inputs, n, dst, group_->sm_count, stream);
        else  // f16: validation admits no other sum dtype
          rank_order_sum<SumF16>(inputs, n, dst, group_->sm_count, stream);
        return !direct;
      }
      case CollectiveKind::all_gather: {
        const size_t block = static_cast<size_t>(me.input_numel) * element;
        const bool direct = output_is_private(kind, root);
        std::byte* dst = direct ? me.output : scratch(block * static_cast<size_t>(world));
        for (int s = 0; s < world; ++s) {
          std::byte* to = dst + static_cast<size_t>(s) * block;
          if (to != post(s).input && block > 0)  // the in-place form's own block is already there
            ZT_CUDA_CHECK(cudaMemcpyAsync(to, post(s).input, block, cudaMemcpyDeviceToDevice, stream));
        }
        return !direct;
      }
      case CollectiveKind::broadcast: {
        const size_t bytes = static_cast<size_t>(me.input_numel) * element;
        if (rank_ == root || bytes == 0) return false;
        const bool direct = output_is_private(kind, root);
        std::byte* dst = direct ? me.output : scratch(bytes);
        ZT_CUDA_CHECK(cudaMemcpyAsync(dst, post(root).input, bytes, cudaMemcpyDeviceToDevice, stream));
        return !direct;
      }
      case CollectiveKind::barrier:
        return false;
    }
    return false;
  }

  // True when no rank reads this rank's output bytes during the collective, so the result can be written
  // there at once. The documented in-place forms qualify: reduce_scatter into the own block of the input
  // (each element is read, then written, by one thread; peers read other blocks) and all_gather from the
  // own block of the output (that block is not written).
  bool output_is_private(CollectiveKind kind, int root) const {
    if (kind == CollectiveKind::all_reduce_sum) return false;  // its output is the input every rank reads
    const Post& me = post(rank_);
    const size_t element = dtype_size(me.dtype);
    const std::byte* out_begin = me.output;
    const std::byte* out_end = out_begin + static_cast<size_t>(me.output_numel) * element;
    for (int q = 0; q < world_size(); ++q) {
      if (kind == CollectiveKind::broadcast && q != root) continue;  // only the root's buffer is read
      const Post& p = post(q);
      const std::byte* in_begin = p.input;
      const std::byte* in_end = in_begin + static_cast<size_t>(p.input_numel) * element;
      if (q == rank_ && kind == CollectiveKind::reduce_scatter_sum &&
          out_begin == in_begin + static_cast<size_t>(rank_ * me.output_numel) * element)
        continue;
      if (q == rank_ && kind == CollectiveKind::all_gather &&
          in_begin == out_begin + static_cast<size_t>(rank_ * me.input_numel) * element)
        continue;
      if (overlaps(out_begin, out_end, in_begin, in_end)) return false;
    }
    return true;
  }

  std::byte* scratch(size_t bytes) {
    if (scratch_.size() < bytes) {
      if (finished_recorded_)
        ZT_CUDA_CHECK(cudaEventSynchronize(finished_));  // queued copies from the old block
      scratch_.reset();
      scratch_ = device_allocator(group_->device)
                     .allocate(bytes, MemoryCategory::communication, "in-process device group scratch");
    }
    return scratch_.data_as<std::byte>();
  }

  std::shared_ptr<DeviceGroupShared> group_;
  int rank_;
  DeviceBuffer scratch_;            // [output bytes] results that must wait for the peers' reads
  cudaEvent_t finished_ = nullptr;  // end of this rank's last collective (scratch free again)
  bool finished_recorded_ = false;
  cudaStream_t last_stream_ = nullptr;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_device_group(int world_size, int device,
                                                                        InProcessGroupOptions options) {
  ZT_CHECK(world_size >= 1 && world_size <= kMaxDeviceGroupWorld, "make_in_process_device_group: world_size ",
           world_size, " is not in [1, ", kMaxDeviceGroupWorld, "]");
  const int devices = cuda_device_count();
  ZT_CHECK(device >= 0 && device < devices, "make_in_process_device_group: CUDA device ", device,
           " does not exist (this machine has ", devices, ")");
  auto group = std::make_shared<DeviceGroupShared>(world_size, device, options);
  std::vector<std::unique_ptr<Communicator>> comms;
  comms.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r)
    comms.push_back(std::make_unique<InProcessDeviceCommunicator>(group, r));
  return comms;
}

}  // namespace zt
