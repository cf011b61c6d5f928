// GPU embedding gather and scatter-add against the CPU reference, per storage dtype of table/out/dout,
// with duplicate ids, the padding id, odd widths and misaligned views; bad ids poison rows with NaN.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/embedding.h"
#include "tests/kernels/tensor_views.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::DeviceArray;
using test::GpuCase;
using test::random_floats;
using test::round_through;

constexpr int64_t kVocab = 37;

class EmbeddingGpu : public ::testing::TestWithParam<GpuCase> {};

TEST_P(EmbeddingGpu, GatherAndScatterAddMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const GpuCase c = GetParam();
  const int64_t dim = c.shape[c.shape.rank - 1];
  Shape ids_shape;  // the leading shape of out
  ids_shape.rank = c.shape.rank - 1;
  for (int i = 0; i < ids_shape.rank; ++i) ids_shape[i] = c.shape[i];
  const Shape table_shape{kVocab, dim};
  std::vector<int64_t> ids(static_cast<size_t>(ids_shape.numel()));
  for (size_t t = 0; t < ids.size(); ++t)
    ids[t] = static_cast<int64_t>((t * 7) % 11);  // repeats, and 0 = padding
  std::vector<float> table = round_through(c.dtype, random_floats(table_shape.numel(), 31));
  std::vector<float> dout = round_through(c.dtype, random_floats(c.shape.numel(), 32));
  std::vector<float> out_ref(static_cast<size_t>(c.shape.numel()));
  std::vector<float> dtable_ref = random_floats(table_shape.numel(), 33);
  const std::vector<float> dtable0 = dtable_ref;
  embedding_forward(test::i64_view(ids, ids_shape), test::f32_view(table, table_shape),
                    test::f32_view(out_ref, c.shape));
  embedding_backward(test::i64_view(ids, ids_shape), test::f32_view(dout, c.shape),
                     test::f32_view(dtable_ref, table_shape), 0);

  DeviceArray gids(DType::i64, ids_shape), gtable(c.dtype, table_shape, c.offset),
      gout(c.dtype, c.shape, c.offset);
  DeviceArray gdout(c.dtype, c.shape, c.offset), gdtable(DType::f32, table_shape);
  gids.upload_raw(ids);
  gtable.upload(table);
  gdout.upload(dout);
  gdtable.upload(dtable0);
  embedding_forward(gids.tensor(), gtable.tensor(), gout.tensor());
  EXPECT_EQ(gout.download(), out_ref);  // a copy: exact
  embedding_backward(gids.tensor(), gdout.tensor(), gdtable.tensor(), 0);
  // Duplicate ids add in atomic order: equal up to f32 reassociation.
  const std::vector<float> dtable = gdtable.download();
  EXPECT_TRUE(test::all_close("dtable", dtable, dtable_ref, test::tolerance_for(DType::f32)));
  for (int64_t j = 0; j < dim; ++j)
    EXPECT_EQ(dtable[static_cast<size_t>(j)], dtable0[static_cast<size_t>(j)]);
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, EmbeddingGpu, ::testing::ValuesIn(test::standard_gpu_cases()),
                         [](const auto& info) { return test::gpu_case_name(info.param); });

TEST(EmbeddingGpuBadIds, OutOfRangeIdWritesNanRowAndIsSkippedByBackward) {
  ZT_SKIP_WITHOUT_GPU();
  const int64_t dim = 24;
  std::vector<int64_t> ids = {3, kVocab, -1, 5};
  DeviceArray gids(DType::i64, Shape{4}), gtable(DType::f32, Shape{kVocab, dim}),
      gout(DType::f32, Shape{4, dim});
  DeviceArray gdtable(DType::f32, Shape{kVocab, dim});
  gids.upload_raw(ids);
  gtable.upload(random_floats(kVocab * dim, 34));
  gdtable.upload(std::vector<float>(static_cast<size_t>(kVocab * dim), 0.0f));
  embedding_forward(gids.tensor(), gtable.tensor(), gout.tensor());
  const std::vector<float> out = gout.download();
  for (int64_t j = 0; j < dim; ++j) {
    EXPECT_FALSE(std::isnan(out[static_cast<size_t>(j)]));
    EXPECT_TRUE(std::isnan(out[static_cast<size_t>(dim + j)]));
    EXPECT_TRUE(std::isnan(out[static_cast<size_t>(2 * dim + j)]));
  }
  embedding_backward(gids.tensor(), gout.tensor(), gdtable.tensor(), -1);
  for (float v : gdtable.download()) EXPECT_FALSE(std::isnan(v));
}

}  // namespace
}  // namespace zt::kernels

#endif  // ZT_WITH_CUDA
