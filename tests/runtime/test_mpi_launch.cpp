// runtime/mpi_launch on the CPU: the launcher's environment read into a LaunchInfo (Open MPI and MPICH
// names, malformed values named), the messages for more ranks than GPUs and for builds that cannot run a
// multi-process launch, and the one-process communicators. The real mpirun runs are the mpi.* ctest
// entries (tests/CMakeLists.txt, tests/runtime/mpi_launch_probe.cpp).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "runtime/device.h"
#include "runtime/mpi_launch.h"

namespace zt {
namespace {

EnvLookup env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

TEST(MpiLaunch, NoLauncherIsOneProcess) {
  const LaunchInfo launch = detect_launch(env({}));
  EXPECT_EQ(launch.rank, 0);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_EQ(launch.local_size, 1);
  EXPECT_FALSE(launch.under_mpi);
}

TEST(MpiLaunch, ReadsOpenMpiVariables) {
  const LaunchInfo launch = detect_launch(env({{"OMPI_COMM_WORLD_SIZE", "4"},
                                               {"OMPI_COMM_WORLD_RANK", "3"},
                                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_size, 2);
  EXPECT_TRUE(launch.under_mpi);
}

TEST(MpiLaunch, ReadsMpichVariables) {
  const LaunchInfo launch =
      detect_launch(env({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}, {"MPI_LOCALRANKID", "1"}}));
  EXPECT_EQ(launch.rank, 1);
  EXPECT_EQ(launch.world_size, 2);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.local_size, 2);  // MPI_LOCALNRANKS unset: all ranks on this node
  EXPECT_TRUE(launch.under_mpi);
}

TEST(MpiLaunch, MalformedVariablesAreNamed) {
  EXPECT_EQ(error_of([] {
              detect_launch(env({{"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_RANK", "one"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}));
            }),
            "OMPI_COMM_WORLD_RANK='one' is not a non-negative integer (it is set by the MPI launcher)");
  EXPECT_NE(error_of([] {
              detect_launch(env({{"OMPI_COMM_WORLD_SIZE", "-2"}}));
            }).find("OMPI_COMM_WORLD_SIZE='-2'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              detect_launch(env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}));
            }).find("OMPI_COMM_WORLD_RANK is not set although OMPI_COMM_WORLD_SIZE is"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              detect_launch(env({{"PMI_SIZE", "2"}, {"PMI_RANK", "2"}, {"MPI_LOCALRANKID", "0"}}));
            }).find("PMI_RANK=2 is not a rank of PMI_SIZE=2"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              detect_launch(env({{"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"OMPI_COMM_WORLD_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
            }).find("do not fit a world of 2"),
            std::string::npos);
}

// mpirun -np 3 on a one-GPU node: rank 2 (local rank 2) has no GPU.
TEST(MpiLaunch, MoreRanksThanGpusIsNamed) {
  const LaunchInfo rank2{.rank = 2, .world_size = 3, .local_rank = 2, .local_size = 3, .under_mpi = true};
  EXPECT_EQ(
      gpu_assignment_problem(rank2, 1),
      "rank 2 needs GPU 2 but this node has 1 (start at most 1 rank per node: NCCL drives one GPU per rank)");
  EXPECT_EQ(gpu_assignment_problem(rank2, 2).substr(0, 38), "rank 2 needs GPU 2 but this node has 2");
  EXPECT_EQ(gpu_assignment_problem(rank2, 3), "");
  EXPECT_EQ(gpu_assignment_problem(LaunchInfo{}, 0), "rank 0 needs a GPU but this node has none");
  EXPECT_EQ(gpu_assignment_problem(LaunchInfo{}, 1), "");
}

TEST(MpiLaunch, BuildsWithoutSupportRefuseMultiProcessLaunches) {
  const LaunchInfo two{.rank = 1, .world_size = 2, .local_rank = 1, .local_size = 2, .under_mpi = true};
  const LaunchInfo one{};
  EXPECT_EQ(launch_support_problem(two, DeviceKind::cuda, true, true, true), "");
  EXPECT_EQ(
      launch_support_problem(two, DeviceKind::cuda, true, false, true),
      "2 ranks were launched (mpirun -np 2) but this build has no NCCL to connect them; install NCCL (set "
      "NCCL_HOME) and rebuild");
  EXPECT_NE(launch_support_problem(two, DeviceKind::cuda, true, true, false).find("this build has no MPI"),
            std::string::npos);
  EXPECT_NE(launch_support_problem(two, DeviceKind::cuda, false, false, false).find("no CUDA backend"),
            std::string::npos);
  EXPECT_NE(
      launch_support_problem(two, DeviceKind::cpu, true, true, true).find("the CPU backend trains in one"),
      std::string::npos);
  // World size 1 needs neither NCCL nor MPI, on either device.
  EXPECT_EQ(launch_support_problem(one, DeviceKind::cuda, true, false, false), "");
  EXPECT_EQ(launch_support_problem(one, DeviceKind::cpu, false, false, false), "");
  EXPECT_EQ(launch_support_problem(LaunchInfo{.under_mpi = true}, DeviceKind::cpu, false, false, false), "");
}

// The real entry point refuses what this build cannot do, with the same message.
TEST(MpiLaunch, LaunchCommunicatorRefusesWhatTheBuildCannotDo) {
  const LaunchInfo two{.rank = 1, .world_size = 2, .local_rank = 1, .local_size = 2, .under_mpi = true};
  EXPECT_EQ(
      error_of([&] { make_launch_communicator(two, DeviceKind::cpu); }),
      launch_support_problem(two, DeviceKind::cpu, built_with_cuda(), built_with_nccl(), built_with_mpi()));
  const std::string expected =
      launch_support_problem(two, DeviceKind::cuda, built_with_cuda(), built_with_nccl(), built_with_mpi());
  if (expected.empty()) {  // a build that could: the GPU check comes next on a GPU-less machine
    if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present; mpirun tests cover this build";
    EXPECT_EQ(error_of([&] { make_launch_communicator(two, DeviceKind::cuda); }),
              "rank 1 needs a GPU but this node has none");
  } else {
    EXPECT_EQ(error_of([&] { make_launch_communicator(two, DeviceKind::cuda); }), expected);
  }
}

TEST(MpiLaunch, OneProcessOnTheCpuGetsAGroupOfOne) {
  auto comm = make_launch_communicator(LaunchInfo{}, DeviceKind::cpu);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->cuda_device(), -1);
  std::vector<float> x{1.5f, -2.0f};
  comm->all_reduce_sum(Tensor(x.data(), {2}, DType::f32));
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[1], -2.0f);
}

}  // namespace
}  // namespace zt
