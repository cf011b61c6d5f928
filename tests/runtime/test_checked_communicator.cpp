// make_checked_communicator over in-process ranks: matching sequences behave exactly like the inner
// communicator; ranks calling different sequences all throw one report that shows each disagreeing rank's
// recent collectives side by side (instead of hanging, as NCCL would), without running the mismatched
// collective; invalid arguments on one rank fail every rank; the group is usable after such an error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/communicator.h"
#include "tests/support/rank_threads.h"

namespace zt {
namespace {

using test::Comms;
using test::expect_all_succeeded;
using test::run_ranks;

Comms checked_group(int world, CheckedCommunicatorOptions options = {}) {
  Comms inner = make_in_process_group(world, {.timeout = std::chrono::seconds(20)});
  Comms comms;
  for (auto& c : inner) comms.push_back(make_checked_communicator(std::move(c), options));
  return comms;
}

Tensor f32_view(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())}, DType::f32);
}

// Three collectives every rank makes alike (the history before a mismatch).
void common_prefix(Communicator& c) {
  const int world = c.world_size();
  std::vector<float> full(static_cast<size_t>(4 * world), 1.0f), shard(4);
  c.reduce_scatter_sum(f32_view(full), f32_view(shard));
  c.all_gather(f32_view(shard), f32_view(full));
  std::vector<float> norm(1, 2.0f);
  c.all_reduce_sum(f32_view(norm));
}

void expect_contains(const std::string& text, const std::string& fragment, int rank) {
  EXPECT_NE(text.find(fragment), std::string::npos) << "rank " << rank << ": '" << fragment << "' not in:\n"
                                                    << text;
}

TEST(CheckedCommunicator, MatchingSequencesGiveTheInnerResults) {
  const int world = 3;
  auto comms = checked_group(world);
  EXPECT_EQ(comms[0]->backend_name(), "checked in-process");
  EXPECT_EQ(comms[0]->cuda_device(), -1);
  std::vector<std::vector<float>> gathered(world), reduced(world), broadcast(world);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    const auto r = static_cast<size_t>(c.rank());
    std::vector<float> full(static_cast<size_t>(2 * world));
    for (size_t i = 0; i < full.size(); ++i)
      full[i] = static_cast<float>(c.rank() * 100 + static_cast<int>(i));
    std::vector<float> shard(2);
    c.reduce_scatter_sum(f32_view(full), f32_view(shard));
    gathered[r].assign(full.size(), -1.0f);
    c.all_gather(f32_view(shard), f32_view(gathered[r]));
    reduced[r].assign(3, static_cast<float>(c.rank() + 1));
    c.all_reduce_sum(f32_view(reduced[r]));
    broadcast[r].assign(2, static_cast<float>(c.rank()));
    c.broadcast(f32_view(broadcast[r]), 2);
    c.barrier();
  }));
  for (int r = 0; r < world; ++r) {
    for (int j = 0; j < 2 * world; ++j)  // sum over ranks of (rank*100 + j)
      EXPECT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(j)], static_cast<float>(300 + 3 * j));
    EXPECT_EQ(reduced[static_cast<size_t>(r)][2], 6.0f);
    EXPECT_EQ(broadcast[static_cast<size_t>(r)][1], 2.0f);
  }
}

// Rank 1 calls a broadcast where rank 0 calls an all_reduce. Both ranks throw the same report: the
// collective number, both calls, and both histories side by side with the differing row marked. The
// mismatched collective does not run (rank 0's buffer keeps its values), and the next matching collective
// works.
TEST(CheckedCommunicator, DifferentSequencesFailOnEveryRankShowingBothSequences) {
  auto comms = checked_group(2);
  std::vector<std::vector<float>> data(2);
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    common_prefix(c);
    auto& x = data[static_cast<size_t>(c.rank())];
    x.assign(8, static_cast<float>(c.rank() + 1));
    if (c.rank() == 0)
      c.all_reduce_sum(f32_view(x));
    else
      c.broadcast(f32_view(x), 0);
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    ASSERT_FALSE(e.empty()) << "rank " << r << " did not throw";
    expect_contains(e, "collective sequence mismatch at collective #3", r);
    expect_contains(e, "rank 0 called all_reduce_sum f32[8]", r);
    expect_contains(e, "rank 1 called broadcast f32[8] root 0", r);
    expect_contains(e, "reduce_scatter_sum f32[8]->[4]", r);  // the shared history, in both columns
    expect_contains(e, "all_gather f32[4]->[8]", r);
    expect_contains(e, "all_reduce_sum f32[1]", r);
    expect_contains(e, "<-- differs", r);
  }
  EXPECT_EQ(errors[0].substr(0, errors[0].find(" [")), errors[1].substr(0, errors[1].find(" [")));
  EXPECT_EQ(data[0][0], 1.0f) << "the mismatched all_reduce ran";
  EXPECT_EQ(data[1][0], 2.0f) << "the mismatched broadcast ran";

  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& x = data[static_cast<size_t>(c.rank())];
    x.assign(8, 1.0f);
    c.all_reduce_sum(f32_view(x));
  }));
  EXPECT_EQ(data[1][7], 2.0f);
}

// Ranks that agree share a column ("rank 0,1,3"); only the odd one gets its own.
TEST(CheckedCommunicator, RanksMakingTheSameCallShareAColumn) {
  auto comms = checked_group(4);
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    std::vector<float> x(c.rank() == 2 ? 8 : 7);
    c.all_reduce_sum(f32_view(x));
  });
  for (int r = 0; r < 4; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    expect_contains(e, "rank 0,1,3 called all_reduce_sum f32[7]; rank 2 called all_reduce_sum f32[8]", r);
  }
}

// The report holds `history` collectives per rank: with 2, the oldest of four is not shown.
TEST(CheckedCommunicator, HistoryLengthIsTheOption) {
  auto comms = checked_group(2, {.history = 2});
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    common_prefix(c);
    if (c.rank() == 0) c.barrier();
    std::vector<float> x(5);
    if (c.rank() == 1) c.all_reduce_sum(f32_view(x));
  });
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    expect_contains(e, "rank 0 called barrier; rank 1 called all_reduce_sum f32[5]", r);
    expect_contains(e, "all_reduce_sum f32[1]", r);
    EXPECT_EQ(e.find("all_gather"), std::string::npos) << e;
    EXPECT_EQ(e.find("reduce_scatter"), std::string::npos) << e;
  }
}

// One rank's own invalid arguments: it throws its precise error, the others name it; none is left in the
// inner collective.
TEST(CheckedCommunicator, InvalidArgumentsOnOneRankFailEveryRank) {
  auto comms = checked_group(3);
  const auto errors = run_ranks(comms, [&](Communicator& c) {
    std::vector<float> in(21), out(c.rank() == 1 ? 6 : 7);
    c.reduce_scatter_sum(f32_view(in), f32_view(out));
  });
  expect_contains(errors[1], "reduce_scatter_sum on rank 1 of 3: input has 21 elements and output 6", 1);
  for (int r : {0, 2})
    expect_contains(errors[static_cast<size_t>(r)], "rank 1 passed invalid arguments to reduce_scatter_sum",
                    r);
}

TEST(CheckedCommunicator, RejectsNoInnerAndAnEmptyHistory) {
  EXPECT_THROW(make_checked_communicator(nullptr), Error);
  EXPECT_THROW(make_checked_communicator(std::move(make_in_process_group(1)[0]), {.history = 0}), Error);
}

}  // namespace
}  // namespace zt
