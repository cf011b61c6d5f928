// make_in_process_device_group: ranks are threads with their own streams on one GPU. Every collective (plain
// and in-place forms, every root, f32 / bf16 / f16 sums, world 1-4) is compared bitwise with the host
// backend on the same inputs, over each rank's whole buffer (so writes outside the output show too). Each
// rank's buffer is produced on its own stream after a rank-dependent GPU sleep, so a rank that read a peer
// before its "input ready" event would read the NaN sentinel (without those waits 52 of the 73 cases fail
// on the H200). A stress test repeats in-place all_reduces, whose write of each rank's buffer is safe only
// because every stream waits for the peers' "done reading" events.
// Errors, timeout and abort behave like the host group's; the checked decorator works over device ranks.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA
#include <cuda_runtime.h>

#include <cmath>
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

// Values whose sums round differently in every order, so a wrong summation order shows in the bits.
float awkward_value(int rank, int64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.7 * rank) * 3.1e-3 +
                            1.0 / (rank + 3.0));
}

// One rank's memory for a collective: a byte arena holding the input and output (apart, or overlapping in
// the in-place forms), as element offsets.
struct Layout {
  int64_t arena = 0;  // elements
  int64_t in_offset = 0, in_numel = 0;
  int64_t out_offset = 0, out_numel = 0;
};

struct Case {
  int world;
  CollectiveKind kind;
  bool in_place;  // reduce_scatter into the own block / all_gather from the own block
  int root;       // broadcast
  DType dtype;
  int64_t n;  // elements per rank
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << collective_name(c.kind) << (c.in_place ? " in place" : "") << " world " << c.world << " root "
      << c.root << " " << dtype_name(c.dtype) << " n " << c.n;
}

Layout layout_of(const Case& c, int rank) {
  const int64_t w = c.world, n = c.n;
  switch (c.kind) {
    case CollectiveKind::reduce_scatter_sum:
      if (c.in_place) return {w * n, 0, w * n, rank * n, n};
      return {w * n + n, 0, w * n, w * n, n};
    case CollectiveKind::all_gather:
      if (c.in_place) return {w * n, rank * n, n, 0, w * n};
      return {n + w * n, 0, n, n, w * n};
    default:  // all_reduce, broadcast: one in/out buffer
      return {n, 0, n, 0, n};
  }
}

// The arena before the collective: inputs hold values, everything else the NaN sentinel (0xFF bytes).
std::vector<std::byte> initial_arena(const Case& c, int rank) {
  const Layout l = layout_of(c, rank);
  const size_t element = dtype_size(c.dtype);
  std::vector<std::byte> arena(static_cast<size_t>(l.arena) * element, std::byte{0xFF});
  for (int64_t i = 0; i < l.in_numel; ++i) {
    std::byte* at = arena.data() + static_cast<size_t>(l.in_offset + i) * element;
    const float v = awkward_value(rank, i) * (c.dtype == DType::f32 ? 1.0f : 100.0f);
    if (c.dtype == DType::f32) std::memcpy(at, &v, 4);
    const uint16_t half_bits = c.dtype == DType::bf16 ? float_to_bf16(v).bits : float_to_f16(v).bits;
    if (c.dtype == DType::bf16 || c.dtype == DType::f16) std::memcpy(at, &half_bits, 2);
    if (c.dtype == DType::i64) {
      const int64_t x = (int64_t{rank + 1} << 40) + 0x0102030405LL * (i + 1);
      std::memcpy(at, &x, 8);
    }
  }
  return arena;
}

