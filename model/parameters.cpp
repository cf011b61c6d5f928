#include "model/parameters.h"

#include <iomanip>
#include <sstream>

#include "runtime/check.h"

namespace zt {

std::string_view shard_policy_name(ShardPolicy policy) {
  switch (policy) {
    case ShardPolicy::shardable:
      return "shardable";
    case ShardPolicy::resident:
      return "resident";
  }
  ZT_FAIL("unknown ShardPolicy ", static_cast<int>(policy));
}

ParameterTable::ParameterTable(const DebertaConfig& config, ParameterTableOptions options)
    : options_(options) {
  const int64_t d = config.hidden_size;
  const int64_t inner = config.intermediate_size;
  auto linear = [&](const std::string& prefix, int64_t out, int64_t in, int layer) {
    add(prefix + ".weight", Shape{out, in}, ParamKind::weight, layer);
    add(prefix + ".bias", Shape{out}, ParamKind::bias, layer);
  };
  auto layer_norm = [&](const std::string& prefix, int layer) {
    add(prefix + ".weight", Shape{d}, ParamKind::layernorm_weight, layer);
    add(prefix + ".bias", Shape{d}, ParamKind::layernorm_bias, layer);
  };

  // Registration order of the HF modules is the state-dict order: deberta (embeddings, encoder), pooler,
  // classifier; inside the encoder the layers come before rel_embeddings, its LayerNorm and the conv.
  add("deberta.embeddings.word_embeddings.weight", Shape{config.vocab_size, d}, ParamKind::embedding, -1);
  layer_norm("deberta.embeddings.LayerNorm", -1);
  for (int l = 0; l < static_cast<int>(config.num_hidden_layers); ++l) {
    const std::string p = str("deberta.encoder.layer.", l, ".");
    linear(p + "attention.self.query_proj", d, d, l);
    linear(p + "attention.self.key_proj", d, d, l);
    linear(p + "attention.self.value_proj", d, d, l);
    linear(p + "attention.output.dense", d, d, l);
    layer_norm(p + "attention.output.LayerNorm", l);
    linear(p + "intermediate.dense", inner, d, l);
    linear(p + "output.dense", d, inner, l);
    layer_norm(p + "output.LayerNorm", l);
  }
  // The config parser only admits relative attention with shared keys, so there are no pos_*_proj tensors.
  add("deberta.encoder.rel_embeddings.weight", Shape{config.rel_embedding_rows(), d}, ParamKind::embedding,
      -1);
  if (config.rel_embeddings_layer_norm) layer_norm("deberta.encoder.LayerNorm", -1);
  if (config.has_conv()) {
    add("deberta.encoder.conv.conv.weight", Shape{d, d / config.conv_groups, config.conv_kernel_size},
        ParamKind::weight, -1);
    add("deberta.encoder.conv.conv.bias", Shape{d}, ParamKind::bias, -1);
    layer_norm("deberta.encoder.conv.LayerNorm", -1);
  }
  linear("pooler.dense", config.pooler_hidden_size, config.pooler_hidden_size, -1);
  linear("classifier", config.num_labels, config.pooler_hidden_size, -1);
}

void ParameterTable::add(std::string name, Shape shape, ParamKind kind, int layer) {
  ZT_CHECK(!index_.contains(name), "parameter '", name, "' added twice");
  ParameterInfo info{.name = std::move(name),
                     .shape = shape,
                     .kind = kind,
                     .layer = layer,
                     .weight_decay = kind == ParamKind::weight || kind == ParamKind::embedding,
                     .shard_policy = shape.numel() <= options_.persistence_threshold
                                         ? ShardPolicy::resident
                                         : ShardPolicy::shardable};
  index_.emplace(info.name, entries_.size());
  entries_.push_back(std::move(info));
}

bool ParameterTable::contains(std::string_view name) const {
  return index_.contains(std::string(name));
}

const ParameterInfo& ParameterTable::at(std::string_view name) const {
  auto it = index_.find(std::string(name));
  ZT_CHECK(it != index_.end(), "the DeBERTa-v2 parameter table has no tensor '", name, "'");
  return entries_[it->second];
}

int64_t ParameterTable::total_numel() const {
  int64_t total = 0;
  for (const ParameterInfo& p : entries_) total += p.numel();
  return total;
}

int64_t ParameterTable::backbone_numel() const {
  int64_t total = 0;
  for (const ParameterInfo& p : entries_) {
    if (p.name.starts_with("deberta.")) total += p.numel();
  }
  return total;
}

int64_t ParameterTable::numel_where(bool weight_decay) const {
  int64_t total = 0;
  for (const ParameterInfo& p : entries_) {
    if (p.weight_decay == weight_decay) total += p.numel();
  }
  return total;
}

std::vector<const ParameterInfo*> ParameterTable::layer_entries(int layer) const {
  std::vector<const ParameterInfo*> out;
  for (const ParameterInfo& p : entries_) {
    if (p.layer == layer) out.push_back(&p);
  }
  return out;
}

ArenaLayout ParameterTable::layout(DType dtype, int shard_count) const {
  // Offsets aligned to kLayoutAlignElements elements rather than bytes, so every dtype's layout puts each
  // tensor at the same ELEMENT offset: the f32 master and its 16-bit copy are then one flat index space and
  // the fused AdamW writes the copy in the same pass (optim/cuda/adamw.cuh).
  ArenaLayout out(static_cast<size_t>(kLayoutAlignElements) * dtype_size(dtype));
  for (const ParameterInfo& p : entries_) out.add(TensorSpec{p.name, p.shape, dtype});
  out.set_shard_count(shard_count);
  return out;
}

std::string ParameterTable::describe() const {
  std::ostringstream out;
  for (const ParameterInfo& p : entries_) {
    out << std::left << std::setw(64) << p.name << ' ' << std::setw(20) << p.shape.to_string() << ' '
        << std::setw(17) << param_kind_name(p.kind) << " layer " << std::setw(3) << p.layer
        << (p.weight_decay ? " decay   " : " no-decay") << ' ' << shard_policy_name(p.shard_policy) << '\n';
  }
  out << entries_.size() << " tensors, " << total_numel() << " parameters (" << numel_where(true)
      << " with weight decay, " << numel_where(false) << " without)\n";
  return out.str();
}

}  // namespace zt
