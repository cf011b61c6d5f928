// Ranks sharing one GPU (runtime/stream.h's current-stream rule): host threads, each with its own stream
// (StreamScope) and allocator (AllocatorScope), run the tensor-level ops at the same time.
//   1. Two threads run linear, LayerNorm and disentangled attention, forward and backward in bf16, on
//      different data, concurrently and repeatedly; every output equals, bit for bit, the same ops run one
//      after the other on a single stream. Work left on the legacy stream would not be ordered with the
//      rank's stream, and a GEMM workspace shared by the two streams would be overwritten mid-GEMM: both
//      change results.
//   2. Each stream has its own GEMM workspace, taken from the thread's allocator and given back when the
//      stream is destroyed.
//   3. The same ops under a StreamScope on a stream being captured into a CUDA graph: the capture fails if
//      anything reaches the legacy stream or synchronizes (tests/support/stream_capture.h), and replaying
//      the graph reproduces the eager outputs bitwise.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <barrier>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/disentangled_attention.h"
#include "kernels/elementwise.h"
#include "kernels/layernorm.h"
#include "kernels/linear.h"
#include "runtime/device.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"
#include "tests/kernels/gemm_gpu_test_util.h"
#include "tests/support/finite_difference.h"
#include "tests/support/gpu.h"
#include "tests/support/stream_capture.h"

