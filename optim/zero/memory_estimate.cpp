#include "optim/zero/memory_estimate.h"

#include <cstdio>
#include <sstream>

#include "model/deberta.h"
#include "runtime/memory_size.h"

namespace zt::optim {

MemoryEstimate estimate_memory(const DebertaConfig& model, int stage, int world_size, DType compute,
                               int64_t max_batch, int64_t max_length) {
  const ParameterTable table(model);
  const ZeroPartition partition(table, world_size);
  MemoryEstimate e;
  e.stage = stage;
  e.world_size = world_size;
  e.state = zero_state_bytes(partition, stage, compute);
  // The batch arena: ids and mask [B, L] and labels [B], i64.
  const auto batch_bytes = static_cast<size_t>((2 * max_batch * max_length + max_batch) * 8);
  e.activations = DebertaForSequenceClassification::plan_activations(model, max_batch, max_length, compute)
                      .total_bytes() +
                  batch_bytes;
  return e;
}

std::string describe_memory_estimates(const DebertaConfig& model, int run_stage, int world_size,
                                      DType compute, int64_t max_batch, int64_t max_length) {
  std::ostringstream out;
  out << "memory per rank (" << dtype_name(compute) << ", world size " << world_size << ", batch "
      << max_batch << " x " << max_length << "):\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-8s %12s %12s %12s %12s %12s %12s %12s\n", "stage", "params", "grads",
                "master", "adam m,v", "buffers", "activations", "total");
  out << line;
  for (int stage = 0; stage <= 3; ++stage) {
    const MemoryEstimate e = estimate_memory(model, stage, world_size, compute, max_batch, max_length);
    std::snprintf(line, sizeof line, "  %-8s %12s %12s %12s %12s %12s %12s %12s\n",
                  (std::to_string(stage) + (stage == run_stage ? " (run)" : "")).c_str(),
                  format_memory_size(e.state.compute_copy).c_str(),
                  format_memory_size(e.state.gradients).c_str(), format_memory_size(e.state.master).c_str(),
                  format_memory_size(e.state.optimizer).c_str(), format_memory_size(e.state.buffers).c_str(),
                  format_memory_size(e.activations).c_str(), format_memory_size(e.total()).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace zt::optim
