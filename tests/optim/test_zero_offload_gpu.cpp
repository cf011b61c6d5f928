// ZeRO CPU offload on the GPU (world 1, synthetic gradients through the engine's hooks): the offloaded step
// (synchronous copies, pipelined copies on two copy streams, pinned or pageable host buffers, and stage 3
// with the parameter shard offloaded too, and sub-groups of 1000 elements) equals the GPU step without
// offload bit for bit — the norm and factor are computed on the device in both, and the CPU AdamW's
// arithmetic is the GPU kernel's.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/elementwise.h"
#include "runtime/device.h"
#include "tests/optim/zero_offload_harness.h"
#include "tests/support/gpu.h"

namespace zt::optim {
namespace {

TEST(ZeroOffloadGpu, OffloadedStepsEqualDeviceStepsBitForBit) {
  ZT_SKIP_WITHOUT_GPU();
  for (const DType compute : {DType::bf16, DType::f16, DType::f32}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<float> device =
          testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, {}, 5);
      ASSERT_FALSE(device.empty());
      for (const bool pipelined : {false, true}) {
        for (const bool pin : {false, true}) {
          EXPECT_EQ(device, testing::train_with_synthetic_gradients(
                                DeviceKind::cuda, compute, stage, {.optimizer = true, .pipelined = pipelined},
                                5, pin))
              << dtype_name(compute) << " stage " << stage << " pipelined " << pipelined << " pinned " << pin;
        }
      }
      if (stage == 3) {
        EXPECT_EQ(device, testing::train_with_synthetic_gradients(
                              DeviceKind::cuda, compute, 3, {.optimizer = true, .param = true}, 5, true))
            << dtype_name(compute) << " stage 3 with offload_param";
        // Parameters on disk: the CPU update writes the 16-bit values into the records (pinned buffers).
        const auto dir = std::filesystem::temp_directory_path() /
                         ("zt_test_offload_gpu_param_disk_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
        ZeroParamDiskTier disk;
        disk.directory = dir.string();
        disk.buffer_count = 2;
        EXPECT_EQ(device,
                  testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, 3,
                                                          {.optimizer = true, .param = true}, 5, true, disk))
            << dtype_name(compute) << " stage 3 with offload_param nvme";
        std::filesystem::remove_all(dir);
      }
      // Streamed gradients (stages 2/3): each unit's slice goes down from its bucket (the copy stream waits
      // for the bucket's writes; the bucket is zeroed only after the copy landed), the norm from the
      // per-unit partials taken on the way: the same bits, pipelined or not.
      for (const bool pipelined : {false, true}) {
        if (stage < 2) break;
        ZeroOffload streamed{.optimizer = true, .param = stage == 3, .pipelined = pipelined};
        streamed.stream_gradients = true;
        EXPECT_EQ(device, testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, streamed,
                                                                  5, true))
            << dtype_name(compute) << " stage " << stage << " streamed gradients, pipelined " << pipelined;
      }
      // overlap_update: the CPU update on a host thread, each unit's upload queued when the next pass
      // first touches the unit, the compute stream waiting for it there.
      for (const bool streamed : {false, true}) {
        if (streamed && stage < 2) continue;
        ZeroOffload overlapped{.optimizer = true, .param = stage == 3};
        overlapped.stream_gradients = streamed;
        overlapped.overlap_update = true;
        EXPECT_EQ(device, testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage,
                                                                  overlapped, 5, true))
            << dtype_name(compute) << " stage " << stage << " overlap_update, streamed " << streamed;
      }
      // sub_group_size: the CPU update sub-group by sub-group writes the 16-bit staging in slices (the
      // CPU backend trains in f32 only, so only here are the bf16/f16 slices checked).
      ZeroOffload sub_grouped{.optimizer = true, .param = stage == 3};
      sub_grouped.sub_group_size = 1000;
      EXPECT_EQ(device, testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, sub_grouped,
                                                                5, true))
          << dtype_name(compute) << " stage " << stage << " sub_group_size 1000";
    }
  }
}

