// The in-process communicator: every collective against values computed here, for world sizes 1-4 and
// sizes that are multiples of nothing; the ZeRO-2 identity (reduce_scatter + all_gather == all_reduce) on an
// ArenaLayout-padded flat buffer; bit-identical results on every rank; errors on every rank for mismatched
// arguments; abort and timeout propagation. Each rank runs on its own thread; the harness gives up after a
// deadline (aborting the group to wake the ranks) so a broken backend fails instead of hanging CI.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/arena.h"
#include "runtime/communicator.h"
#include "tests/support/rank_threads.h"

namespace zt {
namespace {

using test::Comms;
using test::expect_all_succeeded;
using test::run_ranks;

Tensor f32_view(std::vector<float>& v) {
  return Tensor(v.data(), {static_cast<int64_t>(v.size())}, DType::f32);
}

// Values that are not exactly representable sums, so summation order shows in the bits.
float awkward_value(int rank, int64_t i) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.7 * rank) * 3.1e-3 +
                            1.0 / (rank + 3.0));
}

struct CollectiveCase {
  int world;
  int64_t n;
};

void PrintTo(const CollectiveCase& c, std::ostream* os) {
  *os << "world " << c.world << ", n " << c.n;
}

class InProcessCollectives : public ::testing::TestWithParam<CollectiveCase> {};

// Rank r contributes r*1000 + i: every sum is an exact integer in f32, so equality is exact.
TEST_P(InProcessCollectives, AllReduceSumsEveryRank) {
  const auto [world, n] = GetParam();
  auto comms = make_in_process_group(world);
  std::vector<std::vector<float>> data(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& x = data[static_cast<size_t>(c.rank())];
    x.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(c.rank() * 1000 + i);
    c.all_reduce_sum(f32_view(x));
  }));
  const int64_t rank_sum = 1000LL * world * (world - 1) / 2;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)],
                static_cast<float>(rank_sum + world * i))
          << "rank " << r << " element " << i;
}

TEST_P(InProcessCollectives, ReduceScatterGivesEachRankItsSummedBlock) {
  const auto [world, n] = GetParam();
  auto comms = make_in_process_group(world);
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    std::vector<float> in(static_cast<size_t>(world * n));
    for (int64_t j = 0; j < world * n; ++j)
      in[static_cast<size_t>(j)] = static_cast<float>(c.rank() * 1000 + j);
    auto& o = out[static_cast<size_t>(c.rank())];
    o.assign(static_cast<size_t>(n), -1.0f);
    c.reduce_scatter_sum(f32_view(in), f32_view(o));
  }));
  const int64_t rank_sum = 1000LL * world * (world - 1) / 2;
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(i)],
                static_cast<float>(rank_sum + world * (r * n + i)))
          << "rank " << r << " element " << i;
}

TEST_P(InProcessCollectives, AllGatherConcatenatesShardsInRankOrder) {
  const auto [world, n] = GetParam();
  auto comms = make_in_process_group(world);
  std::vector<std::vector<float>> out(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    std::vector<float> shard(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) shard[static_cast<size_t>(i)] = static_cast<float>(c.rank() * 1000 + i);
    auto& o = out[static_cast<size_t>(c.rank())];
    o.assign(static_cast<size_t>(world * n), -1.0f);
    c.all_gather(f32_view(shard), f32_view(o));
  }));
  for (int r = 0; r < world; ++r)
    for (int s = 0; s < world; ++s)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[static_cast<size_t>(r)][static_cast<size_t>(s * n + i)],
                  static_cast<float>(s * 1000 + i))
            << "rank " << r << " block " << s << " element " << i;
}

