// The order a step uses the units' parameters in, per phase (model/deberta_tensors.h's hook order):
//   forward   E, S, layers 0..n-1
//   backward  S, layers n-1..0, E
//   update    unit order (block by block)
// Parameters on disk read ahead in it (upcoming); the overlapped updates run in the forward's order.
#pragma once

#include <cstddef>
#include <vector>

#include "optim/zero/partition.h"

namespace zt::optim {

enum class UnitPhase { forward, backward, update };

class UnitOrder {
 public:
  UnitOrder() = default;
  explicit UnitOrder(const ZeroPartition& partition);

  const std::vector<size_t>& order(UnitPhase phase) const { return order_[static_cast<int>(phase)]; }
  // Up to `count` distinct units used after `unit` in `phase`, continuing into the phases that follow it
  // (forward -> backward; backward -> the update when `last_micro` (the window's last micro-batch), else
  // the next forward; the update -> forward), at most three phases on; `unit` itself not among them.
  std::vector<size_t> upcoming(size_t unit, UnitPhase phase, bool last_micro, size_t count) const;

 private:
  std::vector<size_t> order_[3];
  std::vector<size_t> position_[3];  // per phase, each unit's index in order_
};

}  // namespace zt::optim
