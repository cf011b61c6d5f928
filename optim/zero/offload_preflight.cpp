#include "optim/zero/offload_preflight.h"

#include <algorithm>
#include <string>
#include <vector>

#include "optim/swap/swap_preflight.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/swapped_parameter_shard.h"
#include "optim/zero/zero_plan.h"
#include "runtime/check.h"
#include "runtime/host_memory.h"
#include "runtime/log.h"
#include "runtime/memory_size.h"

namespace zt::optim {

namespace {

// One swap directory's share of the disk preflight: the optimizer state's and the parameters' files add up
// where both offloads use the same nvme_path.
struct SwapDirectoryNeed {
  std::string directory;
  uint64_t bytes = 0;
  int files = 0;
  DirectIoMode direct = DirectIoMode::automatic;
};

void add_swap_need(std::vector<SwapDirectoryNeed>& needs, const SwapDirectoryNeed& need) {
  for (SwapDirectoryNeed& n : needs) {
    if (n.directory == need.directory) {
      n.bytes += need.bytes;
      n.files += need.files;
      return;
    }
  }
  needs.push_back(need);
}

}  // namespace

OffloadHostCharges preflight_offload(const ZeroPartition& partition, const ZeroEngineOptions& options, int r,
                                     const std::optional<swap::SwappedStateOptions>& disk_state,
                                     size_t sub_group_count) {
  OffloadHostCharges charges;
  // Pinned only where a GPU copies from it; the CPU backend's "device" is the host already.
  const bool gpu = options.device == DeviceKind::cuda;
  const MemoryKind host_kind = options.pin_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  const MemoryKind param_kind = options.pin_param_memory && gpu ? MemoryKind::pinned_host : MemoryKind::host;
  // Preflight before any allocation: every rank of this process holds its own shard (with the disk tier:
  // its buffers, and its swap file on disk).
  const ZeroStateBytes bytes = ZeroPlan(partition, options.stage, options.compute, options.offload).bytes();
  const auto ranks = static_cast<size_t>(std::max(1, options.ranks_sharing_host));
  const size_t host = bytes.host_total() * ranks;
  HostMemoryPlan plan{.what = str("ZeRO-", options.stage, " CPU offload (",
                                  options.offload.param ? "optimizer and parameters" : "optimizer",
                                  options.disk ? str(", optimizer state on disk in sub-groups of at most ",
                                                     options.offload.sub_group_size,
                                                     " elements (zero_optimization.sub_group_size)")
                                               : std::string(),
                                  options.param_disk ? ", parameters on disk" : "", ", ", ranks,
                                  " rank(s) in this process)")};
  const size_t pinned = pinned_host_bytes(bytes, host_kind == MemoryKind::pinned_host,
                                          param_kind == MemoryKind::pinned_host, options.disk.has_value()) *
                        ranks;
  plan.pinned_bytes = pinned;
  plan.pageable_bytes = host - pinned;
  check_host_memory_plan(
      plan, options.host_memory_limits ? *options.host_memory_limits : read_host_memory_limits());
  if (options.host_budget != nullptr) {
    const std::string what = str("rank ", r, "'s ", plan.what);
    charges.pinned = options.host_budget->charge(pinned / ranks, HostMemoryKind::pinned, what);
    charges.pageable = options.host_budget->charge((host - pinned) / ranks, HostMemoryKind::pageable, what);
  }
  // The disk preflight: each swap directory's files of every rank of this process.
  std::vector<SwapDirectoryNeed> needs;
  if (options.disk) {
    add_swap_need(needs, {.directory = options.disk->directory,
                          .bytes = swap::SwappedStateStore::file_bytes_for(*disk_state) * ranks,
                          .files = static_cast<int>(ranks) * (1 + options.disk->io.thread_count),
                          .direct = options.disk->direct});
  }
  if (options.param_disk) {
    add_swap_need(
        needs,
        {.directory = options.param_disk->directory,
         .bytes = SwappedParameterShard::file_bytes_for(unit_slices(partition), options.compute) * ranks,
         .files = static_cast<int>(ranks) * (1 + options.param_disk->io.thread_count),
         .direct = options.param_disk->direct});
  }
  for (const SwapDirectoryNeed& need : needs) {
    const swap::SwapPreflightReport report = swap::preflight_swap_directory({.directory = need.directory,
                                                                             .bytes_needed = need.bytes,
                                                                             .files_needed = need.files,
                                                                             .direct = need.direct,
                                                                             .rank = r});
    if (r == 0) {
      for (const std::string& notice : report.notices) ZT_LOG(warn) << "disk tier: " << notice;
      ZT_LOG(info) << "disk tier: " << format_memory_size(need.bytes) << " of swap files under "
                   << need.directory << " (" << format_memory_size(report.free_bytes) << " free)";
    }
  }
  if (options.disk && r == 0) {
    ZT_LOG(info) << "disk tier: optimizer state (fp32 master, m, v) on disk under " << options.disk->directory
                 << ", " << format_memory_size(swap::SwappedStateStore::file_bytes_for(*disk_state))
                 << " per rank (each rank's file is the sum of its " << sub_group_count
                 << " records: the unit slices cut into sub-groups of at most "
                 << options.offload.sub_group_size << " elements, zero_optimization.sub_group_size), "
                 << options.disk->buffer_count << " buffers of "
                 << format_memory_size(bytes.host_optimizer / static_cast<size_t>(options.disk->buffer_count))
                 << " (the largest record) per rank";
  }
  if (options.param_disk && r == 0) {
    const std::vector<int64_t> slices = unit_slices(partition);
    ZT_LOG(info) << "disk tier: parameters (the " << dtype_name(options.compute)
                 << " stage-3 shard) on disk in "
                 << SwappedParameterShard::file_directory(options.param_disk->directory) << ", "
                 << format_memory_size(SwappedParameterShard::file_bytes_for(slices, options.compute))
                 << " per rank (" << slices.size() << " records: one per unit slice), "
                 << options.param_disk->buffer_count << " "
                 << (param_kind == MemoryKind::pinned_host ? "pinned" : "pageable") << " buffers of "
                 << format_memory_size(SwappedParameterShard::record_buffer_bytes(slices, options.compute))
                 << " (the largest record) per rank, read ahead in the order the gathers and the update "
                    "use them";
  }
  if (r == 0) {
    const bool pageable_copies =
        gpu && (host_kind == MemoryKind::host || (options.offload.param && param_kind == MemoryKind::host));
    ZT_LOG(info) << plan.what << ": " << format_memory_size(host) << " of host memory"
                 << (gpu ? str(", ", format_memory_size(pinned), " of it pinned") : std::string())
                 << (pageable_copies ? " (a pin_memory is false: the host<->device copies of that section "
                                       "run at pageable speed)"
                                     : "");
    if (options.offload.delayed_update) {
      ZT_LOG(info) << "delayed parameter update ON: each step's CPU update overlaps the next step's "
                      "forward and backward, which use parameters one update old";
    }
  }
  return charges;
}

}  // namespace zt::optim