namespace zt::kernels {
namespace {

using test::DeviceTensor;
using test::to_device;

constexpr DType kT = DType::bf16;
constexpr size_t kMiB = size_t{1} << 20;

// Sizes: large enough that each op runs for a while and the two ranks' kernels overlap on the GPU.
constexpr int64_t kRows = 512, kIn = 384, kOut = 768;                     // linear x [R, in] -> [R, out]
constexpr int64_t kBatch = 4, kLength = 128, kHeads = 8, kHeadSize = 32;  // attention
constexpr int64_t kHidden = kHeads * kHeadSize;

DisentangledAttentionConfig attention_config() {
  DisentangledAttentionConfig config;
  config.num_heads = kHeads;
  config.positions = RelativePositionConfig::from_model_config(256, -1, 512);  // deberta-v2-xlarge's
  config.dropout_p = 0.1f;
  config.seed = 0x5eedu;
  config.site_id = 3;
  return config;
}

// Every input and output of one rank's ops, on the device (the thread's current allocator).
struct RankTensors {
  std::map<std::string, DeviceTensor> inputs, outputs;
  const Tensor& in(const std::string& name) const { return inputs.at(name).tensor; }
  const Tensor& out(const std::string& name) const { return outputs.at(name).tensor; }
};

// Inputs drawn from `seed` (each rank its own), outputs filled with 9 so an output the ops skip shows.
RankTensors make_rank_tensors(uint64_t seed) {
  const int64_t table_rows = 2 * attention_config().positions.att_span();
  const std::map<std::string, Shape> inputs{{"x", {kRows, kIn}},
                                            {"w", {kOut, kIn}},
                                            {"b", {kOut}},
                                            {"dy", {kRows, kOut}},
                                            {"gamma", {kOut}},
                                            {"beta", {kOut}},
                                            {"dln", {kRows, kOut}},
                                            {"q", {kBatch, kLength, kHidden}},
                                            {"k", {kBatch, kLength, kHidden}},
                                            {"v", {kBatch, kLength, kHidden}},
                                            {"pk", {table_rows, kHidden}},
                                            {"pq", {table_rows, kHidden}},
                                            {"dctx", {kBatch, kLength, kHidden}}};
  const std::map<std::string, std::pair<Shape, DType>> outputs{
      {"y", {{kRows, kOut}, kT}},
      {"dx", {{kRows, kIn}, kT}},
      {"dw", {{kOut, kIn}, DType::f32}},
      {"db", {{kOut}, DType::f32}},
      {"ln", {{kRows, kOut}, kT}},
      {"mean", {{kRows}, DType::f32}},
      {"rstd", {{kRows}, DType::f32}},
      {"dln_x", {{kRows, kOut}, kT}},
      {"dgamma", {{kOut}, DType::f32}},
      {"dbeta", {{kOut}, DType::f32}},
      {"ctx", {{kBatch, kLength, kHidden}, kT}},
      {"probs", {{kBatch, kHeads, kLength, kLength}, kT}},
      {"dq", {{kBatch, kLength, kHidden}, kT}},
      {"dk", {{kBatch, kLength, kHidden}, kT}},
      {"dv", {{kBatch, kLength, kHidden}, kT}},
      {"dpk", {{table_rows, kHidden}, DType::f32}},
      {"dpq", {{table_rows, kHidden}, DType::f32}}};
  RankTensors t;
  uint64_t stream_of_values = seed * 1000;
  for (const auto& [name, shape] : inputs) {
    const float lo = name == "gamma" ? 0.5f : -1.0f, hi = name == "gamma" ? 1.5f : 1.0f;
    t.inputs.emplace(name,
                     to_device(test::random_uniform(shape.numel(), ++stream_of_values, lo, hi), shape, kT));
  }
  std::vector<int64_t> mask(static_cast<size_t>(kBatch * kLength), 1);
  for (int64_t j = kLength - 5 - static_cast<int64_t>(seed % 7); j < kLength; ++j)
    mask[static_cast<size_t>(j)] = 0;
  t.inputs.emplace("mask", test::to_device_i64(mask, Shape{kBatch, kLength}));
  for (const auto& [name, spec] : outputs) {
    t.outputs.emplace(name, to_device(std::vector<float>(spec.first.numel(), 9.0f), spec.first, spec.second));
  }
  return t;
}

// The ops under test, on the calling thread's current stream. Accumulated gradients are zeroed first, so
// running this any number of times leaves the same outputs.
void run_ops(const RankTensors& t) {
  for (const char* accumulated : {"dw", "db", "dgamma", "dbeta", "dpk", "dpq"})
    fill(t.out(accumulated), 0.0f);
  linear_forward(t.in("x"), t.in("w"), t.in("b"), t.out("y"));
  linear_backward(t.in("dy"), t.in("x"), t.in("w"), t.out("dx"), t.out("dw"), t.out("db"));
  layernorm_forward(t.out("y"), t.in("gamma"), t.in("beta"), 1e-7f, t.out("ln"), t.out("mean"),
                    t.out("rstd"));
  layernorm_backward(t.in("dln"), t.out("y"), t.in("gamma"), t.out("mean"), t.out("rstd"), t.out("dln_x"),
                     t.out("dgamma"), t.out("dbeta"));
  const DisentangledAttentionConfig config = attention_config();
  disentangled_attention_forward(t.in("q"), t.in("k"), t.in("v"), t.in("pk"), t.in("pq"), t.in("mask"),
                                 config, t.out("ctx"), t.out("probs"));
  disentangled_attention_backward(t.in("q"), t.in("k"), t.in("v"), t.in("pk"), t.in("pq"), t.in("mask"),
                                  t.out("probs"), t.in("dctx"), config, t.out("dq"), t.out("dk"), t.out("dv"),
                                  t.out("dpk"), t.out("dpq"));
}

using Bytes = std::map<std::string, std::vector<uint8_t>>;

// Every output's bytes, read on the current stream.
Bytes output_bytes(const RankTensors& t) {
  Bytes out;
  for (const auto& [name, device] : t.outputs) {
    std::vector<uint8_t>& bytes = out[name];
    bytes.resize(device.tensor.nbytes());
    copy_tensor(device.tensor, Tensor(bytes.data(), device.tensor.shape(), device.tensor.dtype()));
  }
  return out;
}

Bytes run_rank(uint64_t seed, int repeats) {
  const RankTensors t = make_rank_tensors(seed);
  for (int r = 0; r < repeats; ++r) run_ops(t);
  return output_bytes(t);
}

void expect_same_bytes(const Bytes& got, const Bytes& want, const std::string& who) {
  ASSERT_EQ(got.size(), want.size()) << who;
  for (const auto& [name, bytes] : want) {
    const std::vector<uint8_t>& other = got.at(name);
    size_t differing = 0, first = bytes.size();
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] != other[i]) {
        ++differing;
        first = std::min(first, i);
      }
    }
    EXPECT_EQ(differing, 0u) << who << ": " << name << " differs in " << differing << " of " << bytes.size()
                             << " bytes, first at byte " << first;
  }
}

