#include "optim/zero/unit_buffers.h"

#include <string>

#include "optim/zero/buffer_views.h"

namespace zt::optim {

UnitBuffers::UnitBuffers(const ZeroPartition& partition, const char* what, DType dtype,
                         const ArenaOptions& options) {
  auto make = [&](const char* which, int64_t numel) {
    return std::make_unique<Arena>(std::string(what) + " (" + which + ")",
                                   zero_views::flat_layout(numel, dtype), options);
  };
  embeddings_ = make("embeddings", partition.units().front().numel);
  shared_ = make("shared", partition.units().back().numel);
  for (auto& b : layer_) b = make("layer", partition.largest_layer_unit());
}

const Arena& UnitBuffers::at(const ZeroPartition& partition, size_t unit) const {
  if (unit == partition.embeddings_unit()) return *embeddings_;
  if (unit == partition.shared_unit()) return *shared_;
  return *layer_[partition.units()[unit].layer % 2];
}

size_t UnitBuffers::slot(const ZeroPartition& partition, size_t unit) {
  if (unit == partition.embeddings_unit()) return 0;
  if (unit == partition.shared_unit()) return 1;
  return 2 + static_cast<size_t>(partition.units()[unit].layer % 2);
}

}  // namespace zt::optim
