// Embedding: gather against loops, scatter-add backward against finite differences, duplicate ids adding,
// the padding_idx rule, and out-of-range ids.
#include "kernels/embedding.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/check.h"
#include "tests/kernels/tensor_views.h"
#include "tests/support/finite_difference.h"
#include "tests/support/tolerance.h"

namespace zt::kernels {
namespace {

using test::f32_view;
using test::i64_view;

constexpr int kVocab = 9, kDim = 7;

// ids [2, 3] with a repeated id (3) and the padding id (0) at a real position.
struct EmbeddingCase {
  std::vector<int64_t> ids{3, 0, 8, 5, 3, 1};
  std::vector<float> table = test::random_uniform(kVocab * kDim, 61);
  std::vector<float> r = test::random_uniform(6 * kDim, 62);
  std::vector<float> out = std::vector<float>(6 * kDim);

  Tensor idt() { return i64_view(ids, {2, 3}); }
  Tensor tablet() { return f32_view(table, {kVocab, kDim}); }
  Tensor outt() { return f32_view(out, {2, 3, kDim}); }
  Tensor rt() { return f32_view(r, {2, 3, kDim}); }
};

TEST(Embedding, ForwardGathersRows) {
  EmbeddingCase c;
  embedding_forward(c.idt(), c.tablet(), c.outt());
  std::vector<float> ref(c.out.size());
  for (size_t t = 0; t < c.ids.size(); ++t) {
    for (int j = 0; j < kDim; ++j) ref[t * kDim + j] = c.table[c.ids[t] * kDim + j];
  }
  EXPECT_TRUE(test::all_close("out", c.out, ref, {0, 0}));
}

TEST(Embedding, BackwardMatchesFiniteDifferencesWithoutPadding) {
  EmbeddingCase c;
  std::vector<float> dtable(c.table.size(), 0.0f);
  embedding_backward(c.idt(), c.rt(), f32_view(dtable, {kVocab, kDim}), /*padding_idx=*/-1);
  auto loss = [&] {
    embedding_forward(c.idt(), c.tablet(), c.outt());
    return test::dot(c.out, c.r);
  };
  EXPECT_TRUE(test::check_gradient("dtable", c.table, dtable, loss, {.max_elements = 0}));
}

TEST(Embedding, DuplicatesAddAndPaddingRowGetsNothing) {
  EmbeddingCase c;
  std::vector<float> dtable(c.table.size(), 0.5f);                        // accumulates onto what is there
  embedding_backward(c.idt(), c.rt(), f32_view(dtable, {kVocab, kDim}));  // padding_idx 0
  for (int j = 0; j < kDim; ++j) {
    EXPECT_EQ(dtable[0 * kDim + j], 0.5f) << "padding row must not move, column " << j;
    EXPECT_FLOAT_EQ(dtable[3 * kDim + j], 0.5f + c.r[0 * kDim + j] + c.r[4 * kDim + j]) << j;
    EXPECT_FLOAT_EQ(dtable[8 * kDim + j], 0.5f + c.r[2 * kDim + j]) << j;
    EXPECT_EQ(dtable[2 * kDim + j], 0.5f) << "unused row " << j;
  }
}

TEST(Embedding, OutOfRangeIdsAreErrors) {
  EmbeddingCase c;
  std::vector<float> dtable(c.table.size(), 0.0f);
  for (int64_t bad : {int64_t{-1}, int64_t{kVocab}}) {
    c.ids[4] = bad;
    EXPECT_THROW(embedding_forward(c.idt(), c.tablet(), c.outt()), Error) << bad;
    EXPECT_THROW(embedding_backward(c.idt(), c.rt(), f32_view(dtable, {kVocab, kDim})), Error) << bad;
  }
}

TEST(Embedding, RejectsWrongOutputShape) {
  EmbeddingCase c;
  std::vector<float> flat(6 * kDim);
  EXPECT_THROW(embedding_forward(c.idt(), c.tablet(), f32_view(flat, {6, kDim})), Error);
}

}  // namespace
}  // namespace zt::kernels