TEST_P(InProcessCollectives, BroadcastCopiesTheRootFromEveryRoot) {
  const auto [world, n] = GetParam();
  auto comms = make_in_process_group(world);
  for (int root = 0; root < world; ++root) {
    std::vector<std::vector<float>> data(static_cast<size_t>(world));
    expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
      auto& x = data[static_cast<size_t>(c.rank())];
      x.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(c.rank() * 1000 + i);
      c.broadcast(f32_view(x), root);
    }));
    for (int r = 0; r < world; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)], static_cast<float>(root * 1000 + i))
            << "root " << root << " rank " << r << " element " << i;
  }
}

// Gathers and broadcasts copy raw elements of any dtype: 8-byte integers must arrive whole (values that use
// every byte, so a copy of numel bytes instead of numel * 8 fails).
TEST_P(InProcessCollectives, AllGatherAndBroadcastCopyWholeI64Elements) {
  const auto [world, n] = GetParam();
  auto comms = make_in_process_group(world);
  auto value = [](int rank, int64_t i) { return (int64_t{rank + 1} << 40) + 0x0102030405LL * (i + 1); };
  std::vector<std::vector<int64_t>> gathered(static_cast<size_t>(world)),
      broadcast(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    std::vector<int64_t> shard(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) shard[static_cast<size_t>(i)] = value(c.rank(), i);
    auto& g = gathered[static_cast<size_t>(c.rank())];
    g.assign(static_cast<size_t>(world * n), -1);
    c.all_gather(Tensor(shard.data(), {n}, DType::i64), Tensor(g.data(), {world * n}, DType::i64));
    auto& b = broadcast[static_cast<size_t>(c.rank())];
    b = shard;
    c.broadcast(Tensor(b.data(), {n}, DType::i64), world - 1);
  }));
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < world; ++s)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(s * n + i)], value(s, i))
            << "rank " << r << " block " << s << " element " << i;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(broadcast[static_cast<size_t>(r)][static_cast<size_t>(i)], value(world - 1, i))
          << "rank " << r;
  }
}

