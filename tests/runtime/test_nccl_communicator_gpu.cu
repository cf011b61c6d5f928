// The NCCL communicator on the GPUs at hand: with one GPU a world of one (every collective, f32 and bf16,
// on a non-default stream, both factories), argument errors naming the rank and the op, the watchdog turning
// a collective that cannot complete into an error, abort; with two GPUs or more, a two-rank group against
// the host backend (a + b is the same in any order, so bitwise).
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#if defined(ZT_WITH_CUDA) && defined(ZT_WITH_NCCL)
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/cuda_check.h"
#include "runtime/stream.h"
#include "tests/support/gpu_timing.cuh"
#include "tests/support/rank_threads.h"

namespace zt {
namespace {

using test::Comms;
using test::expect_all_succeeded;
using test::run_ranks;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A device buffer of floats with host round trips on a stream.
struct DeviceFloats {
  explicit DeviceFloats(int64_t n) : n(n) { ZT_CUDA_CHECK(cudaMalloc(&data, n * sizeof(float))); }
  ~DeviceFloats() { (void)cudaFree(data); }
  Tensor tensor(int64_t offset, int64_t numel, DType dtype = DType::f32) const {
    return Tensor(data + offset, {numel}, dtype, DeviceKind::cuda);
  }
  void upload(const std::vector<float>& v, cudaStream_t s) const {
    ZT_CUDA_CHECK(cudaMemcpyAsync(data, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  }
  std::vector<float> download(cudaStream_t s) const {
    std::vector<float> v(static_cast<size_t>(n));
    ZT_CUDA_CHECK(cudaMemcpyAsync(v.data(), data, v.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
    ZT_CUDA_CHECK(cudaStreamSynchronize(s));
    return v;
  }
  float* data = nullptr;
  int64_t n;
};

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * static_cast<float>(i % 1013) + 0.25f;
  return v;
}

// With one rank every collective is a copy: the result must equal the input exactly.
void check_world_of_one(Communicator& comm) {
  EXPECT_EQ(comm.backend_name(), "nccl");
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_EQ(comm.cuda_device(), 0);
  Stream stream;
  const int64_t n = 4099;
  const std::vector<float> values = ramp(2 * n, 0.5f);
  DeviceFloats buffer(2 * n);
  buffer.upload(values, stream);
  comm.all_reduce_sum(buffer.tensor(0, n), stream.get());
  comm.reduce_scatter_sum(buffer.tensor(0, n), buffer.tensor(n, n), stream.get());  // copy to the second half
  EXPECT_EQ(buffer.download(stream), [&] {
    std::vector<float> want(values.begin(), values.begin() + n);
    want.insert(want.end(), values.begin(), values.begin() + n);
    return want;
  }());
  buffer.upload(values, stream);
  comm.all_gather(buffer.tensor(n, n), buffer.tensor(0, n), stream.get());
  comm.broadcast(buffer.tensor(n, n), 0, stream.get());
  comm.all_reduce_sum(buffer.tensor(0, n, DType::bf16), stream.get());  // bf16 is ncclBfloat16
  std::vector<float> want(values.begin() + n, values.end());
  want.insert(want.end(), values.begin() + n, values.end());
  EXPECT_EQ(buffer.download(stream), want);
  comm.barrier(stream.get());
  comm.check_async_error();
}

TEST(NcclCommunicator, WorldOfOneFromBothFactories) {
  ZT_SKIP_WITHOUT_GPU();
  const int devices[] = {0};
  auto group = make_nccl_group(devices);
  check_world_of_one(*group[0]);
  auto single = make_nccl_communicator(make_nccl_unique_id(), 0, 1, 0);
  check_world_of_one(*single);
}

TEST(NcclCommunicator, ArgumentErrorsNameTheRankAndTheCollective) {
  ZT_SKIP_WITHOUT_GPU();
  auto comm = make_nccl_communicator(make_nccl_unique_id(), 0, 1, 0);
  DeviceFloats buffer(16);
  std::vector<float> host(8);
  EXPECT_NE(error_of([&] {
              comm->all_reduce_sum(Tensor(host.data(), {8}, DType::f32));
            }).find("all_reduce_sum on rank 0 of 1: tensor f32[8] cpu is on the wrong device"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              comm->all_gather(buffer.tensor(0, 4), buffer.tensor(4, 5));
            }).find("all_gather on rank 0 of 1: input has 4 elements and output 5"),
            std::string::npos);
  EXPECT_NE(error_of([&] { comm->broadcast(buffer.tensor(0, 4), 1); }).find("root 1 is not a rank"),
            std::string::npos);
  comm->all_reduce_sum(buffer.tensor(0, 16));  // still usable
  comm->barrier();
}

TEST(NcclCommunicator, DuplicateDevicesAreRefused) {
  ZT_SKIP_WITHOUT_GPU();
  const int devices[] = {0, 0};
  EXPECT_NE(error_of([&] { make_nccl_group(devices); }).find("a device is listed twice"), std::string::npos);
}

// A kernel holds the stream, so the all_reduce queued behind it cannot complete: after the 300 ms timeout
// the watchdog aborts the communicator, and check_async_error (then every later call) throws naming the rank
// and the collective. A helper thread releases the kernel after 3 s (ncclCommAbort's frees wait for it).
TEST(NcclCommunicator, WatchdogTurnsACollectiveThatCannotCompleteIntoAnError) {
  ZT_SKIP_WITHOUT_GPU();
  int* flag = nullptr;
  ZT_CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* device_flag = nullptr;
  ZT_CUDA_CHECK(cudaHostGetDevicePointer(&device_flag, flag, 0));
  DeviceFloats buffer(1024);
  Stream stream;
  {
    auto comm = make_nccl_communicator(
        make_nccl_unique_id(), 0, 1, 0,
        {.timeout = std::chrono::milliseconds(300), .poll_interval = std::chrono::milliseconds(10)});
    comm->all_reduce_sum(buffer.tensor(0, 1024), stream.get());
    stream.synchronize();
    comm->check_async_error();  // a completed collective is no failure, however long ago
    test::wait_for_flag_kernel<<<1, 1, 0, stream>>>(device_flag, 20'000'000'000ull);
    ZT_CUDA_CHECK_LAUNCH("wait_for_flag_kernel");
    const auto queued = std::chrono::steady_clock::now();
    comm->all_reduce_sum(buffer.tensor(0, 1024), stream.get());
    std::thread release([flag] {
      std::this_thread::sleep_for(std::chrono::seconds(3));
      *reinterpret_cast<volatile int*>(flag) = 1;
    });
    std::string error;
    while (error.empty() && std::chrono::steady_clock::now() - queued < std::chrono::seconds(15)) {
      error = error_of([&] { comm->check_async_error(); });
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - queued).count();
    release.join();
    EXPECT_NE(error.find("nccl communicator rank 0 of 1: all_reduce_sum #1 (f32, 1024 elements) did not "
                         "complete within 300 ms"),
              std::string::npos)
        << error;
    EXPECT_LT(seconds, 2.5) << "the watchdog reported only after " << seconds << " s";
    EXPECT_NE(error_of([&] {
                comm->all_gather(buffer.tensor(0, 4), buffer.tensor(4, 4));
              }).find("did not complete"),
              std::string::npos);
    stream.synchronize();
  }
  ZT_CUDA_CHECK(cudaFreeHost(flag));
}

TEST(NcclCommunicator, AbortMakesLaterCallsThrowTheReason) {
  ZT_SKIP_WITHOUT_GPU();
  auto comm = make_nccl_communicator(make_nccl_unique_id(), 0, 1, 0);
  DeviceFloats buffer(8);
  comm->barrier();
  comm->abort("loss became NaN");
  EXPECT_NE(error_of([&] { comm->all_reduce_sum(buffer.tensor(0, 8)); }).find("aborted it: loss became NaN"),
            std::string::npos);
  EXPECT_NE(error_of([&] { comm->barrier(); }).find("loss became NaN"), std::string::npos);
}

TEST(NcclCommunicator, CheckedDecoratorOverNccl) {
  ZT_SKIP_WITHOUT_GPU();
  auto comm = make_checked_communicator(make_nccl_communicator(make_nccl_unique_id(), 0, 1, 0));
  DeviceFloats buffer(8);
  Stream stream;
  buffer.upload(ramp(8, 1.0f), stream);
  comm->all_reduce_sum(buffer.tensor(0, 8), stream.get());
  EXPECT_EQ(buffer.download(stream), ramp(8, 1.0f));
  EXPECT_EQ(comm->backend_name(), "checked nccl");
}

// Two GPUs: each rank's sums must equal the host backend's (two-term sums are order-free) on both ranks.
TEST(NcclCommunicator, TwoGpusMatchTheHostBackend) {
  ZT_SKIP_WITHOUT_GPU();
  int count = 0;
  ZT_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs 2 GPUs, this machine has " << count;
  const int devices[] = {0, 1};
  auto comms = make_nccl_group(devices);
  const int64_t n = 4099;
  std::vector<std::vector<float>> got(2);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    ZT_CUDA_CHECK(cudaSetDevice(c.cuda_device()));
    Stream stream;
    DeviceFloats buffer(3 * n);
    std::vector<float> in = ramp(2 * n, 0.37f * static_cast<float>(c.rank() + 1));
    in.resize(static_cast<size_t>(3 * n), 0.0f);
    buffer.upload(in, stream);
    c.reduce_scatter_sum(buffer.tensor(0, 2 * n), buffer.tensor(2 * n, n), stream.get());
    c.all_gather(buffer.tensor(2 * n, n), buffer.tensor(0, 2 * n), stream.get());
    got[static_cast<size_t>(c.rank())] = buffer.download(stream);
  }));
  std::vector<std::vector<float>> want(2);
  auto host = make_in_process_group(2);
  expect_all_succeeded(run_ranks(host, [&](Communicator& c) {
    std::vector<float>& v = want[static_cast<size_t>(c.rank())];
    v = ramp(2 * n, 0.37f * static_cast<float>(c.rank() + 1));
    v.resize(static_cast<size_t>(3 * n), 0.0f);
    c.reduce_scatter_sum(Tensor(v.data(), {2 * n}, DType::f32), Tensor(v.data() + 2 * n, {n}, DType::f32));
    c.all_gather(Tensor(v.data() + 2 * n, {n}, DType::f32), Tensor(v.data(), {2 * n}, DType::f32));
  }));
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
}

}  // namespace
}  // namespace zt

#endif  // ZT_WITH_CUDA && ZT_WITH_NCCL