void call(Communicator& comm, const Case& c, std::byte* arena, DeviceKind device, CommStream stream) {
  const Layout l = layout_of(c, comm.rank());
  const size_t element = dtype_size(c.dtype);
  const Tensor in(arena + static_cast<size_t>(l.in_offset) * element, {l.in_numel}, c.dtype, device);
  const Tensor out(arena + static_cast<size_t>(l.out_offset) * element, {l.out_numel}, c.dtype, device);
  switch (c.kind) {
    case CollectiveKind::all_reduce_sum:
      return comm.all_reduce_sum(in, stream);
    case CollectiveKind::reduce_scatter_sum:
      return comm.reduce_scatter_sum(in, out, stream);
    case CollectiveKind::all_gather:
      return comm.all_gather(in, out, stream);
    case CollectiveKind::broadcast:
      return comm.broadcast(in, c.root, stream);
    case CollectiveKind::barrier:
      return comm.barrier(stream);
  }
}

// Every rank's arena after the collective on the host backend: the reference.
std::vector<std::vector<std::byte>> host_results(const Case& c) {
  auto comms = make_in_process_group(c.world);
  std::vector<std::vector<std::byte>> arenas(static_cast<size_t>(c.world));
  for (int r = 0; r < c.world; ++r) arenas[static_cast<size_t>(r)] = initial_arena(c, r);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& comm) {
    call(comm, c, arenas[static_cast<size_t>(comm.rank())].data(), DeviceKind::cpu, nullptr);
  }));
  return arenas;
}

// Each rank: arena = sentinel (synchronously), then on its own stream: sleep (later for lower ranks), copy
// the initial arena in, the collective, copy the arena out.
std::vector<std::vector<std::byte>> device_results(const Case& c, Comms& comms) {
  std::vector<std::vector<std::byte>> arenas(static_cast<size_t>(c.world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& comm) {
    const int r = comm.rank();
    const std::vector<std::byte> initial = initial_arena(c, r);
    std::vector<std::byte>& result = arenas[static_cast<size_t>(r)];
    result.assign(initial.size(), std::byte{0});
    std::byte *arena = nullptr, *staged = nullptr;
    ZT_CUDA_CHECK(cudaMalloc(&arena, initial.size()));
    ZT_CUDA_CHECK(cudaMalloc(&staged, initial.size()));
    ZT_CUDA_CHECK(cudaMemset(arena, 0xFF, initial.size()));
    ZT_CUDA_CHECK(cudaMemcpy(staged, initial.data(), initial.size(), cudaMemcpyHostToDevice));
    {
      Stream stream;
      test::gpu_sleep(stream, 2.0 * (c.world - r));
      ZT_CUDA_CHECK(cudaMemcpyAsync(arena, staged, initial.size(), cudaMemcpyDeviceToDevice, stream));
      call(comm, c, arena, DeviceKind::cuda, stream.get());
      ZT_CUDA_CHECK(cudaMemcpyAsync(result.data(), arena, result.size(), cudaMemcpyDeviceToHost, stream));
      stream.synchronize();
    }
    ZT_CUDA_CHECK(cudaFree(arena));
    ZT_CUDA_CHECK(cudaFree(staged));
  }));
  return arenas;
}

void expect_bitwise_equal(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                          size_t element, int rank) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i += element)
    ASSERT_EQ(std::memcmp(got.data() + i, want.data() + i, element), 0)
        << "rank " << rank << ": element " << i / element << " differs from the host backend's";
}

class DeviceGroupVsHost : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceGroupVsHost, BitwiseEqualOnEveryRank) {
  ZT_SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  auto comms = make_in_process_device_group(c.world, 0, {.timeout = std::chrono::seconds(20)});
  const auto want = host_results(c);
  const auto got = device_results(c, comms);
  for (int r = 0; r < c.world; ++r)
    expect_bitwise_equal(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)], dtype_size(c.dtype), r);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const int64_t n = 4099;  // not a multiple of the vector width: the scalar tail runs too
  for (int world = 1; world <= 4; ++world) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      cases.push_back({world, CollectiveKind::all_reduce_sum, false, 0, dtype, n});
      // In place with odd n: odd ranks' blocks are misaligned, so the element-wise kernel runs.
      for (bool in_place : {false, true})
        cases.push_back({world, CollectiveKind::reduce_scatter_sum, in_place, 0, dtype, n});
    }
    for (DType dtype : {DType::f32, DType::i64}) {
      for (bool in_place : {false, true})
        cases.push_back({world, CollectiveKind::all_gather, in_place, 0, dtype, n});
      for (int root = 0; root < world; ++root)
        cases.push_back({world, CollectiveKind::broadcast, false, root, dtype, n});
    }
  }
  cases.push_back({4, CollectiveKind::reduce_scatter_sum, true, 0, DType::f32, 1 << 20});  // many blocks
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Collectives, DeviceGroupVsHost, ::testing::ValuesIn(all_cases()));