// Awkward values: the sum depends on its order, so this checks the rank-order rule bit for bit, on every
// rank, and the ZeRO-2 identity: reduce_scatter then all_gather (both in place on the flat buffer) gives
// exactly what all_reduce gives.
TEST_P(InProcessCollectives, ReduceScatterThenAllGatherEqualsAllReduceBitForBit) {
  const auto [world, n] = GetParam();
  const int64_t total = world * n;
  auto comms = make_in_process_group(world);
  std::vector<std::vector<float>> reduced(static_cast<size_t>(world)), zero2(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& a = reduced[static_cast<size_t>(c.rank())];
    auto& b = zero2[static_cast<size_t>(c.rank())];
    a.resize(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) a[static_cast<size_t>(j)] = awkward_value(c.rank(), j);
    b = a;
    c.all_reduce_sum(f32_view(a));
    Tensor flat = f32_view(b);
    Tensor shard = flat.slice_rows(c.rank() * n, (c.rank() + 1) * n);
    c.reduce_scatter_sum(flat, shard);  // in place: the shard is this rank's block of the flat buffer
    c.all_gather(shard, flat);          // in place: the shard is read before any block is written
  }));
  for (int r = 0; r < world; ++r) {
    for (int64_t j = 0; j < total; ++j) {
      float expected = awkward_value(0, j);  // the test's own rank-order sum
      for (int s = 1; s < world; ++s) expected += awkward_value(s, j);
      const size_t k = static_cast<size_t>(j);
      ASSERT_EQ(std::memcmp(&reduced[static_cast<size_t>(r)][k], &expected, sizeof(float)), 0)
          << "all_reduce rank " << r << " element " << j << ": " << reduced[static_cast<size_t>(r)][k]
          << " vs " << expected;
      ASSERT_EQ(std::memcmp(&zero2[static_cast<size_t>(r)][k], &expected, sizeof(float)), 0)
          << "reduce_scatter+all_gather rank " << r << " element " << j << ": "
          << zero2[static_cast<size_t>(r)][k] << " vs " << expected;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldAndSize, InProcessCollectives,
                         ::testing::Values(CollectiveCase{1, 7}, CollectiveCase{1, 1001},
                                           CollectiveCase{2, 7}, CollectiveCase{2, 1001},
                                           CollectiveCase{3, 7}, CollectiveCase{3, 1001},
                                           CollectiveCase{4, 7}, CollectiveCase{4, 1001}),
                         [](const ::testing::TestParamInfo<CollectiveCase>& info) {
                           return "world" + std::to_string(info.param.world) + "_n" +
                                  std::to_string(info.param.n);
                         });

// A padded flat gradient buffer laid out by ArenaLayout: the communicator's rank blocks are exactly the
// arena's shards, so reduce_scatter into view(shard_offset(rank), shard_bytes) leaves each rank the summed
// gradients of the tensors (or parts) it owns, and all_gather restores every named tensor.
class ArenaShards : public ::testing::TestWithParam<int> {};

TEST_P(ArenaShards, ReduceScatterShardsAreArenaLayoutShards) {
  const int world = GetParam();
  ArenaLayout layout({{"a", {7}, DType::f32}, {"b", {33, 5}, DType::f32}, {"c", {1001}, DType::f32}});
  layout.set_shard_count(world);
  ASSERT_EQ(layout.total_bytes() % (static_cast<size_t>(world) * sizeof(float)), 0u);
  const int64_t total = static_cast<int64_t>(layout.total_bytes() / sizeof(float));
  const int64_t shard = static_cast<int64_t>(layout.shard_bytes() / sizeof(float));
  auto comms = make_in_process_group(world);
  std::vector<std::vector<float>> flats(static_cast<size_t>(world));
  std::vector<std::vector<float>> shards(static_cast<size_t>(world));
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& flat = flats[static_cast<size_t>(c.rank())];
    flat.assign(static_cast<size_t>(total), 0.0f);  // padding stays zero on every rank
    for (const ArenaSlot& slot : layout.slots()) {
      const int64_t first = static_cast<int64_t>(slot.offset / sizeof(float));
      for (int64_t i = 0; i < slot.shape.numel(); ++i)
        flat[static_cast<size_t>(first + i)] = static_cast<float>(c.rank() * 1000 + first + i);
    }
    Tensor whole(flat.data(), {total}, DType::f32);
    Tensor mine(flat.data() + layout.shard_offset(c.rank()) / sizeof(float), {shard}, DType::f32);
    c.reduce_scatter_sum(whole, mine);
    shards[static_cast<size_t>(c.rank())].assign(
        flat.begin() + (mine.data_as<float>() - flat.data()),
        flat.begin() + (mine.data_as<float>() - flat.data()) + shard);
    c.all_gather(mine, whole);
  }));
  const float rank_sum = static_cast<float>(1000 * world * (world - 1) / 2);
  std::vector<float> expected(static_cast<size_t>(total), 0.0f);
  for (const ArenaSlot& slot : layout.slots()) {
    const int64_t first = static_cast<int64_t>(slot.offset / sizeof(float));
    for (int64_t i = 0; i < slot.shape.numel(); ++i)
      expected[static_cast<size_t>(first + i)] = rank_sum + static_cast<float>(world * (first + i));
  }
  for (int r = 0; r < world; ++r) {
    const int64_t begin = static_cast<int64_t>(layout.shard_offset(r) / sizeof(float));
    ASSERT_EQ(begin, r * shard) << "ArenaLayout shard " << r << " is not the communicator's block " << r;
    for (int64_t i = 0; i < shard; ++i)
      ASSERT_EQ(shards[static_cast<size_t>(r)][static_cast<size_t>(i)],
                expected[static_cast<size_t>(begin + i)])
          << "rank " << r << " shard element " << i;
    for (int64_t j = 0; j < total; ++j)
      ASSERT_EQ(flats[static_cast<size_t>(r)][static_cast<size_t>(j)], expected[static_cast<size_t>(j)])
          << "rank " << r << " gathered element " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(World, ArenaShards, ::testing::Values(1, 2, 3, 4));

// bf16 sums accumulate in f32 in rank order and round once: compare with that computed here, and check
// that all ranks agree bit for bit.
TEST(InProcessCommunicator, Bf16AllReduceRoundsOnceAfterRankOrderSum) {
  const int world = 3;
  const int64_t n = 1001;
  auto comms = make_in_process_group(world);
  std::vector<std::vector<bf16>> data(world);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& x = data[static_cast<size_t>(c.rank())];
    x.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = float_to_bf16(awkward_value(c.rank(), i) * 100.0f);
    c.all_reduce_sum(Tensor(x.data(), {n}, DType::bf16));
  }));
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0.0f;
    for (int s = 0; s < world; ++s) sum += bf16_to_float(float_to_bf16(awkward_value(s, i) * 100.0f));
    const uint16_t expected = float_to_bf16(sum).bits;
    for (int r = 0; r < world; ++r)
      ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)].bits, expected)
          << "rank " << r << " element " << i;
  }
}