TEST(RanksOnOneGpu, ConcurrentRanksMatchSerialRunsBitwise) {
  ZT_SKIP_WITHOUT_GPU();
  const uint64_t seeds[2] = {1, 2};
  Bytes serial[2];
  {
    DeviceAllocator allocator(make_cuda_memory_backend(0));
    AllocatorScope use_allocator(allocator);
    Stream stream;
    StreamScope on_stream(stream);
    for (int rank = 0; rank < 2; ++rank) serial[rank] = run_rank(seeds[rank], 1);
  }
  // The two ranks' data differ, so equal results cannot come from one rank reading the other's buffers.
  EXPECT_NE(serial[0].at("ctx"), serial[1].at("ctx"));

  constexpr int kRepeats = 12;
  Bytes concurrent[2];
  DeviceMemoryStats with_stream[2], after_stream[2];
  std::exception_ptr failure[2];
  std::barrier start(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      start.arrive_and_wait();  // setup (allocator, stream, uploads) overlaps too
      try {
        DeviceAllocator allocator(make_cuda_memory_backend(0));
        AllocatorScope use_allocator(allocator);
        {
          Stream stream;
          StreamScope on_stream(stream);
          concurrent[rank] = run_rank(seeds[rank], kRepeats);
          with_stream[rank] = allocator.stats();
        }
        after_stream[rank] = allocator.stats();
      } catch (...) {
        failure[rank] = std::current_exception();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string who = "rank " + std::to_string(rank);
    if (failure[rank]) {
      try {
        std::rethrow_exception(failure[rank]);
      } catch (const std::exception& e) {
        FAIL() << who << " threw: " << e.what();
      }
    }
    expect_same_bytes(concurrent[rank], serial[rank], who);
    // Everything the rank allocated went through its own allocator: its peak holds the rank's tensors, and
    // once the tensors are gone only the stream's GEMM workspace is left, which the stream takes back.
    const auto scratch = static_cast<size_t>(MemoryCategory::scratch);
    EXPECT_GT(with_stream[rank].peak_in_use_total, 32 * kMiB) << who;
    EXPECT_GE(with_stream[rank].in_use[scratch], 32 * kMiB) << who;
    EXPECT_EQ(with_stream[rank].in_use_total, with_stream[rank].in_use[scratch]) << who;
    EXPECT_EQ(after_stream[rank].in_use_total, 0u) << who;
  }
}

TEST(RanksOnOneGpu, GemmWorkspaceIsPerStreamFromTheThreadsAllocator) {
  ZT_SKIP_WITHOUT_GPU();
  const int64_t before = gemm_stream_workspace_count();
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  AllocatorScope use_allocator(allocator);
  const auto scratch = static_cast<size_t>(MemoryCategory::scratch);
  {
    const DeviceTensor x = to_device(test::random_uniform(64 * 32, 1), {64, 32}, kT);
    const DeviceTensor w = to_device(test::random_uniform(48 * 32, 2), {48, 32}, kT);
    const DeviceTensor y = to_device(std::vector<float>(64 * 48, 0.0f), {64, 48}, kT);
    Stream a, b;
    {
      StreamScope on_a(a);
      linear_forward(x.tensor, w.tensor, Tensor(), y.tensor);
    }
    EXPECT_EQ(gemm_stream_workspace_count(), before + 1);
    {
      StreamScope on_b(b);
      linear_forward(x.tensor, w.tensor, Tensor(), y.tensor);
    }
    EXPECT_EQ(gemm_stream_workspace_count(), before + 2);
    EXPECT_GE(allocator.stats().in_use[scratch], 64 * kMiB);  // two 32 MiB workspaces, both in this allocator
    {
      StreamScope on_a(a);
      linear_forward(x.tensor, w.tensor, Tensor(), y.tensor);  // a's workspace again
    }
    EXPECT_EQ(gemm_stream_workspace_count(), before + 2);
    a.synchronize();
    b.synchronize();
  }  // a and b destroyed: their workspaces return to `allocator`
  EXPECT_EQ(gemm_stream_workspace_count(), before);
  EXPECT_EQ(allocator.stats().in_use[scratch], 0u);
}

TEST(RanksOnOneGpu, OpsUnderAScopeCaptureIntoAGraphOnItsStream) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceAllocator allocator(make_cuda_memory_backend(0));
  AllocatorScope use_allocator(allocator);
  test::BlockingStream stream;
  StreamScope on_stream(stream);
  const RankTensors t = make_rank_tensors(3);
  // Eager run first: plans, index tables, the stream's workspace and every scratch size get created here,
  // outside the capture (which forbids cudaMalloc and synchronization).
  run_ops(t);
  const Bytes eager = output_bytes(t);
  for (const auto& [name, device] : t.outputs) fill(device.tensor, 9.0f);

  test::CapturedGraph graph(stream, [&] { run_ops(t); });
  ASSERT_TRUE(graph.ok()) << "something left the scope's stream: " << graph.error();
  EXPECT_GE(graph.node_count(),
            12u);  // six fills, three linear GEMMs, the LayerNorm and attention kernels...
  EXPECT_TRUE(output_bytes(t) != eager) << "capturing must not run the work: the outputs still hold 9s";
  graph.replay(stream);
  expect_same_bytes(output_bytes(t), eager, "graph replay");
}