// x[j] = 1000 round + 100 rank + j % 97 (small integers: every sum of them is exact in f32).
__global__ void fill_round_kernel(float* x, int64_t numel, int round, int rank) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < numel;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[j] = static_cast<float>(1000 * round + 100 * rank + static_cast<int>(j % 97));
}

// Every round: each rank fills its buffer on its stream, all_reduces it in place, and copies the result out.
// all_reduce writes each rank's buffer (a copy from its scratch) while the peers' sum kernels read it, so
// unless every stream waits for the peers' "done reading" events before that copy, a peer adds partly summed
// values (on the H200, without those waits, all_reduce cases failed in about one run in five; this test
// repeats the race 16 times per rank).
TEST(DeviceGroup, BuffersAreWrittenOnlyAfterEveryPeerReadThem) {
  ZT_SKIP_WITHOUT_GPU();
  const int world = 4, rounds = 16;
  const int64_t n = 1 << 20;
  auto comms = make_in_process_device_group(world, 0, {.timeout = std::chrono::seconds(60)});
  expect_all_succeeded(run_ranks(comms, [&](Communicator& comm) {
    const int r = comm.rank();
    float *x = nullptr, *outputs = nullptr;
    ZT_CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
    ZT_CUDA_CHECK(cudaMalloc(&outputs, rounds * n * sizeof(float)));
    Stream stream;
    for (int k = 0; k < rounds; ++k) {
      fill_round_kernel<<<1024, 256, 0, stream>>>(x, n, k, r);
      ZT_CUDA_CHECK_LAUNCH("fill_round_kernel");
      comm.all_reduce_sum(Tensor(x, {n}, DType::f32, DeviceKind::cuda), stream.get());
      ZT_CUDA_CHECK(cudaMemcpyAsync(outputs + k * n, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
    std::vector<float> got(static_cast<size_t>(rounds * n));
    ZT_CUDA_CHECK(
        cudaMemcpyAsync(got.data(), outputs, got.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    stream.synchronize();
    for (int k = 0; k < rounds; ++k)
      for (int64_t i = 0; i < n; ++i) {
        const float want =
            static_cast<float>(world * (1000 * k + static_cast<int>(i % 97)) + 100 * world * (world - 1) / 2);
        ZT_CHECK(got[static_cast<size_t>(k * n + i)] == want, "rank ", r, " round ", k, " element ", i,
                 " is ", got[static_cast<size_t>(k * n + i)], ", expected ", want);
      }
    ZT_CUDA_CHECK(cudaFree(x));
    ZT_CUDA_CHECK(cudaFree(outputs));
  }));
}

// barrier returns once every rank's work queued before it has run: rank 1 fills its buffer after a long GPU
// sleep, and rank 0 reads it right after the barrier.
TEST(DeviceGroup, BarrierWaitsForEveryRanksQueuedWork) {
  ZT_SKIP_WITHOUT_GPU();
  auto comms = make_in_process_device_group(2, 0, {.timeout = std::chrono::seconds(20)});
  int* flag = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
  ZT_CUDA_CHECK(cudaMemset(flag, 0, sizeof(int)));
  int seen = -1;
  expect_all_succeeded(run_ranks(comms, [&](Communicator& comm) {
    Stream stream;
    if (comm.rank() == 1) {
      test::gpu_sleep(stream, 50.0);
      ZT_CUDA_CHECK(cudaMemsetAsync(flag, 1, 1, stream));
    }
    comm.barrier(stream.get());
    if (comm.rank() == 0) ZT_CUDA_CHECK(cudaMemcpy(&seen, flag, sizeof(int), cudaMemcpyDeviceToHost));
  }));
  EXPECT_EQ(seen, 1);
  ZT_CUDA_CHECK(cudaFree(flag));
}

// The host group's argument and cross-rank checks, on device tensors, plus "not memory of this device";
// every rank throws and the group stays usable.
TEST(DeviceGroup, ErrorsThrowOnEveryRankAndLeaveTheGroupUsable) {
  ZT_SKIP_WITHOUT_GPU();
  const int world = 3;
  auto comms = make_in_process_device_group(world, 0, {.timeout = std::chrono::seconds(20)});
  float* device = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&device, 3 * 64 * sizeof(float)));
  struct Failure {
    const char* name;
    std::function<void(Communicator&)> call;
    std::vector<std::string> fragments;
  };
  std::vector<float> host(8);
  auto mine = [&](Communicator& c, int64_t numel) {
    return Tensor(device + 64 * c.rank(), {numel}, DType::f32, DeviceKind::cuda);
  };
  const std::vector<Failure> failures = {
      {"sizes differ",
       [&](Communicator& c) { c.all_reduce_sum(mine(c, c.rank() == 2 ? 8 : 7)); },
       {"all_reduce_sum", "size mismatch", "rank 2"}},
      {"host memory tagged cuda",
       [&](Communicator& c) {
         c.all_reduce_sum(c.rank() == 1 ? Tensor(host.data(), {8}, DType::f32, DeviceKind::cuda)
                                        : mine(c, 8));
       },
       {"all_reduce_sum on rank 1 of 3", "host memory"}},
      {"cpu tensor",
       [&](Communicator& c) { c.broadcast(Tensor(host.data(), {8}, DType::f32), 0); },
       {"broadcast", "wrong device"}},
      {"different collectives",
       [&](Communicator& c) {
         if (c.rank() == 0)
           c.barrier();
         else
           c.all_reduce_sum(mine(c, 4));
       },
       {"collective mismatch", "barrier", "all_reduce_sum"}},
  };
  for (const Failure& f : failures) {
    SCOPED_TRACE(f.name);
    const auto errors = run_ranks(comms, f.call);
    for (int r = 0; r < world; ++r)
      for (const std::string& fragment : f.fragments)
        EXPECT_NE(errors[static_cast<size_t>(r)].find(fragment), std::string::npos)
            << "rank " << r << ": '" << fragment << "' not in: " << errors[static_cast<size_t>(r)];
  }
  std::vector<float> sums(world);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    const std::vector<float> ones(4, 1.0f);
    ZT_CUDA_CHECK(cudaMemcpy(device + 64 * c.rank(), ones.data(), 4 * sizeof(float), cudaMemcpyHostToDevice));
    c.all_reduce_sum(mine(c, 4));  // legacy default stream: the copy below is ordered after it
    ZT_CUDA_CHECK(cudaMemcpy(&sums[static_cast<size_t>(c.rank())], device + 64 * c.rank() + 3, sizeof(float),
                             cudaMemcpyDeviceToHost));
  }));
  for (float s : sums) EXPECT_EQ(s, 3.0f);
  ZT_CUDA_CHECK(cudaFree(device));
}

