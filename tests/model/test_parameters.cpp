// The parameter table: exact totals of the real models (deberta-v2.md §1.2), HF's names, shapes and order
// (checked against the state dict HF built for the fixtures), metadata rules, and the flat arena layout.
#include "model/parameters.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt {
namespace {

DebertaConfig xlarge_with_labels(int64_t labels) {
  DebertaConfig c = deberta_v2_xlarge_config();
  c.num_labels = labels;
  c.id2label.clear();
  c.label2id.clear();
  for (int64_t i = 0; i < labels; ++i) {
    c.id2label.push_back(str("LABEL_", i));
    c.label2id[c.id2label.back()] = i;
  }
  return c;
}

TEST(ParameterTable, XlargeTotalsAreExact) {
  const ParameterTable mnli(xlarge_with_labels(3));
  EXPECT_EQ(mnli.total_numel(), 886'958'595);
  EXPECT_EQ(mnli.backbone_numel(), 884'593'152);
  EXPECT_EQ(mnli.size(), 398u);  // 24 layers x 16 + 10 backbone + pooler 2 + classifier 2

  const ParameterTable mrpc(deberta_v2_xlarge_config());
  EXPECT_EQ(mrpc.total_numel(), 886'957'058);
  EXPECT_EQ(mrpc.backbone_numel(), 884'593'152);
  EXPECT_EQ(mrpc.at("classifier.weight").shape, (Shape{2, 1536}));
}

TEST(ParameterTable, XxlargeTotalsAreExact) {
  DebertaConfig c = xlarge_with_labels(3);
  c.num_hidden_layers = 48;
  const ParameterTable xxl(c);
  EXPECT_EQ(xxl.total_numel(), 1'566'915'075);
  EXPECT_EQ(xxl.backbone_numel(), 1'564'549'632);
  EXPECT_EQ(xxl.size(), 782u);
}

TEST(ParameterTable, XlargeShapesFollowTheStateDict) {
  const ParameterTable t(deberta_v2_xlarge_config());
  EXPECT_EQ(t.at("deberta.embeddings.word_embeddings.weight").shape, (Shape{128100, 1536}));
  EXPECT_EQ(t.at("deberta.encoder.layer.23.intermediate.dense.weight").shape, (Shape{6144, 1536}));
  EXPECT_EQ(t.at("deberta.encoder.layer.23.output.dense.weight").shape, (Shape{1536, 6144}));
  EXPECT_EQ(t.at("deberta.encoder.rel_embeddings.weight").shape, (Shape{512, 1536}));
  EXPECT_EQ(t.at("deberta.encoder.conv.conv.weight").shape, (Shape{1536, 1536, 3}));
  EXPECT_FALSE(t.contains("deberta.encoder.layer.24.output.dense.weight"));
  EXPECT_FALSE(t.contains("deberta.embeddings.position_embeddings.weight"));
  EXPECT_THROW(t.at("deberta.encoder.layer.0.attention.self.pos_key_proj.weight"), Error);
  EXPECT_EQ(t.entries().front().name, "deberta.embeddings.word_embeddings.weight");
  EXPECT_EQ(t.entries().back().name, "classifier.bias");
}

// HF's own named_parameters() for the fixture models, stored by make_model_fixtures.py.
class ParameterTableMatchesHf : public ::testing::TestWithParam<const char*> {};

TEST_P(ParameterTableMatchesHf, NamesShapesAndOrder) {
  test::Fixture f(GetParam());
  const ParameterTable table(parse_deberta_config(f.attr_str("config_json")));
  const nlohmann::json hf = nlohmann::json::parse(f.attr_str("param_table_json"));
  ASSERT_EQ(table.size(), hf.size());
  for (size_t i = 0; i < hf.size(); ++i) {
    const ParameterInfo& p = table.entries()[i];
    EXPECT_EQ(p.name, hf[i][0].get<std::string>()) << "entry " << i;
    const std::vector<int64_t> dims = hf[i][1].get<std::vector<int64_t>>();
    ASSERT_EQ(p.shape.rank, static_cast<int>(dims.size())) << p.name;
    for (size_t k = 0; k < dims.size(); ++k) EXPECT_EQ(p.shape[static_cast<int>(k)], dims[k]) << p.name;
    // Every HF parameter has a gradient in the fixture under the same name.
    EXPECT_TRUE(f.has("grad/" + p.name) || f.has("grad_stats/" + p.name)) << p.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ParameterTableMatchesHf,
                         ::testing::Values("deberta_tiny.h5", "deberta_xlarge_layout.h5"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

TEST(ParameterTable, MetadataRules) {
  const ParameterTable t(deberta_v2_xlarge_config());
  const ParameterInfo& wq = t.at("deberta.encoder.layer.5.attention.self.query_proj.weight");
  EXPECT_EQ(wq.kind, ParamKind::weight);
  EXPECT_EQ(wq.layer, 5);
  EXPECT_TRUE(wq.weight_decay);
  EXPECT_EQ(wq.shard_policy, ShardPolicy::shardable);

  const ParameterInfo& bq = t.at("deberta.encoder.layer.5.attention.self.query_proj.bias");
  EXPECT_EQ(bq.kind, ParamKind::bias);
  EXPECT_FALSE(bq.weight_decay);
  EXPECT_EQ(bq.shard_policy, ShardPolicy::resident);

  const ParameterInfo& ln = t.at("deberta.encoder.layer.5.output.LayerNorm.weight");
  EXPECT_EQ(ln.kind, ParamKind::layernorm_weight);
  EXPECT_FALSE(ln.weight_decay);
  EXPECT_EQ(t.at("deberta.encoder.layer.5.output.LayerNorm.bias").kind, ParamKind::layernorm_bias);

  const ParameterInfo& word = t.at("deberta.embeddings.word_embeddings.weight");
  EXPECT_EQ(word.kind, ParamKind::embedding);
  EXPECT_EQ(word.layer, -1);
  EXPECT_TRUE(word.weight_decay);
  EXPECT_EQ(t.at("deberta.encoder.rel_embeddings.weight").kind, ParamKind::embedding);
  EXPECT_EQ(t.at("deberta.encoder.conv.conv.weight").layer, -1);
  EXPECT_EQ(t.at("classifier.weight").shard_policy, ShardPolicy::resident);  // 3072 elements
  EXPECT_EQ(t.at("pooler.dense.weight").shard_policy, ShardPolicy::shardable);

  // run_glue_no_trainer's rule, by name: no decay iff the name contains "bias" or "LayerNorm.weight".
  for (const ParameterInfo& p : t.entries()) {
    const bool no_decay =
        p.name.find("bias") != std::string::npos || p.name.find("LayerNorm.weight") != std::string::npos;
    EXPECT_EQ(p.weight_decay, !no_decay) << p.name;
  }
  EXPECT_EQ(t.numel_where(true) + t.numel_where(false), t.total_numel());

  // A lower persistence threshold makes more tensors shardable.
  const ParameterTable strict(deberta_v2_xlarge_config(), {.persistence_threshold = 1000});
  EXPECT_EQ(strict.at("classifier.weight").shard_policy, ShardPolicy::shardable);
}

TEST(ParameterTable, LayerEntriesGroupTheGatherUnits) {
  const ParameterTable t(deberta_v2_xlarge_config());
  const auto layer7 = t.layer_entries(7);
  ASSERT_EQ(layer7.size(), 16u);
  EXPECT_EQ(layer7.front()->name, "deberta.encoder.layer.7.attention.self.query_proj.weight");
  EXPECT_EQ(layer7.back()->name, "deberta.encoder.layer.7.output.LayerNorm.bias");
  int64_t per_layer = 0;
  for (const ParameterInfo* p : layer7) per_layer += p->numel();
  EXPECT_EQ(per_layer, 28'331'520);  // §1.2
  EXPECT_EQ(t.layer_entries(-1).size(), 14u);
  EXPECT_TRUE(t.layer_entries(24).empty());
}

TEST(ParameterTable, OptionalModulesFollowTheConfig) {
  DebertaConfig c = deberta_small_cpu_config();
  c.conv_kernel_size = 0;
  c.rel_embeddings_layer_norm = false;
  const ParameterTable t(c);
  EXPECT_FALSE(t.contains("deberta.encoder.conv.conv.weight"));
  EXPECT_FALSE(t.contains("deberta.encoder.LayerNorm.weight"));
  EXPECT_EQ(t.at("deberta.encoder.rel_embeddings.weight").shape, (Shape{128, 128}));  // 2 x 64 buckets
  EXPECT_EQ(t.size(), 2u * 16 + 4 + 4);
}

TEST(ParameterTable, FlatLayoutIsAlignedOrderedAndShardable) {
  const ParameterTable t(deberta_small_cpu_config());
  const ArenaLayout layout = t.layout(DType::bf16, 4);
  ASSERT_EQ(layout.slots().size(), t.size());
  constexpr size_t kAlign = ParameterTable::kLayoutAlignElements * 2;  // bytes, bf16
  size_t previous_end = 0;
  for (const ParameterInfo& p : t.entries()) {
    const ArenaSlot& slot = layout.slot(p.name);
    EXPECT_EQ(slot.offset % kAlign, 0u) << p.name;
    EXPECT_EQ(slot.offset % 16, 0u) << p.name;       // 16-byte vector loads and cuBLASLt
    EXPECT_GE(slot.offset, previous_end) << p.name;  // state-dict order, no overlap
    EXPECT_LT(slot.offset, previous_end + kAlign) << p.name;
    EXPECT_EQ(slot.nbytes, static_cast<size_t>(p.numel()) * 2) << p.name;
    EXPECT_EQ(slot.shape, p.shape);
    previous_end = slot.end();
  }
  EXPECT_EQ(layout.used_bytes(), previous_end);
  EXPECT_EQ(layout.total_bytes() % (4 * kAlign), 0u);
  EXPECT_GE(layout.total_bytes(), layout.used_bytes());
  EXPECT_EQ(layout.shard_count(), 4);
  EXPECT_THROW(layout.slot("classifier.kernel"), Error);
}

// The f32 master and its 16-bit copy are one flat index space: the fused AdamW writes element e of the copy
// from element e of the master, so every tensor must sit at the same element offset in both layouts.
TEST(ParameterTable, LayoutsOfEveryDtypeShareElementOffsets) {
  const ParameterTable t(deberta_small_cpu_config());
  for (int shards : {1, 3}) {
    const ArenaLayout f32 = t.layout(DType::f32, shards);
    for (DType dtype : {DType::bf16, DType::f16}) {
      const ArenaLayout half = t.layout(dtype, shards);
      for (const ParameterInfo& p : t.entries()) {
        EXPECT_EQ(f32.slot(p.name).offset / 4, half.slot(p.name).offset / 2) << p.name;
      }
      EXPECT_EQ(f32.total_bytes() / 4, half.total_bytes() / 2);
      EXPECT_EQ(f32.shard_bytes() / 4, half.shard_bytes() / 2);
    }
  }
}

TEST(ParameterTable, DescribeListsEveryTensor) {
  const ParameterTable t(deberta_small_cpu_config());
  const std::string text = t.describe();
  for (const ParameterInfo& p : t.entries()) EXPECT_NE(text.find(p.name), std::string::npos) << p.name;
  EXPECT_NE(text.find(str(t.total_numel(), " parameters")), std::string::npos);
}

}  // namespace
}  // namespace zt
