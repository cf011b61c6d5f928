// The parameter table of DebertaV2ForSequenceClassification: one entry per tensor, named exactly as HF's
// state dict names it and listed in state-dict order (deberta-v2.md §9), with the metadata the optimizer and
// ZeRO need attached to the tensor itself — never looked up by position.
//
//   ParameterTable table(config);
//   const ParameterInfo& wq = table.at("deberta.encoder.layer.3.attention.self.query_proj.weight");
//   wq.shape;          // [hidden, hidden] ([out, in], as nn.Linear stores it)
//   wq.weight_decay;   // true; false for biases and LayerNorm weights
//   ArenaLayout layout = table.layout(DType::bf16, world_size);  // 32-element aligned offsets, equal shards
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "model/golden_init.h"
#include "runtime/arena.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace zt {

// How ZeRO stage 3 treats a tensor: shardable tensors are partitioned across ranks and gathered around
// their use; resident ones (biases, LayerNorms, the classifier) are small enough that gathering them costs
// more in latency than keeping a full copy on every rank costs in memory.
enum class ShardPolicy : uint8_t { shardable, resident };
std::string_view shard_policy_name(ShardPolicy policy);

struct ParameterInfo {
  std::string name;   // HF state-dict name, e.g. "deberta.encoder.layer.0.output.dense.weight"
  Shape shape;        // as HF stores it: Linear [out, in], Conv1d [out, in, kernel], Embedding [rows, dim]
  ParamKind kind;     // init / role of the tensor
  int layer = -1;     // encoder layer index; -1 for embeddings, rel table, conv, pooler, classifier
  bool weight_decay;  // run_glue_no_trainer: no decay for names containing "bias" or "LayerNorm.weight"
  ShardPolicy shard_policy;
  int64_t numel() const { return shape.numel(); }
};

struct ParameterTableOptions {
  // Tensors with at most this many elements stay resident under ZeRO-3 (DeepSpeed's
  // stage3_param_persistence_threshold, default 1e5).
  int64_t persistence_threshold = 100000;
};

class ParameterTable {
 public:
  explicit ParameterTable(const DebertaConfig& config, ParameterTableOptions options = {});

  const std::vector<ParameterInfo>& entries() const { return entries_; }  // HF state-dict order
  size_t size() const { return entries_.size(); }
  bool contains(std::string_view name) const;
  const ParameterInfo& at(std::string_view name) const;  // throws zt::Error naming an unknown tensor

  int64_t total_numel() const;
  int64_t backbone_numel() const;  // DebertaV2Model alone: the "deberta." tensors
  int64_t numel_where(bool weight_decay) const;
  // Entries of encoder layer `layer` in state-dict order (the unit ZeRO-3 gathers), or, with -1, the
  // tensors outside the layers.
  std::vector<const ParameterInfo*> layer_entries(int layer) const;

  // One flat buffer of `dtype` holding every tensor in state-dict order, each at an offset that is a multiple
  // of kLayoutAlignElements elements (128 B in f32, 64 B in 16-bit: still 16-byte vector and cuBLASLt
  // aligned), the total padded so it splits into `shard_count` equal aligned shards. Layouts of different
  // dtypes share element offsets and element totals.
  static constexpr int64_t kLayoutAlignElements = 32;
  ArenaLayout layout(DType dtype, int shard_count = 1) const;

  // A log table: name, shape, kind, layer, decay, policy; then the totals.
  std::string describe() const;

 private:
  void add(std::string name, Shape shape, ParamKind kind, int layer);

  ParameterTableOptions options_;
  std::vector<ParameterInfo> entries_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace zt
