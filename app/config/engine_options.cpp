#include "app/config/engine_options.h"

namespace zt::optim {

namespace {

IoOptions io_options_of(const TrainConfig& config) {
  return {.backend = IoBackendChoice::automatic,
          .block_size = static_cast<size_t>(config.aio.block_size),
          .queue_depth = static_cast<int>(config.aio.queue_depth),
          .thread_count = static_cast<int>(config.aio.thread_count),
          .single_submit = config.aio.single_submit,
          .overlap_events = config.aio.overlap_events};
}

}  // namespace

std::optional<ZeroDiskTier> zero_disk_tier(const TrainConfig& config) {
  const NvmeOffloadSettings& nvme = config.zero.offload_optimizer.nvme;
  if (!nvme.enabled) return std::nullopt;
  return ZeroDiskTier{.directory = nvme.nvme_path,
                      .buffer_count = static_cast<int>(nvme.buffer_count),
                      .pipeline_read = nvme.pipeline_read,
                      .pipeline_write = nvme.pipeline_write,
                      .io = io_options_of(config),
                      .direct = DirectIoMode::automatic};
}

std::optional<ZeroParamDiskTier> zero_param_disk_tier(const TrainConfig& config) {
  const NvmeOffloadSettings& nvme = config.zero.offload_param.nvme;
  if (!nvme.enabled) return std::nullopt;
  return ZeroParamDiskTier{.directory = nvme.nvme_path,
                           .buffer_count = static_cast<int>(nvme.buffer_count),
                           .io = io_options_of(config),
                           .direct = DirectIoMode::automatic};
}

ZeroOffload zero_offload(const TrainConfig& config) {
  const bool optimizer = config.zero.offload_optimizer.enabled;
  const NvmeOffloadSettings& nvme = config.zero.offload_optimizer.nvme;
  return {.optimizer = optimizer,
          .ratio = config.zero.offload_optimizer.ratio,
          .param = config.zero.offload_param.enabled,
          .pipelined = true,
          .delayed_update = config.offload_delayed_update,
          .delayed_landing = delayed_landing_named(config.offload_delayed_landing),
          .disk_buffers = nvme.enabled ? static_cast<int>(nvme.buffer_count) : 0,
          .param_disk_buffers = config.zero.offload_param.nvme.enabled
                                    ? static_cast<int>(config.zero.offload_param.nvme.buffer_count)
                                    : 0,
          .sub_group_size = config.zero.sub_group_size,
          .stream_gradients = optimizer && config.zero.stage >= 2 &&
                              config.gradient_accumulation_steps == 1 &&
                              config.zero.offload_optimizer.ratio >= 1.0,
          .overlap_update = config.offload_overlap_update,
          .overlap_update_where_it_applies = optimizer && !config.no_offload_overlap_update};
}

}  // namespace zt::optim
