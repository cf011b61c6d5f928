#include <gtest/gtest.h>

#include <cmath>

#include "model/config.h"
#include "model/init.h"
#include "model/parameters.h"

namespace zt {
namespace {

TEST(Init, FollowsHfInitWeights) {
  DebertaConfig config = deberta_small_cpu_config();
  ParameterTable table(config);
  Arena params("params", table.layout(DType::f32));
  init_parameters(config, table, params, 42);

  const Tensor word = params.tensor("deberta.embeddings.word_embeddings.weight");
  const float* w = word.data_as<float>();
  const int64_t dim = word.dim(1);
  for (int64_t j = 0; j < dim; ++j) EXPECT_EQ(w[j], 0.0f) << "padding row must be zero";
  // Mean and standard deviation of the rest: N(0, 0.02^2) over ~1M samples.
  double sum = 0, sq = 0;
  const int64_t n = word.numel() - dim;
  for (int64_t i = dim; i < word.numel(); ++i) {
    sum += w[i];
    sq += static_cast<double>(w[i]) * w[i];
  }
  const double mean = sum / n, std = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(std, 0.02, 0.02 * 0.01);

  for (int64_t i = 0; i < config.hidden_size; ++i) {
    EXPECT_EQ(params.tensor("deberta.embeddings.LayerNorm.weight").data_as<float>()[i], 1.0f);
    EXPECT_EQ(params.tensor("deberta.embeddings.LayerNorm.bias").data_as<float>()[i], 0.0f);
    EXPECT_EQ(params.tensor("pooler.dense.bias").data_as<float>()[i], 0.0f);
  }
}

TEST(Init, DependsOnSeedAndNameOnly) {
  DebertaConfig config = deberta_small_cpu_config();
  ParameterTable table(config);
  Arena a("a", table.layout(DType::f32)), b("b", table.layout(DType::f32)), c("c", table.layout(DType::f32));
  init_parameters(config, table, a, 1);
  init_parameters(config, table, b, 1);
  init_parameters(config, table, c, 2);
  const char* name = "deberta.encoder.layer.1.intermediate.dense.weight";
  const Tensor ta = a.tensor(name), tb = b.tensor(name), tc = c.tensor(name);
  int same_as_other_seed = 0;
  for (int64_t i = 0; i < ta.numel(); ++i) {
    ASSERT_EQ(ta.data_as<float>()[i], tb.data_as<float>()[i]);
    same_as_other_seed += ta.data_as<float>()[i] == tc.data_as<float>()[i];
  }
  EXPECT_LT(same_as_other_seed, 10);
  // Two tensors of equal shape draw different values.
  const Tensor q = a.tensor("deberta.encoder.layer.0.attention.self.query_proj.weight");
  const Tensor k = a.tensor("deberta.encoder.layer.0.attention.self.key_proj.weight");
  EXPECT_NE(q.data_as<float>()[0], k.data_as<float>()[0]);
}

}  // namespace
}  // namespace zt
