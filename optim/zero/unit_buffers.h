// One buffer per unit family member for the stage-2/3 gradient buckets and stage-3 gather buffers: the
// embeddings', the shared unit's and two layer buffers (layer l uses buffer l % 2, so two consecutive
// layers never share one).
#pragma once

#include <cstddef>
#include <memory>

#include "optim/zero/partition.h"
#include "runtime/arena.h"

namespace zt::optim {

class UnitBuffers {
 public:
  UnitBuffers() = default;
  // `what` names them ("gradient bucket", "gathered parameters"): "<what> (embeddings)" etc. Allocated in
  // the order embeddings, shared, layer, layer.
  UnitBuffers(const ZeroPartition& partition, const char* what, DType dtype, const ArenaOptions& options);

  bool empty() const { return embeddings_ == nullptr; }
  const Arena& at(const ZeroPartition& partition, size_t unit) const;
  // The buffer's index: embeddings 0, shared 1, then the two layer buffers (layer l: 2 + l % 2).
  static size_t slot(const ZeroPartition& partition, size_t unit);

 private:
  std::unique_ptr<Arena> embeddings_, shared_, layer_[2];
};

}  // namespace zt::optim
