// The split master on the GPU (optim/split_master.h, optim/cuda/adamw.cuh): the AdamW over (hi, lo, up) must
// store bit for bit what the f32-master AdamW stores — the joined master equal to its f32 master, hi equal to
// its bf16 copy, m, v and the zeroed gradients equal — over 5 steps with grad scaling and zeroing, on ranges
// of awkward sizes at multiples of 8 (some past one launch's 96), with masters planted on exact ties (low
// half 0x8000, high half odd and even: the case the rounding bit exists for), on aligned buffers (16-byte
// accesses) and misaligned ones (element by element). Writes and joins at any offset keep the neighbours'
// bits; ranges off 8-element boundaries are refused. Through the ZeRO engine (stage 0, bf16, synthetic
// gradients with clipping): the final master (gathered, and read piece by piece as checkpoints do), the
// compute copy and m, v are those of the f32-master engine.
#include <gtest/gtest.h>

#include "tests/support/gpu.h"

#ifdef ZT_WITH_CUDA

#include <cstdint>
#include <cstring>
#include <vector>

#include "optim/adamw.h"
#include "optim/cuda/adamw.cuh"
#include "optim/split_master.h"
#include "tests/kernels/test_gpu_support.h"
#include "tests/optim/zero_offload_harness.h"

namespace zt::optim {
namespace {

using test::DeviceArray;
using test::random_floats;

// Ranges of awkward sizes starting at multiples of 8 (gaps of 5..12 untouched elements between them).
std::vector<TensorRange> ranges_at_multiples_of_8(int64_t& total) {
  std::vector<TensorRange> ranges;
  int64_t offset = 0;
  const int64_t sizes[] = {1, 7, 1000, 4097, 33, 128, 8193, 2, 20000};
  for (int i = 0; i < 130; ++i) {
    const int64_t n = i % 10 == 9 ? 0 : sizes[i % 9] + (i / 9);
    ranges.push_back({offset, n, i % 3 != 0});
    offset = (offset + n + 5 + 7) / 8 * 8;
  }
  total = offset;
  return ranges;
}

// Masters with every 7th element on an exact tie: low half 0x8000, the high half alternately odd and even.
std::vector<float> masters_with_ties(int64_t n) {
  std::vector<float> values = random_floats(n, 71, -0.5f, 0.5f);
  for (int64_t i = 0; i < n; i += 7) {
    const uint32_t top = (float_bits(values[static_cast<size_t>(i)]) >> 16) ^ ((i / 7) & 1);
    values[static_cast<size_t>(i)] = float_from_bits((top << 16) | 0x8000u);
  }
  return values;
}

struct SplitBuffers {
  DeviceArray hi, lo, up;
  SplitBuffers(int64_t n, int64_t offset)
      : hi(DType::bf16, Shape{n}, offset),
        lo(DType::bf16, Shape{n}, offset),
        up(DType::i32, Shape{(n + 31) / 32}) {
    up.upload_raw(std::vector<uint32_t>(static_cast<size_t>((n + 31) / 32), 0));
  }
  gpu::SplitMaster master() const { return {hi.tensor(), lo.tensor(), up.tensor()}; }
  std::vector<uint32_t> joined_bits(int64_t n) const {
    DeviceArray out(DType::f32, Shape{n});
    gpu::join_split_master(master(), 0, out.tensor(), nullptr);
    std::vector<uint32_t> bits(static_cast<size_t>(n));
    const std::vector<float> values = out.download();
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_bits(values[i]);
    return bits;
  }
};

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = float_bits(values[i]);
  return bits;
}

class SplitMasterGpu : public ::testing::TestWithParam<int64_t> {};  // element offset of the buffers

TEST_P(SplitMasterGpu, AdamWStoresWhatTheF32MasterAdamWStores) {
  ZT_SKIP_WITHOUT_GPU();
  const int64_t offset = GetParam();
  int64_t size = 0;
  const std::vector<TensorRange> ranges = ranges_at_multiples_of_8(size);
  const AdamWHyper hyper{1e-3, 0.9, 0.999, 1e-8, 0.01};
  const std::vector<float> initial = masters_with_ties(size);
  // The f32-master run.
  DeviceArray p(DType::f32, Shape{size}, offset), copy(DType::bf16, Shape{size}, offset);
  DeviceArray g(DType::f32, Shape{size}, offset), m(DType::f32, Shape{size}, offset),
      v(DType::f32, Shape{size}, offset);
  // The split run.
  SplitBuffers split(size, offset);
  DeviceArray g2(DType::f32, Shape{size}, offset), m2(DType::f32, Shape{size}, offset),
      v2(DType::f32, Shape{size}, offset);
  p.upload(initial);
  copy.upload(initial);
  DeviceArray staged(DType::f32, Shape{size});
  staged.upload(initial);
  gpu::write_split_master(staged.tensor(), split.master(), 0, nullptr);
  const std::vector<float> zeros(static_cast<size_t>(size), 0.0f);
  for (DeviceArray* a : {&m, &v, &m2, &v2}) a->upload(zeros);
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> grads = random_floats(size, 300 + static_cast<uint32_t>(step), -0.1f, 0.1f);
    g.upload(grads);
    g2.upload(grads);
    const AdamWStepScalars scalars = adamw_step_scalars(hyper, 1e-3 * step, step);
    const float scale = step % 2 ? 0.37f : 1.0f;
    const bool zero = step != 3;
    gpu::adamw_update(scalars, p.tensor(), g.tensor(), m.tensor(), v.tensor(), ranges, copy.tensor(), nullptr,
                      scale, zero);
    gpu::adamw_update_split_master(scalars, split.master(), g2.tensor(), m2.tensor(), v2.tensor(), ranges,
                                   nullptr, scale, zero);
  }
  EXPECT_EQ(split.joined_bits(size), bits_of(p.download())) << "the joined master";
  EXPECT_EQ(split.hi.download_raw<uint16_t>(), copy.download_raw<uint16_t>()) << "the bf16 copy";
  EXPECT_EQ(bits_of(m2.download()), bits_of(m.download()));
  EXPECT_EQ(bits_of(v2.download()), bits_of(v.download()));
  EXPECT_EQ(bits_of(g2.download()), bits_of(g.download()));
}

