// What train_mrpc --calibrate timed on two H100s (xlarge, bf16, the automatic attention), for the cost
// model's tests against the steps measured beside them: 1 and 2 layers, forward + backward and forward alone,
// ms.
#pragma once

#include <vector>

#include "app/plan/cost_model.h"

namespace zt::test {

// docs/bench/2026-12-06-h100-plan/call2_calibrate.txt
inline std::vector<plan::LayerTiming> h100_plan_call2_timings() {
  return {
      {.layers = 1, .batch = 64, .length = 64, .pair_ms = 3.1049, .forward_ms = 1.05283},
      {.layers = 1, .batch = 256, .length = 64, .pair_ms = 9.63162, .forward_ms = 3.344},
      {.layers = 1, .batch = 32, .length = 128, .pair_ms = 3.27325, .forward_ms = 1.12346},
      {.layers = 1, .batch = 128, .length = 128, .pair_ms = 10.2019, .forward_ms = 3.62768},
      {.layers = 1, .batch = 8, .length = 512, .pair_ms = 4.71149, .forward_ms = 1.8295},
      {.layers = 1, .batch = 32, .length = 512, .pair_ms = 15.5926, .forward_ms = 6.36957},
      {.layers = 1, .batch = 4, .length = 1024, .pair_ms = 6.23011, .forward_ms = 2.43274},
      {.layers = 1, .batch = 16, .length = 1024, .pair_ms = 21.7735, .forward_ms = 8.72842},
      {.layers = 1, .batch = 2, .length = 2048, .pair_ms = 9.45894, .forward_ms = 1.73341},
      {.layers = 1, .batch = 8, .length = 2048, .pair_ms = 33.0482, .forward_ms = 5.92403},
      {.layers = 2, .batch = 64, .length = 64, .pair_ms = 4.8519, .forward_ms = 1.63293},
      {.layers = 2, .batch = 256, .length = 64, .pair_ms = 15.4708, .forward_ms = 5.3817},
      {.layers = 2, .batch = 32, .length = 128, .pair_ms = 5.24301, .forward_ms = 1.84634},
      {.layers = 2, .batch = 128, .length = 128, .pair_ms = 16.9299, .forward_ms = 6.09712},
      {.layers = 2, .batch = 8, .length = 512, .pair_ms = 8.15747, .forward_ms = 3.21136},
      {.layers = 2, .batch = 32, .length = 512, .pair_ms = 27.5695, .forward_ms = 11.436},
      {.layers = 2, .batch = 4, .length = 1024, .pair_ms = 11.1971, .forward_ms = 4.42285},
      {.layers = 2, .batch = 16, .length = 1024, .pair_ms = 39.755, .forward_ms = 16.2892},
      {.layers = 2, .batch = 2, .length = 2048, .pair_ms = 17.8684, .forward_ms = 3.05565},
      {.layers = 2, .batch = 8, .length = 2048, .pair_ms = 62.6443, .forward_ms = 10.7554},
  };
}

// docs/bench/2026-12-06-h100-goals (call A)
inline std::vector<plan::LayerTiming> h100_goals_call_a_timings() {
  return {
      {.layers = 1, .batch = 64, .length = 64, .pair_ms = 3.1416, .forward_ms = 1.06227},
      {.layers = 1, .batch = 256, .length = 64, .pair_ms = 9.76189, .forward_ms = 3.38355},
      {.layers = 1, .batch = 32, .length = 128, .pair_ms = 3.3232, .forward_ms = 1.15824},
      {.layers = 1, .batch = 128, .length = 128, .pair_ms = 10.3758, .forward_ms = 3.64403},
      {.layers = 1, .batch = 8, .length = 512, .pair_ms = 4.80397, .forward_ms = 1.84298},
      {.layers = 1, .batch = 32, .length = 512, .pair_ms = 15.7845, .forward_ms = 6.40659},
      {.layers = 1, .batch = 4, .length = 1024, .pair_ms = 6.45405, .forward_ms = 2.4911},
      {.layers = 1, .batch = 16, .length = 1024, .pair_ms = 22.0313, .forward_ms = 8.81123},
      {.layers = 1, .batch = 2, .length = 2048, .pair_ms = 9.62237, .forward_ms = 1.75139},
      {.layers = 1, .batch = 8, .length = 2048, .pair_ms = 33.5257, .forward_ms = 6.01069},
      {.layers = 2, .batch = 64, .length = 64, .pair_ms = 4.92736, .forward_ms = 1.6647},
      {.layers = 2, .batch = 256, .length = 64, .pair_ms = 15.6408, .forward_ms = 5.53443},
      {.layers = 2, .batch = 32, .length = 128, .pair_ms = 5.40547, .forward_ms = 1.87766},
      {.layers = 2, .batch = 128, .length = 128, .pair_ms = 17.164, .forward_ms = 6.14134},
      {.layers = 2, .batch = 8, .length = 512, .pair_ms = 8.29789, .forward_ms = 3.23552},
      {.layers = 2, .batch = 32, .length = 512, .pair_ms = 27.8225, .forward_ms = 11.5233},
      {.layers = 2, .batch = 4, .length = 1024, .pair_ms = 11.4574, .forward_ms = 4.4816},
      {.layers = 2, .batch = 16, .length = 1024, .pair_ms = 40.1272, .forward_ms = 16.3083},
      {.layers = 2, .batch = 2, .length = 2048, .pair_ms = 17.9357, .forward_ms = 3.10922},
      {.layers = 2, .batch = 8, .length = 2048, .pair_ms = 62.961, .forward_ms = 10.7439},
  };
}

}  // namespace zt::test
