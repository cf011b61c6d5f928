#include "optim/zero/swapped_host_optimizer_store.h"

namespace zt::optim {

swap::SwappedStateOptions swapped_state_options(const ZeroDiskTier& disk, int rank,
                                                std::vector<int64_t> block_numel) {
  return {.directory = disk.directory,
          .rank = rank,
          .block_numel = std::move(block_numel),
          .buffer_count = disk.buffer_count,
          .pipeline_read = disk.pipeline_read,
          .pipeline_write = disk.pipeline_write,
          .direct = disk.direct};
}

}  // namespace zt::optim