// A partial offload on the GPU: the device part's AdamW kernels queued on the rank's stream first, then the
// host part's CPU AdamW (its gradients downloaded during backward, its values uploaded on the copy streams,
// which wait for the rank's stream) — the device step's bits at ratios 0.1-0.9, every dtype and stages 1-3,
// pinned or not, pipelined or not, with sub-groups; and the state read out at one ratio resumes at another,
// without offload and with the full one, on the same bits.
TEST(ZeroOffloadGpu, PartialOffloadEqualsDeviceStepsBitForBit) {
  ZT_SKIP_WITHOUT_GPU();
  for (const DType compute : {DType::bf16, DType::f16, DType::f32}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<float> device =
          testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, {}, 5);
      ASSERT_FALSE(device.empty());
      for (const double ratio : {0.1, 0.5, 0.9}) {
        for (const bool pipelined : {false, true}) {
          ZeroOffload partial{.optimizer = true, .pipelined = pipelined};
          partial.ratio = ratio;
          EXPECT_EQ(device, testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, partial,
                                                                    5, true))
              << dtype_name(compute) << " stage " << stage << " ratio " << ratio << " pipelined "
              << pipelined;
        }
      }
      ZeroOffload sub_grouped{.optimizer = true, .sub_group_size = 1000};
      sub_grouped.ratio = 0.5;
      EXPECT_EQ(device, testing::train_with_synthetic_gradients(DeviceKind::cuda, compute, stage, sub_grouped,
                                                                5, false))
          << dtype_name(compute) << " stage " << stage << " ratio 0.5, sub_group_size 1000, pageable";
    }
  }
  for (const DType compute : {DType::bf16, DType::f32}) {
    for (int stage = 1; stage <= 3; ++stage) {
      const std::vector<float> straight =
          testing::train_ranks_with_synthetic_gradients(1, stage, {}, 4, {}, 0, DeviceKind::cuda, compute);
      ZeroOffload quarter{.optimizer = true}, three_quarters{.optimizer = true};
      quarter.ratio = 0.25;
      three_quarters.ratio = 0.75;
      for (const auto& [from, to] :
           {std::pair{quarter, three_quarters}, std::pair{quarter, ZeroOffload{}},
            std::pair{ZeroOffload{}, quarter}, std::pair{three_quarters, ZeroOffload{.optimizer = true}}}) {
        EXPECT_EQ(straight, testing::train_ranks_with_synthetic_gradients(1, stage, from, 4, to, 2,
                                                                          DeviceKind::cuda, compute))
            << dtype_name(compute) << " stage " << stage << " resumed from ratio "
            << (from.optimizer ? from.ratio : 0) << " at " << (to.optimizer ? to.ratio : 0);
      }
    }
  }
}

// bf16 on the GPU with the optimizer offloaded to pinned memory, copies pipelined.
ZeroEngineOptions pinned_bf16_offload(int stage) {
  ZeroEngineOptions options;
  options.stage = stage;
  options.device = DeviceKind::cuda;
  options.compute = DType::bf16;
  options.offload = {.optimizer = true, .pipelined = true};
  options.pin_memory = true;
  return options;
}

// The pipelined upload of the parameters goes on its own copy stream: it must wait for the work queued on the
// rank's stream that writes the same bytes (at construction the compute copy's zero fill; here a fill queued
// behind ~40 ms of other work), or that work lands after the upload and the forward reads it instead of the
// loaded values.
TEST(ZeroOffloadGpu, UploadsWaitForTheRanksStream) {
  ZT_SKIP_WITHOUT_GPU();
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngineOptions options = pinned_bf16_offload(1);
  ZeroEngine engine(table, config, *comms[0], options);
  const Arena init = testing::synthetic_initial_parameters(table);
  engine.load_full_parameters(init);
  const Tensor ln_weight = engine.parameter_handles().embeddings.ln_weight;
  std::vector<bf16> loaded(static_cast<size_t>(ln_weight.numel()));
  copy_tensor(ln_weight, Tensor(loaded.data(), ln_weight.shape(), DType::bf16));
  // The rank's stream busy (a 1 GiB fill, 64 times: ~25 ms on an H100), then the parameters overwritten
  // there; the reload's upload (host work of a few ms) must come after that.
  Arena busy("busy", ArenaLayout({{"busy", {int64_t{1} << 28}, DType::f32}}),
             {.kind = MemoryKind::device, .category = MemoryCategory::scratch});
  for (int i = 0; i < 64; ++i) kernels::fill(busy.flat(DType::f32), static_cast<float>(i));
  kernels::fill(ln_weight, 7.0f);
  engine.load_full_parameters(init);
  std::vector<bf16> reloaded(loaded.size());
  copy_tensor(ln_weight, Tensor(reloaded.data(), ln_weight.shape(), DType::bf16));
  ASSERT_EQ(reloaded.size(), loaded.size());
  for (size_t i = 0; i < loaded.size(); ++i)
    EXPECT_EQ(reloaded[i].bits, loaded[i].bits) << "element " << i << " of embeddings.ln_weight";
}