// Wrong or mismatched arguments: every rank throws (none is left waiting), naming the collective, the
// offending rank and the sizes; the group is still usable afterwards.
TEST(InProcessCommunicator, MismatchedArgumentsThrowOnEveryRank) {
  const int world = 3;
  auto comms = make_in_process_group(world, {.timeout = std::chrono::seconds(20)});
  struct Case {
    const char* name;
    std::function<void(Communicator&)> call;
    std::vector<std::string> fragments;
  };
  std::vector<Case> cases = {
      {"reduce_scatter output not input/world on rank 1",
       [](Communicator& c) {
         std::vector<float> in(21), out(c.rank() == 1 ? 6 : 7);
         c.reduce_scatter_sum(f32_view(in), f32_view(out));
       },
       {"reduce_scatter_sum", "rank 1", "21", "6", "world_size (3)"}},
      {"all_gather output too small on rank 2",
       [](Communicator& c) {
         std::vector<float> in(7), out(c.rank() == 2 ? 20 : 21);
         c.all_gather(f32_view(in), f32_view(out));
       },
       {"all_gather", "rank 2", "20", "21"}},
      {"all_reduce sizes differ across ranks",
       [](Communicator& c) {
         std::vector<float> x(c.rank() == 2 ? 8 : 7);
         c.all_reduce_sum(f32_view(x));
       },
       {"all_reduce_sum", "size mismatch", "rank 2", "8", "7"}},
      {"dtypes differ across ranks",
       [](Communicator& c) {
         std::vector<float> x(8);
         c.all_reduce_sum(c.rank() == 1 ? Tensor(x.data(), {16}, DType::bf16)
                                        : Tensor(x.data(), {16}, DType::f16));
       },
       {"all_reduce_sum", "rank 1", "bf16", "f16"}},
      {"different collectives",
       [](Communicator& c) {
         std::vector<float> x(7), out(21);
         if (c.rank() == 0)
           c.all_reduce_sum(f32_view(x));
         else
           c.all_gather(f32_view(x), f32_view(out));
       },
       {"collective mismatch", "all_reduce_sum", "all_gather"}},
      {"broadcast roots differ",
       [](Communicator& c) {
         std::vector<float> x(7);
         c.broadcast(f32_view(x), c.rank() == 2 ? 1 : 0);
       },
       {"broadcast", "root", "rank 2"}},
      {"broadcast root out of range",
       [](Communicator& c) {
         std::vector<float> x(7);
         c.broadcast(f32_view(x), 3);
       },
       {"broadcast", "root 3"}},
      {"integer sum",
       [](Communicator& c) {
         std::vector<int32_t> x(7);
         c.all_reduce_sum(Tensor(x.data(), {7}, DType::i32));
       },
       {"all_reduce_sum", "i32"}},
      {"cuda tensor in-process",
       [](Communicator& c) {
         std::vector<float> x(7);
         c.all_reduce_sum(Tensor(x.data(), {7}, DType::f32, DeviceKind::cuda));
       },
       {"all_reduce_sum", "wrong device"}},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name);
    const auto errors = run_ranks(comms, test_case.call);
    for (int r = 0; r < world; ++r) {
      const std::string& e = errors[static_cast<size_t>(r)];
      ASSERT_FALSE(e.empty()) << "rank " << r << " did not throw";
      for (const std::string& fragment : test_case.fragments)
        EXPECT_NE(e.find(fragment), std::string::npos)
            << "rank " << r << ": '" << fragment << "' not in: " << e;
    }
  }
  // Errors found by validation leave the group consistent: a correct collective still works.
  std::vector<std::vector<float>> data(world);
  expect_all_succeeded(run_ranks(comms, [&](Communicator& c) {
    auto& x = data[static_cast<size_t>(c.rank())];
    x.assign(7, static_cast<float>(c.rank() + 1));
    c.all_reduce_sum(f32_view(x));
  }));
  for (int r = 0; r < world; ++r) EXPECT_EQ(data[static_cast<size_t>(r)][6], 6.0f) << "rank " << r;
}

