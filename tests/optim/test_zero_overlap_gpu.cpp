// overlap_comm on the GPU (ZeroEngineOptions::overlap_comm, optim/zero/engine.h): two in-process ranks on the
// one GPU (each a thread with its own RankDevice: stream and allocator; collectives through
// make_in_process_device_group, whose rank-order sums are deterministic) drive the engine through its hooks
// in the model's order with synthetic gradients (tests/optim/zero_offload_harness.h), two micro-batches per
// step, four layers (so that layer l reuses the bucket of layer l + 2). With the reductions on each rank's
// communication stream the engine queues the same collectives and the same kernels on the same values, so the
// final master and the parameters the forward saw (stage 3: gathered on the comm stream) must equal the
// in-order run's bit for bit. A missing wait lets the comm stream reduce a bucket before its gradients are
// written, or backward write one before its reduction read and zeroed it: the values then differ.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/device_allocator.h"
#include "runtime/rank_device.h"
#include "tests/optim/zero_offload_harness.h"
#include "tests/support/gpu.h"

namespace zt::optim {
namespace {

using Pass = DebertaUnitHooks::Pass;

struct TwoRankRun {
  std::vector<float> master;       // rank 0's gathered fp32 master after the steps
  std::vector<std::byte> forward;  // rank 0's view of some parameters during each step's forward
};

// The bytes of a device tensor, appended to `out` (the forward reads them on the compute stream).
void append_bytes(const Tensor& t, std::vector<std::byte>& out) {
  std::vector<std::byte> host(t.nbytes());
  copy_tensor(t, Tensor(host.data(), t.shape(), t.dtype()));
  out.insert(out.end(), host.begin(), host.end());
}

TwoRankRun train_two_ranks(int stage, DType compute, bool overlap, ZeroOffload offload = {}) {
  constexpr int kWorld = 2, kSteps = 4, kMicroBatches = 2;
  DebertaConfig config = testing::offload_tiny_config();
  config.num_hidden_layers = 4;
  const ParameterTable table(config);
  // The ranks' devices outlive the communicators, whose scratch came from their allocators.
  std::vector<std::unique_ptr<RankDevice>> devices;
  for (int r = 0; r < kWorld; ++r)
    devices.push_back(std::make_unique<RankDevice>(0, DeviceAllocator::kNoLimit));
  auto comms = make_in_process_device_group(kWorld, 0, {.timeout = std::chrono::seconds(60)});
  TwoRankRun result;
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        AbortGroupOnException abort_on_error(*comms[static_cast<size_t>(r)]);
        RankDevice::Enter on_rank(*devices[static_cast<size_t>(r)]);
        ZeroEngineOptions options =
            testing::harness_engine_options(stage, DeviceKind::cuda, compute, offload);
        options.ranks_sharing_host = kWorld;
        options.overlap_comm = overlap;
        ZeroEngine engine(table, config, *comms[static_cast<size_t>(r)], options);
        Arena init("initial parameters", table.layout(DType::f32), {.zero_fill = true});
        const Tensor flat = init.flat(DType::f32);
        for (int64_t i = 0; i < flat.numel(); ++i)
          flat.data_as<float>()[i] = 0.05f * static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
        engine.load_full_parameters(init);
        LossScaler scaler = LossScaler::disabled();
        const size_t shared = shared_unit(config);
        const DebertaTensors& p = engine.parameter_handles();
        std::vector<std::byte> forward;
        for (int step = 0; step < kSteps; ++step) {
          // Forward: the hooks' order; the compute stream reads what acquire put in the handles.
          engine.acquire(kEmbeddingsUnit, Pass::forward);
          append_bytes(p.embeddings.ln_weight, forward);
          engine.release(kEmbeddingsUnit, Pass::forward);
          engine.acquire(shared, Pass::forward);
          for (int l = 0; l < config.num_hidden_layers; ++l) {
            engine.acquire(layer_unit(l), Pass::forward);
            append_bytes(p.layers[static_cast<size_t>(l)].query_bias, forward);
            engine.release(layer_unit(l), Pass::forward);
          }
          engine.release(shared, Pass::forward);
          for (int micro = 0; micro < kMicroBatches; ++micro) {
            // Backward: every unit's gradients written between its acquire and gradients_ready, each rank
            // and micro-batch its own values.
            engine.begin_backward(micro == 0, micro + 1 == kMicroBatches);
            const DebertaTensors& g = engine.gradient_handles();
            const double seed = 100.0 * step + 40.0 * micro + 1000.0 * r;
            engine.acquire(shared, Pass::backward);
            for (int l = config.num_hidden_layers - 1; l >= 0; --l) {
              engine.acquire(layer_unit(l), Pass::backward);
              testing::write_layer(g.layers[static_cast<size_t>(l)], seed + 20.0 * l, 0.3);
              engine.release(layer_unit(l), Pass::backward);
              engine.gradients_ready(layer_unit(l));
            }
            engine.acquire(kEmbeddingsUnit, Pass::backward);
            for (const Tensor* t :
                 {&g.embeddings.word_embeddings, &g.embeddings.ln_weight, &g.embeddings.ln_bias})
              testing::write_gradient(*t, seed + 7.0, 0.2);
            engine.release(kEmbeddingsUnit, Pass::backward);
            engine.gradients_ready(kEmbeddingsUnit);
            const DebertaSharedTensors& s = g.shared;
            for (const Tensor* t :
                 {&s.rel_embeddings, &s.encoder_ln_weight, &s.encoder_ln_bias, &s.conv_weight, &s.conv_bias,
                  &s.conv_ln_weight, &s.conv_ln_bias, &s.pooler_weight, &s.pooler_bias, &s.classifier_weight,
                  &s.classifier_bias})
              testing::write_gradient(*t, seed + 3.0, 0.1);
            engine.release(shared, Pass::backward);
            engine.gradients_ready(shared);
          }
          const ZeroStepResult step_result = engine.step(1e-2, scaler);
          ZT_CHECK(step_result.applied, "step ", step, " was skipped");
        }
        Arena out("final master", table.layout(DType::f32), {.zero_fill = true});
        engine.gather_full_master(r == 0 ? &out : nullptr);
        if (r == 0) {
          const Tensor master = out.flat(DType::f32);
          result.master.assign(master.data_as<float>(), master.data_as<float>() + master.numel());
          result.forward = std::move(forward);
        }
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return result;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ZeroOverlapGpu, ReductionsOnTheCommStreamEqualInOrderOnesBitForBit) {
  ZT_SKIP_WITHOUT_GPU();
  for (const DType compute : {DType::f32, DType::bf16}) {
    for (int stage = 0; stage <= 3; ++stage) {
      const std::string what = std::string(dtype_name(compute)) + " stage " + std::to_string(stage);
      const TwoRankRun in_order = train_two_ranks(stage, compute, false);
      ASSERT_FALSE(in_order.master.empty()) << what;
      const TwoRankRun overlapped = train_two_ranks(stage, compute, true);
      EXPECT_TRUE(same_bits(overlapped.master, in_order.master)) << what;
      EXPECT_EQ(overlapped.forward, in_order.forward) << what;
    }
  }
}

TEST(ZeroOverlapGpu, OffloadDownloadsFollowTheCommStream) {
  ZT_SKIP_WITHOUT_GPU();
  for (int stage = 1; stage <= 3; ++stage) {
    const ZeroOffload offload{.optimizer = true, .param = stage == 3};
    const TwoRankRun in_order = train_two_ranks(stage, DType::bf16, false, offload);
    ASSERT_FALSE(in_order.master.empty()) << "stage " << stage;
    const TwoRankRun overlapped = train_two_ranks(stage, DType::bf16, true, offload);
    EXPECT_TRUE(same_bits(overlapped.master, in_order.master)) << "stage " << stage;
    EXPECT_EQ(overlapped.forward, in_order.forward) << "stage " << stage;
  }
}

}  // namespace
}  // namespace zt::optim
