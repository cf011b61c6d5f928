// Multi-process launch: `mpirun -np N build/bin/train_mrpc ...` starts N copies of the program, one per GPU.
// Each finds its rank from the launcher's environment (no MPI call needed for that), and
// make_launch_communicator gives it the communicator for its device:
//
//   const LaunchInfo launch = detect_launch();
//   auto comm = make_launch_communicator(launch, DeviceKind::cuda);   // rank launch.rank, GPU local_rank
//   ... train; ranks other than 0 stay quiet ...
//   comm.reset();   // before main returns: a clean destruction also finalizes MPI
//
// Under mpirun with N > 1: MPI_Init, rank 0 makes the NCCL unique id, MPI_Bcast sends it to every rank,
// each rank runs ncclCommInitRank on GPU local_rank (runtime/communicator.h: non-blocking, with the
// watchdog). MPI carries nothing else. MPI_Finalize runs when the communicator is destroyed cleanly; a
// rank that fails exits without it, which makes mpirun end the other ranks (MPI_Finalize would wait for
// them while they wait in NCCL for the failed one).
// One process (no launcher, or mpirun -np 1) needs no MPI: an NCCL communicator of one rank (or, in a build
// without NCCL, an in-process device group of one; on the CPU an in-process group of one).
//
// Errors, each one line naming the rank: more ranks on a node than GPUs ("rank 2 needs GPU 2 but this node
// has 1"), N > 1 ranks in a build without CUDA, NCCL or MPI, N > 1 ranks on the CPU backend, malformed
// launcher variables.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "runtime/communicator.h"

namespace zt {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among this node's processes: the GPU it drives
  int local_size = 1;  // processes on this node
  bool under_mpi = false;
};

// Reads Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}, else MPICH/Hydra's PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID, MPI_LOCALNRANKS; without either, one process (rank 0 of 1). Throws on malformed values.
LaunchInfo detect_launch();
// The same from any environment lookup (a null result means unset), for tests.
using EnvLookup = std::function<const char*(const char* name)>;
LaunchInfo detect_launch(const EnvLookup& getenv);

bool built_with_cuda();
bool built_with_nccl();
bool built_with_mpi();

// Why `launch` cannot train on `device` in a build with this support, or "" when it can.
std::string launch_support_problem(const LaunchInfo& launch, DeviceKind device, bool with_cuda,
                                   bool with_nccl, bool with_mpi);
// Why this node cannot give `launch` its GPU (local_rank < device_count), or "".
std::string gpu_assignment_problem(const LaunchInfo& launch, int device_count);

// The communicator the trainer uses for `launch` on `device` (see the top of this file).
std::unique_ptr<Communicator> make_launch_communicator(const LaunchInfo& launch, DeviceKind device,
                                                       NcclOptions options = {});
// The NCCL communicator of `launch` (MPI bootstrap when world_size > 1). Needs NCCL (and MPI for N > 1).
std::unique_ptr<Communicator> make_mpi_nccl_communicator(const LaunchInfo& launch, NcclOptions options = {});

#ifdef ZT_WITH_MPI
// MPI for the bootstrap: MPI_Init at construction unless MPI is up already. finalize() ends MPI; a session
// destroyed without it leaves MPI unfinalized on purpose (see the top of this file). Public for the mpirun
// tests (tests/runtime/mpi_launch_probe.cpp).
class MpiSession {
 public:
  MpiSession();
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  void broadcast_from_rank0(std::span<std::byte> bytes) const;  // MPI_Bcast over MPI_COMM_WORLD
  void finalize();

 private:
  int rank_ = 0;
  int world_size_ = 1;
};
#endif

}  // namespace zt
