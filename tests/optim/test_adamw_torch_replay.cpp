// Replays tests/fixtures/adamw_torch.h5 (tools/golden/make_adamw_fixture.py): torch.optim.AdamW with an HF
// linear warmup schedule and clip_grad_norm_(1.0), ten steps on three tensors, one without weight decay.
// Our schedule, clipping and AdamW must reproduce torch's learning rates, pre-clip norms and every
// intermediate parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "runtime/check.h"
#include "tests/support/fixtures.h"
#include "tests/support/tolerance.h"

namespace zt::optim {
namespace {

// Our single-tensor arithmetic mirrors torch's operation by operation; what remains is torch's own FMA in
// its vectorised lerp and the norm accumulated in double here vs float in torch: a few ulps.
constexpr test::Tolerance kTightF32{1e-6, 1e-6};

TEST(AdamWTorchReplay, MatchesTorchStepByStep) {
  test::Fixture f("adamw_torch.h5");
  const auto steps = static_cast<int64_t>(f.attr_f64("steps"));
  const std::vector<int64_t> decays = f.read_i64("replay/weight_decay");
  const size_t num_tensors = decays.size();
  ASSERT_EQ(num_tensors, 3u);

  // Lay the tensors out in one flat buffer with gaps between them, as an arena with alignment padding
  // would: the gaps hold zero gradients (so they cannot change the norm) and must come out untouched.
  constexpr int64_t kGap = 5;
  std::vector<TensorRange> ranges;
  std::vector<std::vector<float>> init, grads, expected_params;
  int64_t size = kGap;
  for (size_t k = 0; k < num_tensors; ++k) {
    const std::string name = zt::str("p", k);
    init.push_back(f.read_f32("replay/init/" + name));
    grads.push_back(f.read_f32("replay/grads/" + name));
    expected_params.push_back(f.read_f32("replay/params/" + name));
    const auto numel = static_cast<int64_t>(init.back().size());
    ranges.push_back({size, numel, decays[k] != 0});
    size += numel + kGap;
  }
  constexpr float kGapValue = 42.0f;
  std::vector<float> params(static_cast<size_t>(size), kGapValue), grad(static_cast<size_t>(size), 0.0f);
  std::vector<float> exp_avg(static_cast<size_t>(size), 0.0f), exp_avg_sq(static_cast<size_t>(size), 0.0f);
  for (size_t k = 0; k < num_tensors; ++k) {
    std::copy(init[k].begin(), init[k].end(), params.begin() + ranges[k].offset);
  }

  const AdamWHyper hyper{.lr = f.attr_f64("lr"),
                         .beta1 = f.attr_f64("beta1"),
                         .beta2 = f.attr_f64("beta2"),
                         .eps = f.attr_f64("eps"),
                         .weight_decay = f.attr_f64("weight_decay")};
  const LrSchedule schedule{.kind = parse_schedule_kind("linear"),
                            .base_lr = hyper.lr,
                            .num_warmup_steps = static_cast<int64_t>(f.attr_f64("warmup_steps")),
                            .num_training_steps = static_cast<int64_t>(f.attr_f64("training_steps"))};
  const double max_norm = f.attr_f64("max_norm");
  const std::vector<float> torch_lr = f.read_f32("replay/lr");
  const std::vector<float> torch_norm = f.read_f32("replay/pre_clip_norm");

  AdamW adamw(hyper, 2);
  for (int64_t s = 0; s < steps; ++s) {
    SCOPED_TRACE(zt::str("step ", s));
    for (size_t k = 0; k < num_tensors; ++k) {
      const auto n = static_cast<size_t>(ranges[k].numel);
      std::copy_n(grads[k].begin() + static_cast<std::ptrdiff_t>(s * ranges[k].numel), n,
                  grad.begin() + ranges[k].offset);
    }
    const double lr = schedule.lr_at(s);
    EXPECT_NEAR(lr, torch_lr[static_cast<size_t>(s)], 1e-9);
    const double norm = clip_grad_norm(grad, max_norm, 2);
    EXPECT_NEAR(norm, torch_norm[static_cast<size_t>(s)], 1e-6 * torch_norm[static_cast<size_t>(s)]);

    adamw.step({params, grad, exp_avg, exp_avg_sq}, ranges, lr);

    for (size_t k = 0; k < num_tensors; ++k) {
      const auto n = static_cast<size_t>(ranges[k].numel);
      const std::span<const float> got(params.data() + ranges[k].offset, n);
      const std::span<const float> ref(expected_params[k].data() + s * ranges[k].numel, n);
      EXPECT_TRUE(test::all_close(zt::str("params p", k), got, ref, kTightF32));
    }
  }
  for (size_t k = 0; k < num_tensors; ++k) {
    const std::string name = zt::str("p", k);
    const auto n = static_cast<size_t>(ranges[k].numel);
    const std::vector<float> m_ref = f.read_f32("replay/exp_avg/" + name);
    const std::vector<float> v_ref = f.read_f32("replay/exp_avg_sq/" + name);
    EXPECT_TRUE(test::all_close("exp_avg " + name, std::span(exp_avg.data() + ranges[k].offset, n), m_ref,
                                {1e-12, 1e-5}));
    EXPECT_TRUE(test::all_close("exp_avg_sq " + name, std::span(exp_avg_sq.data() + ranges[k].offset, n),
                                v_ref, {1e-20, 1e-5}));
  }
  for (int64_t i = 0; i < size; ++i) {
    const bool in_gap = std::none_of(ranges.begin(), ranges.end(), [&](const TensorRange& r) {
      return i >= r.offset && i < r.offset + r.numel;
    });
    if (in_gap) {
      EXPECT_EQ(params[static_cast<size_t>(i)], kGapValue) << "gap element " << i;
    }
  }
}

}  // namespace
}  // namespace zt::optim
