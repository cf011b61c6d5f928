#include "kernels/relative_position.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/check.h"

namespace zt::kernels {
namespace {

// The r >= 0 bucket table printed in shared/reference/deberta-v2.md §3.2 (position_buckets 256,
// max_position 512), entries "bucket:first-last" or "bucket:r"; r <= 128 is the identity.
constexpr const char* kReferenceTable =
    "129:129 130:130 131:131-132 132:133 133:134-135 134:136 135:137-138 136:139 137:140-141 138:142 "
    "139:143-144 140:145 141:146-147 142:148-149 143:150 144:151-152 145:153-154 146:155 147:156-157 "
    "148:158-159 149:160 150:161-162 151:163-164 152:165-166 153:167-168 154:169 155:170-171 156:172-173 "
    "157:174-175 158:176-177 159:178-179 160:180-181 161:182-183 162:184-185 163:186-187 164:188-189 "
    "165:190-191 166:192-193 167:194-195 168:196-197 169:198-200 170:201-202 171:203-204 172:205-206 "
    "173:207-209 174:210-211 175:212-213 176:214-215 177:216-218 178:219-220 179:221-223 180:224-225 "
    "181:226-228 182:229-230 183:231-233 184:234-235 185:236-238 186:239-240 187:241-243 188:244-246 "
    "189:247-248 190:249-251 191:252-254 192:255-257 193:258-259 194:260-262 195:263-265 196:266-268 "
    "197:269-271 198:272-274 199:275-277 200:278-280 201:281-283 202:284-286 203:287-289 204:290-293 "
    "205:294-296 206:297-299 207:300-302 208:303-306 209:307-309 210:310-312 211:313-316 212:317-319 "
    "213:320-323 214:324-326 215:327-330 216:331-334 217:335-337 218:338-341 219:342-345 220:346-348 "
    "221:349-352 222:353-356 223:357-360 224:361-364 225:365-368 226:369-372 227:373-376 228:377-380 "
    "229:381-384 230:385-389 231:390-393 232:394-397 233:398-402 234:403-406 235:407-410 236:411-415 "
    "237:416-419 238:420-424 239:425-429 240:430-433 241:434-438 242:439-443 243:444-448 244:449-453 "
    "245:454-458 246:459-463 247:464-468 248:469-473 249:474-478 250:479-483 251:484-489 252:490-494 "
    "253:495-499 254:500-505 255:506-511";

// expected[r] for r in [0, 511], from the identity range and the parsed table.
std::vector<int64_t> reference_buckets() {
  std::vector<int64_t> expected(512, -1);
  for (int64_t r = 0; r <= 128; ++r) expected[r] = r;
  std::istringstream entries(kReferenceTable);
  std::string entry;
  while (entries >> entry) {
    const size_t colon = entry.find(':');
    const size_t dash = entry.find('-');
    const int64_t bucket = std::stoll(entry.substr(0, colon));
    const int64_t first =
        std::stoll(entry.substr(colon + 1, dash == std::string::npos ? dash : dash - colon - 1));
    const int64_t last = dash == std::string::npos ? first : std::stoll(entry.substr(dash + 1));
    for (int64_t r = first; r <= last; ++r) expected[r] = bucket;
  }
  return expected;
}

// The bucket formula in double precision, written independently of the fp32 kernel.
int64_t bucket_in_double(int64_t r, int64_t buckets, int64_t max_position) {
  const int64_t mid = buckets / 2;
  const int64_t a = (r > -mid && r < mid) ? mid - 1 : std::llabs(r);
  if (a <= mid) return r;
  const double magnitude =
      std::ceil(std::log(static_cast<double>(a) / mid) / std::log((max_position - 1.0) / mid) * (mid - 1)) +
      mid;
  return r < 0 ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
}

TEST(RelativePosition, MatchesReferenceTableForDebertaV2Xlarge) {
  const std::vector<int64_t> expected = reference_buckets();
  for (int64_t r = 0; r < 512; ++r) {
    ASSERT_NE(expected[r], -1) << "the parsed reference table misses r = " << r;
    EXPECT_EQ(make_log_bucket_position(r, 256, 512), expected[r]) << "r = " << r;
    EXPECT_EQ(make_log_bucket_position(-r, 256, 512), -expected[r]) << "r = " << -r;
  }
}

TEST(RelativePosition, EdgeOfTheLogRangeLandsOnTheLastBucket) {
  // |r| = max_position - 1: numerator and denominator are the same fp32 log, so exactly mid - 1 + mid.
  EXPECT_EQ(make_log_bucket_position(511, 256, 512), 255);
  EXPECT_EQ(make_log_bucket_position(-511, 256, 512), -255);
  EXPECT_EQ(make_log_bucket_position(63, 8, 64), 7);
  // Beyond max_position the formula keeps growing (the index clamp caps it later).
  EXPECT_EQ(make_log_bucket_position(512, 256, 512), 256);
  EXPECT_EQ(make_log_bucket_position(64, 8, 64), 8);
}

TEST(RelativePosition, SmallConfigHandValues) {
  // position_buckets 8, max_position 64: mid 4, bucket = ceil(ln(a/4) / ln(63/4) * 3) + 4 for a > 4.
  // ln(63/4) = 2.7568; r = 10: 0.9163 / 2.7568 * 3 = 0.997 -> 5; r = 11: 1.0116 / 2.7568 * 3 = 1.10 -> 6.
  const int64_t expected[][2] = {{0, 0}, {3, 3}, {4, 4}, {5, 5}, {10, 5}, {11, 6}, {30, 7}, {63, 7}};
  for (const auto& [r, bucket] : expected) {
    EXPECT_EQ(make_log_bucket_position(r, 8, 64), bucket) << "r = " << r;
    EXPECT_EQ(make_log_bucket_position(-r, 8, 64), -bucket) << "r = " << -r;
  }
}

TEST(RelativePosition, AgreesWithDoublePrecisionFormulaAndIsOdd) {
  const int64_t configs[][2] = {{8, 64}, {8, 512},  {16, 64}, {4, 32},
                                {6, 20}, {32, 128}, {8, 16},  {256, 512}};
  for (const auto& [buckets, max_position] : configs) {
    for (int64_t r = -3 * max_position; r <= 3 * max_position; ++r) {
      const int64_t got = make_log_bucket_position(r, buckets, max_position);
      ASSERT_EQ(got, bucket_in_double(r, buckets, max_position))
          << "buckets " << buckets << " max_position " << max_position << " r " << r;
      ASSERT_EQ(make_log_bucket_position(-r, buckets, max_position), -got) << "odd symmetry at r " << r;
    }
  }
}

TEST(RelativePosition, ResolvesHfDefaults) {
  const auto bucketed = RelativePositionConfig::from_model_config(8, -1, 64);
  EXPECT_EQ(bucketed.max_relative_positions, 64);
  EXPECT_EQ(bucketed.att_span(), 8);
  EXPECT_TRUE(bucketed.bucketed());
  const auto plain = RelativePositionConfig::from_model_config(-1, 6, 64);
  EXPECT_EQ(plain.att_span(), 6);
  EXPECT_FALSE(plain.bucketed());
  EXPECT_EQ(relative_bucket(40, plain), 40);
  EXPECT_EQ(relative_bucket(40, bucketed), make_log_bucket_position(40, 8, 64));
}

void expect_tables_consistent(const RelativePositionConfig& config, int64_t length) {
  const int64_t span = config.att_span();
  std::vector<int64_t> c2p(static_cast<size_t>(length * length)), p2c(c2p.size());
  build_c2p_index(config, Tensor(c2p.data(), Shape{length, length}, DType::i64));
  build_p2c_index(config, Tensor(p2c.data(), Shape{length, length}, DType::i64));
  for (int64_t i = 0; i < length; ++i) {
    for (int64_t j = 0; j < length; ++j) {
      const int64_t bucket = relative_bucket(i - j, config);
      const int64_t want_c2p = std::clamp<int64_t>(bucket + span, 0, 2 * span - 1);
      const int64_t want_p2c = std::clamp<int64_t>(-bucket + span, 0, 2 * span - 1);
      ASSERT_EQ(c2p[i * length + j], want_c2p) << "c2p (" << i << ", " << j << ")";
      ASSERT_EQ(p2c[i * length + j], want_p2c) << "p2c (" << i << ", " << j << ")";
      ASSERT_EQ(c2p_index(i, j, config), want_c2p);
      // The transposed p2c gather reads the same bucket as c2p: the attention relies on this.
      ASSERT_EQ(p2c[j * length + i], c2p[i * length + j]) << "mirror at (" << i << ", " << j << ")";
    }
  }
}

TEST(RelativePosition, IndexTablesClampAndMirror) {
  // Tiny golden-fixture style config: L = 11 runs past the bucket midpoint (4) into the log branch.
  expect_tables_consistent(RelativePositionConfig::from_model_config(8, -1, 64), 11);
  // max_position 16 < L: buckets past 7 exist and must be clamped into [0, 2S - 1].
  const auto tight = RelativePositionConfig::from_model_config(8, 16, 512);
  expect_tables_consistent(tight, 40);
  EXPECT_EQ(c2p_index(39, 0, tight), 15);
  EXPECT_EQ(c2p_index(0, 39, tight), 0);
  // No bucketing: plain i - j, clamped at +-S.
  const auto plain = RelativePositionConfig::from_model_config(-1, 6, 64);
  expect_tables_consistent(plain, 15);
  EXPECT_EQ(c2p_index(3, 3, plain), 6);
  EXPECT_EQ(c2p_index(14, 0, plain), 11);
  EXPECT_EQ(c2p_index(0, 14, plain), 0);
  // deberta-v2-xlarge at L = 128 uses rows 129..383 as §4.2 says.
  const auto xlarge = RelativePositionConfig::from_model_config(256, -1, 512);
  EXPECT_EQ(c2p_index(0, 127, xlarge), 129);
  EXPECT_EQ(c2p_index(127, 0, xlarge), 383);
}

TEST(RelativePosition, Int32TablesAndBadOutputs) {
  const auto config = RelativePositionConfig::from_model_config(8, -1, 64);
  std::vector<int32_t> table(9 * 7);
  build_c2p_index(config, Tensor(table.data(), Shape{9, 7}, DType::i32));
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(table[i * 7 + j], c2p_index(i, j, config));
  std::vector<float> wrong(9 * 7);
  EXPECT_THROW(build_c2p_index(config, Tensor(wrong.data(), Shape{9, 7}, DType::f32)), Error);
  EXPECT_THROW(build_p2c_index(config, Tensor(table.data(), Shape{63}, DType::i32)), Error);
}

}  // namespace
}  // namespace zt::kernels