TEST(DeviceGroup, TimeoutNamesTheMissingRankAndAbortReachesTheOthers) {
  ZT_SKIP_WITHOUT_GPU();
  float* device = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&device, 3 * 64 * sizeof(float)));
  {
    auto comms = make_in_process_device_group(3, 0, {.timeout = std::chrono::milliseconds(200)});
    const auto errors = run_ranks(comms, [&](Communicator& c) {
      if (c.rank() == 2) return;  // never calls
      c.all_reduce_sum(Tensor(device + 64 * c.rank(), {7}, DType::f32, DeviceKind::cuda));
    });
    for (int r : {0, 1}) {
      EXPECT_NE(errors[static_cast<size_t>(r)].find("timed out"), std::string::npos)
          << errors[static_cast<size_t>(r)];
      EXPECT_NE(errors[static_cast<size_t>(r)].find("rank(s) 2"), std::string::npos)
          << errors[static_cast<size_t>(r)];
    }
  }
  {
    auto comms = make_in_process_device_group(2, 0);
    const auto errors = run_ranks(comms, [&](Communicator& c) {
      if (c.rank() == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c.abort("loss became NaN");
        return;
      }
      c.all_gather(Tensor(device, {4}, DType::f32, DeviceKind::cuda),
                   Tensor(device + 64, {8}, DType::f32, DeviceKind::cuda));
    });
    EXPECT_NE(errors[1].find("group aborted by rank 0: loss became NaN"), std::string::npos) << errors[1];
  }
  ZT_CUDA_CHECK(cudaDeviceSynchronize());
  ZT_CUDA_CHECK(cudaFree(device));
}

