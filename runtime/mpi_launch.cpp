#include "runtime/mpi_launch.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <utility>

#include "runtime/check.h"
#include "runtime/device.h"

#ifdef ZT_WITH_MPI
#include <mpi.h>
#endif

namespace zt {
namespace {

// A launcher variable as a non-negative int; nullopt when unset.
std::optional<int> read_int(const EnvLookup& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return std::nullopt;
  const std::string_view text(value);
  int parsed = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  ZT_CHECK(error == std::errc() && end == text.data() + text.size() && !text.empty() && parsed >= 0, name,
           "='", text, "' is not a non-negative integer (it is set by the MPI launcher)");
  return parsed;
}

int require_int(const EnvLookup& getenv, const char* name, const char* because) {
  const std::optional<int> value = read_int(getenv, name);
  ZT_CHECK(value.has_value(), name, " is not set although ", because, " is: cannot tell this process's rank");
  return *value;
}

}  // namespace

LaunchInfo detect_launch(const EnvLookup& getenv) {
  struct Names {
    const char* size;
    const char* rank;
    const char* local_rank;
    const char* local_size;
  };
  constexpr Names kLaunchers[] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
  };
  for (const Names& names : kLaunchers) {
    const std::optional<int> size = read_int(getenv, names.size);
    if (!size) continue;
    LaunchInfo launch;
    launch.under_mpi = true;
    launch.world_size = *size;
    launch.rank = require_int(getenv, names.rank, names.size);
    launch.local_rank = require_int(getenv, names.local_rank, names.size);
    launch.local_size = read_int(getenv, names.local_size).value_or(launch.world_size);
    ZT_CHECK(launch.world_size >= 1 && launch.rank < launch.world_size, names.rank, "=", launch.rank,
             " is not a rank of ", names.size, "=", launch.world_size);
    ZT_CHECK(launch.local_size >= 1 && launch.local_rank < launch.local_size &&
                 launch.local_size <= launch.world_size,
             names.local_rank, "=", launch.local_rank, " / ", names.local_size, "=", launch.local_size,
             " do not fit a world of ", launch.world_size);
    return launch;
  }
  return LaunchInfo{};
}

LaunchInfo detect_launch() {
  return detect_launch([](const char* name) { return std::getenv(name); });
}

bool built_with_cuda() {
#ifdef ZT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#ifdef ZT_WITH_NCCL
  return true;
#else
  return false;
#endif
}

bool built_with_mpi() {
#ifdef ZT_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::string launch_support_problem(const LaunchInfo& launch, DeviceKind device, bool with_cuda,
                                   bool with_nccl, bool with_mpi) {
  const int n = launch.world_size;
  if (device == DeviceKind::cuda && !with_cuda)
    return "this build has no CUDA backend (configured with ZT_CUDA=OFF or without nvcc): it cannot use a "
           "GPU";
  if (n == 1) return "";
  const std::string launched = str(n, " ranks were launched (mpirun -np ", n, ")");
  if (device == DeviceKind::cpu)
    return launched +
           " but the CPU backend trains in one process; use GPUs (--device cuda), one rank per GPU";
  if (!with_nccl)
    return launched + " but this build has no NCCL to connect them; install NCCL (set NCCL_HOME) and rebuild";
  if (!with_mpi)
    return launched +
           " but this build has no MPI to start NCCL with; install libopenmpi-dev (scripts/setup.sh) and "
           "rebuild";
  return "";
}

std::string gpu_assignment_problem(const LaunchInfo& launch, int device_count) {
  if (device_count == 0) return str("rank ", launch.rank, " needs a GPU but this node has none");
  if (launch.local_rank < device_count) return "";
  return str("rank ", launch.rank, " needs GPU ", launch.local_rank, " but this node has ", device_count,
             " (start at most ", device_count, " rank", device_count == 1 ? "" : "s",
             " per node: NCCL drives one GPU per rank)");
}

std::unique_ptr<Communicator> make_mpi_nccl_communicator(const LaunchInfo& launch, NcclOptions options) {
  if (const std::string p = launch_support_problem(launch, DeviceKind::cuda, built_with_cuda(),
                                                   built_with_nccl(), built_with_mpi());
      !p.empty())
    ZT_FAIL(p);
#ifdef ZT_WITH_NCCL
  if (const std::string p = gpu_assignment_problem(launch, cuda_device_count()); !p.empty()) ZT_FAIL(p);
  // mpirun -np 1 does not need MPI either: a process that never calls MPI_Init is fine with mpirun.
  if (launch.world_size == 1)
    return make_nccl_communicator(make_nccl_unique_id(), 0, 1, launch.local_rank, options);
#ifdef ZT_WITH_MPI
  auto session = std::make_shared<MpiSession>();
  ZT_CHECK(session->rank() == launch.rank && session->world_size() == launch.world_size, "MPI says rank ",
           session->rank(), " of ", session->world_size(), " but the launcher's environment says rank ",
           launch.rank, " of ", launch.world_size);
  NcclUniqueId id;
  if (launch.rank == 0) id = make_nccl_unique_id();
  session->broadcast_from_rank0(std::as_writable_bytes(std::span(id.bytes)));
  return make_nccl_communicator(id, launch.rank, launch.world_size, launch.local_rank, options,
                                [session](bool clean) {
                                  if (clean) session->finalize();
                                });
#endif
#endif
  ZT_FAIL("make_mpi_nccl_communicator: unreachable (launch_support_problem admits this build)");
}

std::unique_ptr<Communicator> make_launch_communicator(const LaunchInfo& launch, DeviceKind device,
                                                       NcclOptions options) {
  if (const std::string p =
          launch_support_problem(launch, device, built_with_cuda(), built_with_nccl(), built_with_mpi());
      !p.empty())
    ZT_FAIL(p);
  if (device == DeviceKind::cpu) return std::move(make_in_process_group(1)[0]);
  if (built_with_nccl()) return make_mpi_nccl_communicator(launch, options);
  // CUDA without NCCL, one rank (launch_support_problem refuses more).
  if (const std::string p = gpu_assignment_problem(launch, cuda_device_count()); !p.empty()) ZT_FAIL(p);
  return std::move(make_in_process_device_group(1, launch.local_rank)[0]);
}

#ifdef ZT_WITH_MPI
namespace {
void check_mpi(int status, const char* call) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(status, text, &length);
  ZT_FAIL(call, " failed: ", std::string_view(text, static_cast<size_t>(length)));
}
}  // namespace

MpiSession::MpiSession() {
  int initialized = 0;
  int finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  ZT_CHECK(!finalized, "MPI was finalized already in this process; it cannot start again");
  if (!initialized) check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
}

void MpiSession::broadcast_from_rank0(std::span<std::byte> bytes) const {
  check_mpi(MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD),
            "MPI_Bcast");
}

void MpiSession::finalize() {
  int finalized = 0;
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  if (!finalized) check_mpi(MPI_Finalize(), "MPI_Finalize");
}
#endif

}  // namespace zt
