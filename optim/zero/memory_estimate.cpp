#include "optim/zero/memory_estimate.h"

#include <cstdio>
#include <iterator>
#include <sstream>
#include <vector>

#include "model/deberta.h"
#include "runtime/check.h"
#include "runtime/memory_size.h"

namespace zt::optim {

MemoryEstimate estimate_memory(const DebertaConfig& model, int stage, int world_size, DType compute,
                               int64_t max_batch, int64_t max_length, ZeroOffload offload) {
  const ParameterTable table(model);
  const ZeroPartition partition(table, world_size);
  MemoryEstimate e;
  e.stage = stage;
  e.world_size = world_size;
  e.offload = offload;
  e.state = zero_state_bytes(partition, stage, compute, offload);
  // The batch arena: ids and mask [B, L] and labels [B], i64.
  const auto batch_bytes = static_cast<size_t>((2 * max_batch * max_length + max_batch) * 8);
  e.activations = DebertaForSequenceClassification::plan_activations(model, max_batch, max_length, compute)
                      .total_bytes() +
                  batch_bytes;
  return e;
}

std::string describe_memory_estimates(const DebertaConfig& model, int run_stage, int world_size,
                                      DType compute, int64_t max_batch, int64_t max_length,
                                      ZeroOffload run_offload) {
  std::ostringstream out;
  out << "memory per rank (" << dtype_name(compute) << ", world size " << world_size << ", batch "
      << max_batch << " x " << max_length << "; device columns, then host with CPU offload):\n";
  char line[320];
  std::snprintf(line, sizeof line, "  %-18s %11s %11s %11s %11s %11s %11s %11s %11s\n", "stage", "params",
                "grads", "master", "adam m,v", "buffers", "activations", "device", "host");
  out << line;
  struct Row {
    int stage;
    ZeroOffload offload;
    const char* label;
  };
  // The disk tier's row (offload_optimizer nvme) only for a run that uses it: its host column depends on
  // the run's buffer count.
  const std::string disk_label = str(run_stage, " +offload nvme");
  const Row disk_row{run_stage, run_offload, disk_label.c_str()};
  const Row rows[] = {{0, {}, "0"},
                      {1, {}, "1"},
                      {2, {}, "2"},
                      {3, {}, "3"},
                      {1, {.optimizer = true}, "1 +offload opt"},
                      {2, {.optimizer = true}, "2 +offload opt"},
                      {3, {.optimizer = true}, "3 +offload opt"},
                      {3, {.optimizer = true, .param = true}, "3 +offload both"}};
  std::vector<Row> all(std::begin(rows), std::end(rows));
  if (run_offload.disk_buffers > 0) all.push_back(disk_row);
  for (const Row& row : all) {
    const MemoryEstimate e =
        estimate_memory(model, row.stage, world_size, compute, max_batch, max_length, row.offload);
    const bool is_run = row.stage == run_stage && row.offload.optimizer == run_offload.optimizer &&
                        row.offload.param == run_offload.param &&
                        row.offload.disk_buffers == run_offload.disk_buffers;
    std::snprintf(line, sizeof line, "  %-18s %11s %11s %11s %11s %11s %11s %11s %11s\n",
                  (std::string(row.label) + (is_run ? " (run)" : "")).c_str(),
                  format_memory_size(e.state.compute_copy).c_str(),
                  format_memory_size(e.state.gradients).c_str(), format_memory_size(e.state.master).c_str(),
                  format_memory_size(e.state.optimizer).c_str(), format_memory_size(e.state.buffers).c_str(),
                  format_memory_size(e.activations).c_str(), format_memory_size(e.total()).c_str(),
                  format_memory_size(e.host()).c_str());
    out << line;
  }
  return out.str();
}

}  // namespace zt::optim