// The delayed update landed during the backward (DelayedLanding::in_backward): unit u's upload, queued at its
// gradients_ready, waits for the work queued on the rank's stream before it (the backward's last read of
// u's parameters). Here that read is a copy queued behind ~25 ms of other work: it must still see the
// parameters before the update, and the model the updated ones once the step is done.
TEST(ZeroOffloadGpu, DelayedLandingInBackwardWaitsForTheBackwardsReads) {
  ZT_SKIP_WITHOUT_GPU();
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngineOptions options = pinned_bf16_offload(2);
  options.max_grad_norm = 0;
  options.offload.delayed_update = true;
  options.offload.delayed_landing = DelayedLanding::in_backward;
  ZeroEngine engine(table, config, *comms[0], options);
  engine.load_full_parameters(testing::synthetic_initial_parameters(table));
  LossScaler scaler = LossScaler::disabled();
  testing::synthetic_step(engine, config, 0, 1.0, scaler);      // update 0 starts on a host thread
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // and ends (a few thousand parameters)
  const Tensor weight = engine.parameter_handles().shared.classifier_weight;
  auto to_host = [&](const Tensor& t) {
    std::vector<bf16> out(static_cast<size_t>(t.numel()));
    copy_tensor(t, Tensor(out.data(), t.shape(), DType::bf16));
    return out;
  };
  const std::vector<bf16> before = to_host(weight);
  // Step 1's backward by hand: every unit's gradients ready, the shared unit's after a read of its
  // parameters queued behind a busy stream.
  engine.begin_backward(true, true);
  const size_t shared = shared_unit(config);
  for (size_t u = 0; u < shared; ++u) engine.gradients_ready(u);
  Arena busy("busy", ArenaLayout({{"busy", {int64_t{1} << 28}, DType::f32}}),
             {.kind = MemoryKind::device, .category = MemoryCategory::scratch});
  for (int i = 0; i < 64; ++i) kernels::fill(busy.flat(DType::f32), static_cast<float>(i));
  Arena seen("seen", ArenaLayout({{"seen", weight.shape(), DType::bf16}}),
             {.kind = MemoryKind::device, .category = MemoryCategory::scratch});
  kernels::copy(weight, seen.tensor("seen"));
  engine.gradients_ready(shared);  // update 0 of the shared unit is done: its upload is queued here
  const std::vector<bf16> read = to_host(seen.tensor("seen"));
  ASSERT_EQ(read.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i)
    ASSERT_EQ(read[i].bits, before[i].bits)
        << "element " << i << " of the classifier weight read in backward";
  // The copy stream done: update 0 of the shared unit landed during the backward, before step().
  device_synchronize();
  const std::vector<bf16> landed = to_host(weight);
  EXPECT_NE(0, std::memcmp(landed.data(), before.data(), before.size() * sizeof(bf16)))
      << "update 0 of the shared unit landed at its gradients_ready";
  engine.step(1e-2, scaler);
  const std::vector<bf16> after = to_host(weight);
  EXPECT_EQ(0, std::memcmp(after.data(), landed.data(), before.size() * sizeof(bf16)))
      << "step() put nothing else there";
}

}  // namespace
}  // namespace zt::optim
