// The program the mpi.* ctest entries start under mpirun (tests/CMakeLists.txt), to test runtime/mpi_launch
// in real multi-process launches:
//   mpi_launch_probe bootstrap   MPI comes up and rank 0's bytes reach every rank (no GPU needed)
//   mpi_launch_probe allreduce   make_launch_communicator on the GPU, all_reduce of rank + 1 and a barrier
// Prints "rank r of N: <mode> ok"; any failure is one error line and exit code 2 (zt::run_tool_main).
#include <cstddef>
#include <cstdio>
#include <string_view>
#include <vector>

#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/mpi_launch.h"

namespace {

int bootstrap(const zt::LaunchInfo& launch) {
#ifdef ZT_WITH_MPI
  zt::MpiSession session;
  ZT_CHECK(session.rank() == launch.rank && session.world_size() == launch.world_size, "MPI says rank ",
           session.rank(), " of ", session.world_size(), ", the environment rank ", launch.rank, " of ",
           launch.world_size);
  std::vector<std::byte> token(128);
  for (size_t i = 0; i < token.size(); ++i)
    token[i] = launch.rank == 0 ? static_cast<std::byte>(i * 7 + 3) : std::byte{0};
  session.broadcast_from_rank0(token);
  for (size_t i = 0; i < token.size(); ++i)
    ZT_CHECK(token[i] == static_cast<std::byte>(i * 7 + 3), "rank ", launch.rank, ": byte ", i,
             " of rank 0's token did not arrive");
  std::printf("rank %d of %d: bootstrap ok\n", launch.rank, launch.world_size);
  std::fflush(stdout);
  session.finalize();
  return 0;
#else
  ZT_FAIL("rank ", launch.rank, ": this build has no MPI");
#endif
}

int allreduce(const zt::LaunchInfo& launch) {
  auto comm = zt::make_launch_communicator(launch, zt::DeviceKind::cuda);
  const int64_t n = 1000;
  zt::DeviceBuffer buffer = zt::device_allocator(comm->cuda_device())
                                .allocate(n * sizeof(float), zt::MemoryCategory::communication, "probe");
  const zt::Tensor x(buffer.data(), {n}, zt::DType::f32, zt::DeviceKind::cuda);
  std::vector<float> host(static_cast<size_t>(n), static_cast<float>(launch.rank + 1));
  zt::copy_tensor(zt::Tensor(host.data(), {n}, zt::DType::f32), x);
  comm->all_reduce_sum(x);
  comm->barrier();  // waits for the all_reduce on the communicator's device before the copy back
  zt::copy_tensor(x, zt::Tensor(host.data(), {n}, zt::DType::f32));
  const float expected = static_cast<float>(launch.world_size * (launch.world_size + 1) / 2);
  for (int64_t i = 0; i < n; ++i)
    ZT_CHECK(host[static_cast<size_t>(i)] == expected, "rank ", launch.rank, ": element ", i, " is ",
             host[static_cast<size_t>(i)], ", expected ", expected);
  std::printf("rank %d of %d: allreduce ok (%s)\n", launch.rank, launch.world_size,
              std::string(comm->backend_name()).c_str());
  std::fflush(stdout);
  buffer.reset();
  comm.reset();  // a clean destruction finalizes MPI
  return 0;
}

int probe(int argc, char** argv) {
  ZT_CHECK(argc == 2, "usage: mpi_launch_probe bootstrap|allreduce");
  const std::string_view mode = argv[1];
  const zt::LaunchInfo launch = zt::detect_launch();
  if (mode == "bootstrap") return bootstrap(launch);
  if (mode == "allreduce") return allreduce(launch);
  ZT_FAIL("unknown mode '", mode, "' (bootstrap or allreduce)");
}

}  // namespace

int main(int argc, char** argv) {
  return zt::run_tool_main("mpi_launch_probe", argc, argv, probe);
}