INSTANTIATE_TEST_SUITE_P(Buffers, SplitMasterGpu, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param ? "misaligned" : "aligned"; });

TEST(SplitMasterGpuCopies, WritesAndJoinsAtAnyOffsetKeepTheNeighbours) {
  ZT_SKIP_WITHOUT_GPU();
  constexpr int64_t n = 1000;
  const std::vector<float> first = masters_with_ties(n);
  std::vector<float> second = random_floats(n, 81, -0.5f, 0.5f);
  for (int64_t i = 0; i < n; i += 3) second[static_cast<size_t>(i)] = float_from_bits(0x3F7F8000u);  // a tie
  SplitBuffers split(n, 0);
  DeviceArray staged(DType::f32, Shape{n});
  staged.upload(first);
  gpu::write_split_master(staged.tensor(), split.master(), 0, nullptr);
  std::vector<float> want = first;
  for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{3, 17}, {64, 64}, {993, 7}, {500, 1}}) {
    DeviceArray part(DType::f32, Shape{count});
    part.upload(std::vector<float>(second.begin() + begin, second.begin() + begin + count));
    gpu::write_split_master(part.tensor(), split.master(), begin, nullptr);
    std::copy(second.begin() + begin, second.begin() + begin + count, want.begin() + begin);
    DeviceArray joined(DType::f32, Shape{count});
    gpu::join_split_master(split.master(), begin, joined.tensor(), nullptr);
    EXPECT_EQ(bits_of(joined.download()), bits_of(part.download())) << "join at " << begin;
  }
  EXPECT_EQ(split.joined_bits(n), bits_of(want));
  std::vector<uint16_t> hi_want(static_cast<size_t>(n));
  for (size_t i = 0; i < hi_want.size(); ++i) hi_want[i] = bf16_bits_nearest_even(want[i]);
  EXPECT_EQ(split.hi.download_raw<uint16_t>(), hi_want);
}

TEST(SplitMasterGpuChecks, RefusesRangesOffEightElementBoundaries) {
  ZT_SKIP_WITHOUT_GPU();
  SplitBuffers split(64, 0);
  DeviceArray g(DType::f32, Shape{64}), m(DType::f32, Shape{64}), v(DType::f32, Shape{64});
  const std::vector<TensorRange> off = {{4, 10, true}};
  EXPECT_THROW(gpu::adamw_update_split_master(adamw_step_scalars({}, 1e-3, 1), split.master(), g.tensor(),
                                              m.tensor(), v.tensor(), off, nullptr),
               Error);
}

struct EngineRun {
  std::vector<uint32_t> master, moments;
  std::vector<std::byte> compute_copy;
};

EngineRun train_stage0_bf16(bool split_master) {
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngineOptions options;
  options.device = DeviceKind::cuda;
  options.compute = DType::bf16;
  options.max_grad_norm = 0.5;
  options.split_master = split_master;
  ZeroEngine engine(table, config, *comms[0], options);
  EXPECT_EQ(engine.state_bytes().master < static_cast<size_t>(table.total_numel()) * 4, split_master);
  engine.load_full_parameters(testing::synthetic_initial_parameters(table));
  LossScaler scaler = LossScaler::disabled();
  for (int step = 0; step < 6; ++step)
    EXPECT_TRUE(testing::synthetic_step(engine, config, step, 1.0, scaler).applied);
  EngineRun run;
  Arena out("final master", table.layout(DType::f32), {.zero_fill = true});
  engine.gather_full_master(&out);
  const Tensor flat = out.flat(DType::f32);
  run.master = bits_of({flat.data_as<float>(), flat.data_as<float>() + flat.numel()});
  for (const ZeroEngine::OwnedPiece& piece : engine.owned_pieces()) {
    for (const int kind : {0, 1, 2}) {  // 0: the master piece by piece, as checkpoints read it
      std::vector<float> values(static_cast<size_t>(piece.numel));
      engine.read_state(kind, piece, values);
      const std::vector<uint32_t> bits = bits_of(values);
      run.moments.insert(run.moments.end(), bits.begin(), bits.end());
    }
  }
  const DebertaTensors& p = engine.parameter_handles();
  for (const Tensor* t :
       {&p.embeddings.word_embeddings, &p.layers[0].query_weight, &p.layers[1].value_bias}) {
    std::vector<std::byte> host(t->nbytes());
    copy_tensor(*t, Tensor(host.data(), t->shape(), t->dtype()));
    run.compute_copy.insert(run.compute_copy.end(), host.begin(), host.end());
  }
  return run;
}

TEST(SplitMasterGpuEngine, StageZeroBf16TrainsBitForBitLikeTheF32Master) {
  ZT_SKIP_WITHOUT_GPU();
  const EngineRun split = train_stage0_bf16(true), f32 = train_stage0_bf16(false);
  EXPECT_EQ(split.master, f32.master);
  EXPECT_EQ(split.moments, f32.moments);
  EXPECT_EQ(split.compute_copy, f32.compute_copy);
}
}  // namespace
}  // namespace zt::optim

#else

TEST(SplitMasterGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}

#endif
