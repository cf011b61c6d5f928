// The cost model (app/plan/cost_model.h) against docs/PERFORMANCE.md's measured xlarge steps (seq 128, bf16,
// one H200), its shape (checkpointing and accumulation cost time, offload's parts), and the machine-figures
// file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "app/plan/calibrate.h"
#include "app/plan/cost_model.h"
#include "model/config.h"
#include "model/parameters.h"
#include "runtime/check.h"
#include "runtime/device.h"

namespace zt::plan {
namespace {

class CostModelXlarge : public ::testing::Test {
 protected:
  DebertaConfig model = deberta_v2_xlarge_config();
  CostInputs inputs{.model = &model, .max_length = 128, .world_size = 1, .parameters = 0};
  MachineFigures figures;
  void SetUp() override { inputs.parameters = ParameterTable(model).total_numel(); }
  double predict(int stage, int64_t micro, int64_t accumulation,
                 OptimizerOffload offload = OptimizerOffload::none, bool checkpointing = false,
                 bool param = false) const {
    const Plan p{.stage = stage,
                 .optimizer_offload = offload,
                 .param_offload = param,
                 .gradient_checkpointing = checkpointing,
                 .micro_batch = micro,
                 .accumulation = accumulation};
    return predict_step(p, inputs, figures).total();
  }
};

// Measured (docs/PERFORMANCE.md): the prediction within 8 %.
TEST_F(CostModelXlarge, ReproducesTheMeasuredSteps) {
  struct Point {
    const char* what;
    double predicted, measured;
  };
  const Point points[] = {
      {"stage 0 bs 8", predict(0, 8, 1), 28.3},
      {"stage 0 bs 40", predict(0, 40, 1), 67.5},
      {"stage 0 bs 64", predict(0, 64, 1), 95.1},
      {"stage 0 bs 80", predict(0, 80, 1), 119.0},
      {"stage 0 bs 40 checkpointing", predict(0, 40, 1, OptimizerOffload::none, true), 89.3},
      {"stage 2 + optimizer offload bs 40", predict(2, 40, 1, OptimizerOffload::cpu), 274.0},
      {"stage 2 + optimizer offload bs 128", predict(2, 128, 1, OptimizerOffload::cpu), 359.0},
      {"stage 3 + both offloads bs 40", predict(3, 40, 1, OptimizerOffload::cpu, false, true), 342.1},
  };
  for (const Point& p : points)
    EXPECT_NEAR(p.predicted / p.measured, 1.0, 0.08) << p.what << ": predicted " << p.predicted << " ms";
}

TEST_F(CostModelXlarge, CheckpointingAccumulationAndStagesCostTime) {
  EXPECT_GT(predict(0, 64, 1, OptimizerOffload::none, true), predict(0, 64, 1));
  EXPECT_GT(predict(0, 64, 2), predict(0, 128, 1));  // the per-micro-batch floor twice
  EXPECT_GT(predict(0, 32, 4), predict(0, 64, 2));
  EXPECT_GT(predict(2, 64, 1), predict(0, 64, 1));  // the fold into the shard
  EXPECT_GT(predict(3, 64, 1), predict(2, 64, 1));  // the gathers
  EXPECT_GT(predict(2, 64, 1, OptimizerOffload::cpu), predict(2, 64, 1));
  EXPECT_GT(predict(3, 64, 1, OptimizerOffload::cpu, false, true), predict(3, 64, 1, OptimizerOffload::cpu));
  EXPECT_GT(predict(2, 64, 1, OptimizerOffload::nvme), 10 * predict(2, 64, 1, OptimizerOffload::cpu));
}

// Checkpointing only adds work: with the optimizer offloaded too (where the update hides under the next
// forward, whose recomputation is not part of that forward), on the xlarge and on a shallow model (where the
// offload's parts dominate).
TEST_F(CostModelXlarge, CheckpointingNeverMakesAStepFaster) {
  for (int64_t layers : {24, 2}) {
    model.num_hidden_layers = layers;
    inputs.parameters = ParameterTable(model).total_numel();
    for (int64_t micro : {1, 8, 40, 128})
      for (int stage : {0, 2, 3})
        for (OptimizerOffload offload : {OptimizerOffload::none, OptimizerOffload::cpu}) {
          if (stage == 0 && offload != OptimizerOffload::none) continue;
          for (bool param : {false, true}) {
            if (param && (stage != 3 || offload == OptimizerOffload::none)) continue;
            // Equal where the exposed download shrinks by the recompute (a download-bound step), to rounding.
            EXPECT_GE(predict(stage, micro, 1, offload, true, param),
                      predict(stage, micro, 1, offload, false, param) * (1 - 1e-12))
                << layers << " layers, stage " << stage << " offload " << optimizer_offload_name(offload)
                << (param ? " + parameters" : "") << ", micro " << micro;
          }
        }
  }
}

// A partial offload (the engine's ZeroOffload::ratio): the norm on the device, then the GPU AdamW on 1 - r of
// the shard beside the CPU AdamW on r (its upload hidden behind it): the longer of the two, not their sum,
// so the update shrinks with r while the CPU side is the longer, down to the GPU AdamW alone.
TEST_F(CostModelXlarge, PartialOffloadRunsBothUpdatesAtOnce) {
  Plan p{.stage = 2, .optimizer_offload = OptimizerOffload::cpu, .micro_batch = 64};
  const auto n = static_cast<double>(inputs.parameters);
  const double gpu_all = n / (figures.gpu_adamw_gparams * 1e9) * 1e3;
  const double cpu_all = n / (figures.cpu_adamw_gparams * 1e9) * 1e3;
  const double device_norm = 4 * n / (figures.hbm_gbps * 1e9) * 1e3;
  double previous = predict_step(p, inputs, figures).optimizer_ms;  // the full offload
  for (const double r : {0.75, 0.5, 0.25, 0.1}) {
    p.offload_ratio = r;
    const StepCost cost = predict_step(p, inputs, figures);
    EXPECT_LT(cost.optimizer_ms, previous) << r;
    EXPECT_NEAR(cost.optimizer_ms, device_norm + std::max((1 - r) * gpu_all, r * cpu_all), 1e-6) << r;
    EXPECT_EQ(cost.hidden_ms, 0) << "a partial offload updates inside the step";
    previous = cost.optimizer_ms;
  }
  p.offload_ratio = 0.0001;  // almost all on the GPU: the GPU AdamW after the norm
  EXPECT_NEAR(predict_step(p, inputs, figures).optimizer_ms, device_norm + gpu_all, 0.01 * gpu_all);
}

TEST_F(CostModelXlarge, FasterCpuAdamMakesOffloadCheaper) {
  const double slow = predict(2, 128, 1, OptimizerOffload::cpu);
  figures.cpu_adamw_gparams *= 4;
  EXPECT_LT(predict(2, 128, 1, OptimizerOffload::cpu), slow - 100);
}

TEST(MachineFigures, SaveLoadRoundTripAndBadFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "zt_machine_figures_test";
  std::filesystem::create_directories(dir);
  MachineFigures m;
  m.name = "test machine";
  m.gemm_tflops = 123.5;
  m.cpu_adamw_gparams = 7.25;
  m.save((dir / "m.json").string());
  const MachineFigures back = MachineFigures::load((dir / "m.json").string());
  EXPECT_EQ(back.name, "test machine");
  EXPECT_EQ(back.gemm_tflops, 123.5);
  EXPECT_EQ(back.cpu_adamw_gparams, 7.25);
  EXPECT_EQ(back.pcie_gbps, MachineFigures{}.pcie_gbps);

  auto write = [&](const char* name, const char* text) {
    std::ofstream((dir / name).string()) << text;
    return (dir / name).string();
  };
  // A partial file keeps the other defaults.
  const MachineFigures partial = MachineFigures::load(write("partial.json", R"({"pcie_gbps": 25})"));
  EXPECT_EQ(partial.pcie_gbps, 25);
  EXPECT_EQ(partial.gemm_tflops, MachineFigures{}.gemm_tflops);
  EXPECT_THROW(MachineFigures::load(write("unknown.json", R"({"pcie_gbs": 25})")), Error);
  EXPECT_THROW(MachineFigures::load(write("negative.json", R"({"hbm_gbps": -1})")), Error);
  EXPECT_THROW(MachineFigures::load(write("bad.json", "{")), Error);
  EXPECT_THROW(MachineFigures::load((dir / "missing.json").string()), Error);
  std::filesystem::remove_all(dir);
}

// The CPU AdamW comes from a measurement (the best of a few runs); the host norm pass is measured and
// reported but the model's host_gbps stays (the GPU engine takes the norm on the device); the GPU ones are
// kept.
TEST(Calibrate, MeasuresTheHostFiguresAndKeepsTheGpuOnes) {
  MachineFigures base;
  base.cpu_adamw_gparams = 1e6;  // impossible rates: a calibration that kept them fails
  base.host_gbps = 1e9;
  base.gemm_tflops = 321;
  const HostCalibration c = calibrate_host(base, int64_t{1} << 20, 2);
  const MachineFigures& m = c.figures;
  EXPECT_GT(m.cpu_adamw_gparams, 0.0);
  EXPECT_LT(m.cpu_adamw_gparams, 1000.0);
  EXPECT_GT(c.host_norm_gbps, 0.0);
  EXPECT_LT(c.host_norm_gbps, 10000.0);
  EXPECT_EQ(m.host_gbps, 1e9);
  EXPECT_EQ(m.gemm_tflops, 321);
  EXPECT_NE(m.name.find("--calibrate"), std::string::npos);
  EXPECT_THROW(calibrate_host(base, 0, 1), Error);
}

// The GPU's figures replace the model's rates; PCIe is the slower pinned direction (the offload uses both),
// the pageable rates are reported only; the rest (the host's, the step's shape) stays.
TEST(Calibrate, GpuFiguresReplaceTheDeviceRates) {
  MachineFigures base;
  base.cpu_adamw_gparams = 3.5;
  GpuFigures g{.device = "1 x test GPU",
               .gemm_tflops = 512,
               .hbm_gbps = 2800,
               .h2d_pinned_gbps = 40,
               .d2h_pinned_gbps = 30,
               .h2d_pageable_gbps = 10,
               .d2h_pageable_gbps = 8,
               .gpu_adamw_gparams = 70};
  const MachineFigures m = with_gpu_figures(base, g);
  EXPECT_EQ(m.gemm_tflops, 512);
  EXPECT_EQ(m.hbm_gbps, 2800);
  EXPECT_EQ(m.pcie_gbps, 30);
  EXPECT_EQ(m.gpu_adamw_gparams, 70);
  EXPECT_EQ(m.cpu_adamw_gparams, 3.5);
  EXPECT_EQ(m.layer_latency_us, base.layer_latency_us);
  EXPECT_NE(m.name.find("1 x test GPU"), std::string::npos);
  EXPECT_EQ(with_gpu_figures(m, g).name, m.name);  // calibrating twice names the GPU once
  g.d2h_pinned_gbps = 0;                           // a failed measurement is refused, not cached
  EXPECT_THROW(with_gpu_figures(base, g), Error);
}

// Without a GPU the measurement refuses rather than inventing figures.
TEST(Calibrate, GpuMeasurementNeedsAGpu) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_THROW(measure_gpu_figures(1536, 6144), Error);
}

}  // namespace
}  // namespace zt::plan
