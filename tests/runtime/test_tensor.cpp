#include <gtest/gtest.h>

#include <vector>

#include "runtime/check.h"
#include "runtime/tensor.h"

namespace zt {
namespace {

TEST(Shape, CountsComparesAndPrints) {
  EXPECT_EQ((Shape{2, 3, 4}).numel(), 24);
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
  EXPECT_EQ((Shape{5, 0}).numel(), 0);
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_FALSE((Shape{2, 3}) == (Shape{3, 2}));
  EXPECT_FALSE((Shape{6}) == (Shape{6, 1}));
  EXPECT_EQ((Shape{2, 3}).to_string(), "[2, 3]");
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6, 7}), Error);
  EXPECT_THROW((Shape{2, -1}), Error);
}

TEST(Tensor, RowMajorStridesAndTypedAccess) {
  std::vector<float> v(24);
  Tensor t(v.data(), {2, 3, 4}, DType::f32);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.dim(-1), 4);
  EXPECT_THROW(t.dim(3), Error);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.data_as<float>(), v.data());
  EXPECT_THROW(t.data_as<int32_t>(), Error);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4] cpu");
}

TEST(Tensor, ReshapeAndRowSlicesShareMemory) {
  std::vector<int32_t> v(12);
  for (int i = 0; i < 12; ++i) v[i] = i;
  Tensor t(v.data(), {4, 3}, DType::i32);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.data_as<int32_t>()[0], 3);
  EXPECT_TRUE(rows.is_contiguous());
  Tensor flat = rows.reshape({6});
  EXPECT_EQ(flat.data_as<int32_t>()[5], 8);
  EXPECT_THROW(t.reshape({5}), Error);
  EXPECT_THROW(t.slice_rows(2, 5), Error);
  EXPECT_THROW(t.slice_rows(3, 2), Error);
  EXPECT_EQ(t.slice_rows(4, 4).numel(), 0);
  EXPECT_NO_THROW(check_shape(t, {4, 3}, "t"));
  try {
    check_shape(t, {3, 4}, "attention scores");
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention scores: expected shape [3, 4], got [4, 3]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zt
