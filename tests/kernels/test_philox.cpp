// Philox4x32-10 against the published Random123 known-answer vectors (kat_vectors), and the index layouts of
// uniform(seed, site_id, index) and the attention draw.
#include "kernels/philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace zt::kernels {
namespace {

struct KnownAnswer {
  PhiloxCounter counter;
  PhiloxKey key;
  uint32_t expected[4];
};

// Random123 tests/kat_vectors, lines "philox4x32 10 <ctr x4> <key x2> <expected x4>".
constexpr KnownAnswer kKnownAnswers[] = {
    {{{0x00000000, 0x00000000, 0x00000000, 0x00000000}},
     {{0x00000000, 0x00000000}},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
     {{0xffffffff, 0xffffffff}},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
     {{0xa4093822, 0x299f31d0}},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

TEST(Philox, MatchesRandom123KnownAnswers) {
  for (const KnownAnswer& kat : kKnownAnswers) {
    const PhiloxCounter out = philox4x32_10(kat.counter, kat.key);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(out.word[w], kat.expected[w])
          << "word " << w << " of counter 0x" << std::hex << kat.counter.word[0];
    }
  }
}

TEST(Philox, UniformUsesTopBitsOfTheDocumentedBlockWord) {
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t site = 0xfedcba9876543210ull;
  for (uint64_t index : {0ull, 1ull, 2ull, 3ull, 4ull, 7ull, 1000003ull, (1ull << 34) + 5}) {
    const uint64_t block = index / 4;
    const PhiloxCounter counter{{static_cast<uint32_t>(block & 0xffffffffu),
                                 static_cast<uint32_t>(block >> 32), 0x76543210u, 0xfedcba98u}};
    const PhiloxKey key{{0x89abcdefu, 0x01234567u}};
    const uint32_t word = philox4x32_10(counter, key).word[index % 4];
    const double expected = std::ldexp(static_cast<double>(word >> 8), -24);
    EXPECT_EQ(static_cast<double>(uniform(seed, site, index)), expected) << "index " << index;
  }
}

TEST(Philox, UniformStaysInUnitIntervalWithMeanOneHalf) {
  const int n = 100000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float u = uniform(7, 11, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  // Standard deviation of the mean is sqrt(1/12 / n) ~ 9e-4; allow 5 sigma.
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12.0 / n));
}

TEST(Philox, SeedAndSiteBothChangeTheStream) {
  int same_seed_diff = 0, same_site_diff = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    same_seed_diff += uniform(1, 2, i) != uniform(1, 3, i);
    same_site_diff += uniform(1, 2, i) != uniform(4, 2, i);
  }
  EXPECT_GT(same_seed_diff, 60);
  EXPECT_GT(same_site_diff, 60);
}

// The round-by-round form the GPU flash attention draws with: the blocks of philox_block, including a block
// index that carries into the counter's high word.
TEST(Philox, BlocksRoundByRoundEqualPhiloxBlock) {
  constexpr uint64_t kSeed = 0x0123456789abcdefull, kSite = 0xfedcba9876543210ull;
  for (const uint64_t first : {uint64_t{0}, uint64_t{0xfffffffbull}, uint64_t{1} << 40}) {
    PhiloxCounter blocks[8];
    philox_blocks(kSeed, kSite, first, 2, blocks);
    for (int n = 0; n < 8; ++n) {
      const PhiloxCounter want = philox_block(kSeed, kSite, first + 2 * static_cast<uint64_t>(n));
      for (int w = 0; w < 4; ++w)
        EXPECT_EQ(blocks[n].word[w], want.word[w]) << "first " << first << " n " << n;
    }
  }
}

// The blocks of explicit indices (the flash forward's form) equal philox_block.
TEST(Philox, BlocksAtIndicesEqualPhiloxBlock) {
  constexpr uint64_t kSeed = 0x0123456789abcdefull, kSite = 0xfedcba9876543210ull;
  const uint64_t block[4] = {3, 1000, 0xffffffffull, (uint64_t{1} << 40) + 7};
  PhiloxCounter blocks[4];
  philox_blocks(kSeed, kSite, block, blocks);
  for (int n = 0; n < 4; ++n) {
    const PhiloxCounter want = philox_block(kSeed, kSite, block[n]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(blocks[n].word[w], want.word[w]) << "n " << n;
  }
}

// The attention draw: element e is half e % 8 (low 16 bits first) of block e / 8, kept at or above
// ceil(p 2^16); attention_keep_bits is the same test for a block's 8 elements at once.
TEST(Philox, AttentionKeepUsesTheDocumentedHalf) {
  constexpr uint64_t kSeed = 0x0123456789abcdefull, kSite = 0xfedcba9876543210ull;
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    const uint32_t threshold = attention_keep_threshold(p);
    EXPECT_EQ(threshold, static_cast<uint32_t>(std::ceil(static_cast<double>(p) * 65536.0)));
    for (const uint64_t index : {0ull, 1ull, 7ull, 8ull, 13ull, 1000003ull, (1ull << 35) + 5}) {
      const PhiloxCounter block = philox_block(kSeed, kSite, index / 8);
      const uint32_t word = block.word[(index % 8) / 2];
      const uint32_t half = index % 2 == 0 ? word & 0xffffu : word >> 16;
      EXPECT_EQ(attention_keep(kSeed, kSite, index, threshold), half >= threshold) << "index " << index;
      EXPECT_EQ((attention_keep_bits(block, threshold) >> (index % 8)) & 1u, half >= threshold ? 1u : 0u);
    }
  }
}

// Rows of P are numbered as if padded to a multiple of 8 keys: every 8-key group of a row is one block.
TEST(Philox, AttentionRowsArePaddedToEightKeys) {
  EXPECT_EQ(attention_row_pitch(1), 8u);
  EXPECT_EQ(attention_row_pitch(8), 8u);
  EXPECT_EQ(attention_row_pitch(11), 16u);
  EXPECT_EQ(attention_row_pitch(2100), 2104u);
}

// The drop rate is p rounded up to 2^-16: within 5 sigma of p over 2^20 elements, and p = 0 keeps all.
TEST(Philox, AttentionKeepDropsAtRateP) {
  const uint32_t keep_all = attention_keep_threshold(0.0f);
  for (uint64_t i = 0; i < 64; ++i) EXPECT_TRUE(attention_keep(3, 5, i, keep_all));
  for (const double p : {0.1, 0.5}) {
    const uint32_t threshold = attention_keep_threshold(static_cast<float>(p));
    const int64_t n = int64_t{1} << 20;
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i)
      dropped += attention_keep(7, 11, static_cast<uint64_t>(i), threshold) ? 0 : 1;
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 5 * std::sqrt(p * (1 - p) / n)) << "p " << p;
  }
}

}  // namespace
}  // namespace zt::kernels
