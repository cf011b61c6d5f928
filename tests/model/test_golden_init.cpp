// The C++ golden init must reproduce tools/golden/golden_init.py bit for bit: hand-computed values, and the
// parameter samples the HF fixtures store (initialized in PyTorch from the Python implementation).
#include "model/golden_init.h"

#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "tests/support/fixtures.h"

namespace zt {
namespace {

// Reference numbers made with a standalone pure-Python-int one-off (no numpy, not golden_init.py):
//   fnv = FNV-1a 64 over name.encode(); x = (fnv + (i+1)*0x9E3779B97F4A7C15) & (2^64-1); splitmix64
//   finalizer; top24 = (h >> 40) - 2^23; values printed with float.hex() of top24 * 2^-23 * scale, and for
//   LayerNorm weights of struct-packed float32(1 + float32(top24 * 2^-26)).
TEST(GoldenInit, Fnv1a64MatchesPublishedVectors) {
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);  // the FNV reference test suite's value
  EXPECT_EQ(fnv1a64("classifier.weight"), 0x14e5f940ab234d36ULL);
}

TEST(GoldenInit, UnitValuesAreTheCentredTop24Bits) {
  EXPECT_EQ(golden_init_unit("classifier.weight", 0), 3637771 * 0x1p-23f);
  EXPECT_EQ(golden_init_unit("classifier.weight", 1), -7753540 * 0x1p-23f);
  EXPECT_EQ(golden_init_unit("deberta.embeddings.LayerNorm.weight", 0), -3188152 * 0x1p-23f);
  EXPECT_EQ(golden_init_unit("a", 123456789), 8276927 * 0x1p-23f);
}

TEST(GoldenInit, KindScalesMatchHandComputedValues) {
  EXPECT_EQ(golden_init_value("classifier.weight", 0, ParamKind::weight), 0x1.bc1058p-6f);
  EXPECT_EQ(golden_init_value("classifier.weight", 1, ParamKind::weight), -0x1.d93d1p-5f);
  EXPECT_EQ(golden_init_value("classifier.weight", 1, ParamKind::embedding), -0x1.d93d1p-5f);
  EXPECT_EQ(
      golden_init_value("deberta.encoder.layer.0.attention.self.query_proj.bias", 1535, ParamKind::bias),
      0x1.486d48p-7f);
  EXPECT_EQ(golden_init_value("deberta.embeddings.LayerNorm.bias", 31, ParamKind::layernorm_bias),
            0x1.fff8c8p-7f);
  EXPECT_EQ(golden_init_value("deberta.embeddings.LayerNorm.weight", 0, ParamKind::layernorm_weight),
            0x1.e7ad24p-1f);
  // 1 + 4813514 * 2^-26 needs 27 significant bits: the f32 add rounds (…cb28 → …cb2, ties-to-even).
  EXPECT_EQ(golden_init_value("deberta.embeddings.LayerNorm.weight", 100, ParamKind::layernorm_weight),
            0x1.125cb2p+0f);
  EXPECT_EQ(golden_init_value("a", 123456789, ParamKind::layernorm_weight), 0x1.1f92fp+0f);
}

TEST(GoldenInit, FillIsShardableByFirstIndex) {
  std::vector<float> whole(100), tail(40);
  golden_init_fill("deberta.encoder.rel_embeddings.weight", ParamKind::embedding, whole);
  golden_init_fill("deberta.encoder.rel_embeddings.weight", ParamKind::embedding, tail, 60);
  for (int i = 0; i < 40; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(tail[i]), std::bit_cast<uint32_t>(whole[60 + i]));
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(whole[i], golden_init_value("deberta.encoder.rel_embeddings.weight", i, ParamKind::embedding));
    EXPECT_GE(whole[i], -0.0625f);
    EXPECT_LT(whole[i], 0.0625f);
  }
  EXPECT_THROW(golden_init_value("x", -1, ParamKind::bias), Error);
}

// The kind HF-name suffixes imply, as tools/golden/golden_init.py's kind_of decides it.
ParamKind kind_from_name(const std::string& name) {
  auto ends_with = [&](std::string_view s) { return name.ends_with(s); };
  if (ends_with("LayerNorm.weight")) return ParamKind::layernorm_weight;
  if (ends_with("LayerNorm.bias")) return ParamKind::layernorm_bias;
  if (ends_with(".bias")) return ParamKind::bias;
  return ParamKind::weight;
}

class GoldenInitFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenInitFixture, ReproducesStoredParameterSamplesExactly) {
  test::Fixture f(GetParam());
  const std::vector<std::string> names = f.names("param_sample");
  ASSERT_GE(names.size(), 5u);
  for (const std::string& name : names) {
    const std::vector<int64_t> index = f.read_i64("param_sample/" + name + "/index");
    const std::vector<float> value = f.read_f32("param_sample/" + name + "/value");
    ASSERT_EQ(index.size(), value.size()) << name;
    int mismatches = 0;
    for (size_t i = 0; i < index.size(); ++i) {
      const float got = golden_init_value(name, index[i], kind_from_name(name));
      if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(value[i]) && mismatches++ < 3) {
        ADD_FAILURE() << name << "[" << index[i] << "]: C++ " << got << " vs fixture " << value[i];
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenInitFixture,
                         ::testing::Values("deberta_tiny.h5", "deberta_tiny_padded.h5",
                                           "deberta_xlarge_layout.h5"),
                         [](const auto& info) {
                           std::string name = info.param;
                           return name.substr(0, name.find('.'));
                         });

}  // namespace
}  // namespace zt