// The collective-sequence check stages its descriptors through device memory for device communicators.
TEST(DeviceGroup, CheckedDecoratorWorksOverDeviceRanks) {
  ZT_SKIP_WITHOUT_GPU();
  Comms comms;
  for (auto& c : make_in_process_device_group(2, 0, {.timeout = std::chrono::seconds(20)}))
    comms.push_back(make_checked_communicator(std::move(c)));
  EXPECT_EQ(comms[1]->backend_name(), "checked in-process-device");
  EXPECT_EQ(comms[1]->cuda_device(), 0);
  float* device = nullptr;
  ZT_CUDA_CHECK(cudaMalloc(&device, 2 * 64 * sizeof(float)));
  std::vector<float> got(2);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    const float v = static_cast<float>(c.rank() + 1);
    ZT_CUDA_CHECK(cudaMemcpy(device + 64 * c.rank(), &v, sizeof(float), cudaMemcpyHostToDevice));
    c.all_reduce_sum(Tensor(device + 64 * c.rank(), {1}, DType::f32, DeviceKind::cuda));
    ZT_CUDA_CHECK(cudaMemcpy(&got[static_cast<size_t>(c.rank())], device + 64 * c.rank(), sizeof(float),
                             cudaMemcpyDeviceToHost));
  }));
  EXPECT_EQ(got[0], 3.0f);
  EXPECT_EQ(got[1], 3.0f);
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    const Tensor x(device + 64 * c.rank(), {c.rank() == 0 ? 2 : 3}, DType::f32, DeviceKind::cuda);
    c.all_reduce_sum(x);
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("collective sequence mismatch at collective #1"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 called all_reduce_sum f32[3]"), std::string::npos) << e;
  }
  ZT_CUDA_CHECK(cudaFree(device));
}

TEST(DeviceGroup, RejectsBadWorldSizesAndDevices) {
  ZT_SKIP_WITHOUT_GPU();
  EXPECT_THROW(make_in_process_device_group(0, 0), Error);
  EXPECT_THROW(make_in_process_device_group(kMaxDeviceGroupWorld + 1, 0), Error);
  EXPECT_THROW(make_in_process_device_group(2, 99), Error);
  auto comms = make_in_process_device_group(2, 0);
  EXPECT_EQ(comms[0]->backend_name(), "in-process-device");
  EXPECT_EQ(comms[1]->rank(), 1);
  EXPECT_EQ(comms[1]->world_size(), 2);
}

}  // namespace
}  // namespace zt

#endif  // ZT_WITH_CUDA