// A two-level batch whose items are not equally spaced (attention's head layout) runs through pointer arrays:
// eager calls cache them per stream, a captured call may neither use that cache nor allocate, so it writes
// them into memory the eager call reserved. One eager call must be enough for the capture, and the replay
// must write the eager product bit for bit.
TEST(RanksOnOneGpu, TwoLevelBatchedGemmCapturesAfterOneEagerCall) {
  ZT_SKIP_WITHOUT_GPU();
  DeviceAllocator allocator(make_cuda_memory_backend(0));  // empty cache: a block missing under capture fails
  AllocatorScope use_allocator(allocator);
  test::BlockingStream stream;
  StreamScope on_stream(stream);
  const int64_t outer = 3, batch = 5, m = 19, n = 13, k = 24;
  const int64_t a_size = outer * m * batch * k, b_size = outer * n * batch * k,
                c_size = outer * m * batch * n;
  const DeviceTensor a = to_device(test::random_uniform(a_size, 11), {a_size}, kT);
  const DeviceTensor b = to_device(test::random_uniform(b_size, 12), {b_size}, kT);
  const DeviceTensor c =
      to_device(std::vector<float>(static_cast<size_t>(c_size), 0.0f), {c_size}, DType::f32);
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.batch = batch;
  p.outer = outer;
  p.input_dtype = kT;
  p.transpose_b = true;
  p.a = {a.tensor.data(), batch * k, k, m * batch * k};
  p.b = {b.tensor.data(), batch * k, k, n * batch * k};
  p.c = {c.tensor.data(), DType::f32, batch * n, n, m * batch * n};
  gemm(p, stream);
  const std::vector<float> eager = test::to_host(c.tensor);
  fill(c.tensor, 9.0f);

  test::CapturedGraph graph(stream, [&] { gemm(p, stream); });
  ASSERT_TRUE(graph.ok()) << "the captured GEMM: " << graph.error();
  EXPECT_NE(test::to_host(c.tensor), eager) << "capturing must not run the GEMM";
  graph.replay(stream);
  EXPECT_EQ(test::to_host(c.tensor), eager) << "graph replay";
}

}  // namespace
}  // namespace zt::kernels

#else
TEST(RanksOnOneGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
