#include "optim/zero/unit_order.h"

#include <algorithm>

namespace zt::optim {

UnitOrder::UnitOrder(const ZeroPartition& partition) {
  const size_t units = partition.units().size();
  const size_t E = partition.embeddings_unit(), S = partition.shared_unit();
  std::vector<size_t> layers;
  for (size_t u = 0; u < units; ++u)
    if (u != E && u != S) layers.push_back(u);
  std::vector<size_t>& forward = order_[static_cast<int>(UnitPhase::forward)];
  forward = {E, S};
  forward.insert(forward.end(), layers.begin(), layers.end());
  std::vector<size_t>& backward = order_[static_cast<int>(UnitPhase::backward)];
  backward = {S};
  backward.insert(backward.end(), layers.rbegin(), layers.rend());
  backward.push_back(E);
  std::vector<size_t>& update = order_[static_cast<int>(UnitPhase::update)];
  for (size_t u = 0; u < units; ++u) update.push_back(u);
  for (int p = 0; p < 3; ++p) {
    position_[p].assign(units, 0);
    for (size_t i = 0; i < order_[p].size(); ++i) position_[p][order_[p][i]] = i;
  }
}

std::vector<size_t> UnitOrder::upcoming(size_t unit, UnitPhase phase, bool last_micro, size_t count) const {
  std::vector<size_t> out;
  auto next_phase = [&](UnitPhase p) {
    if (p == UnitPhase::forward) return UnitPhase::backward;
    if (p == UnitPhase::backward && last_micro) return UnitPhase::update;
    return UnitPhase::forward;
  };
  UnitPhase p = phase;
  size_t position = position_[static_cast<int>(p)][unit] + 1;
  for (int phases = 0; out.size() < count && phases < 3;) {
    const std::vector<size_t>& in_phase = order_[static_cast<int>(p)];
    if (position >= in_phase.size()) {
      p = next_phase(p);
      position = 0;
      ++phases;
      continue;
    }
    const size_t next = in_phase[position++];
    if (next != unit && std::find(out.begin(), out.end(), next) == out.end()) out.push_back(next);
  }
  return out;
}

}  // namespace zt::optim