// Rank 1 fails before its collective; the guard aborts the group, so ranks 0, 2 and 3, already waiting in
// all_reduce, throw naming rank 1 instead of hanging. Later collectives fail at once.
TEST(InProcessCommunicator, ThrowingRankAbortsTheGroup) {
  const int world = 4;
  auto comms = make_in_process_group(world);
  const auto errors = run_ranks(
      comms,
      [&](Communicator& c) {
        AbortGroupOnException guard(c);
        std::vector<float> x(7, 1.0f);
        if (c.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the others start waiting
          throw Error("rank 1 ran out of data");
        }
        c.all_reduce_sum(f32_view(x));
      },
      std::chrono::seconds(10));
  EXPECT_EQ(errors[1], "rank 1 ran out of data");
  for (int r : {0, 2, 3}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("group aborted by rank 1"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("left its work by an exception"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
  EXPECT_THROW(comms[0]->barrier(), Error);
}

TEST(InProcessCommunicator, ExplicitAbortReasonReachesWaitingRanks) {
  auto comms = make_in_process_group(2);
  const auto errors = run_ranks(
      comms,
      [&](Communicator& c) {
        if (c.rank() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          c.abort("loss became NaN");
          return;
        }
        c.barrier();
      },
      std::chrono::seconds(10));
  EXPECT_EQ(errors[0], "");
  EXPECT_NE(errors[1].find("group aborted by rank 0: loss became NaN"), std::string::npos) << errors[1];
}

// A rank that silently never arrives: with a group timeout the waiting ranks abort, naming the missing rank.
TEST(InProcessCommunicator, TimeoutNamesTheMissingRank) {
  auto comms = make_in_process_group(3, {.timeout = std::chrono::milliseconds(200)});
  const auto errors = run_ranks(
      comms,
      [&](Communicator& c) {
        if (c.rank() == 2) return;  // skips the collective
        std::vector<float> x(7);
        c.all_reduce_sum(f32_view(x));
      },
      std::chrono::seconds(10));
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("timed out"), std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank(s) 2"), std::string::npos)
        << errors[static_cast<size_t>(r)];
  }
  EXPECT_EQ(errors[2], "");
}

TEST(InProcessCommunicator, GroupReportsRanksAndRejectsEmptyWorld) {
  auto comms = make_in_process_group(3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<size_t>(r)]->world_size(), 3);
    EXPECT_EQ(comms[static_cast<size_t>(r)]->backend_name(), "in-process");
  }
  EXPECT_THROW(make_in_process_group(0), Error);
}

}  // namespace
}  // namespace zt
