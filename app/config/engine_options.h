// The translation from a resolved TrainConfig to the ZeRO engine's options: the offload switches and the disk
// tiers (offload_optimizer / offload_param device nvme, the aio block). The engine (optim/zero/engine.h)
// takes only these options and never reads the configuration.
#pragma once

#include <optional>

#include "app/config/train_config.h"
#include "optim/zero/engine.h"

namespace zt::optim {

// ZeroEngineOptions::disk for a resolved configuration: set for offload_optimizer device nvme.
std::optional<ZeroDiskTier> zero_disk_tier(const TrainConfig& config);
// ZeroEngineOptions::param_disk for a resolved configuration: set for offload_param device nvme.
std::optional<ZeroParamDiskTier> zero_param_disk_tier(const TrainConfig& config);

// ZeroEngineOptions::offload for a resolved configuration (the engine, the estimate printed at start and the
// out-of-memory advice all take this one): the gradients stream to the host at stages 2/3 with
// offload_optimizer unless gradient_accumulation_steps > 1 (the shard then sums micro-batches on the device).
ZeroOffload zero_offload(const TrainConfig& config);

}  // namespace zt::optim
