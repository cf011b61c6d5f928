// ZeroEngine::load_parameter: loading the model one tensor at a time (what the trainer does, so the host
// never stages the whole model) leaves every rank with exactly the state load_full_parameters gives, for
// every stage, with and without CPU offload; a tensor of the wrong size is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "optim/zero/engine.h"
#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "tests/optim/zero_offload_harness.h"
#include "tests/support/rank_threads.h"

// Options are filled with designated initializers; the members left out keep their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace zt::optim {
namespace {

constexpr int kWorld = 2;

// Distinct values in every tensor (zero padding between tensors), so a piece written to the wrong place
// shows in the gathered master.
Arena initial_parameters(const ParameterTable& table) {
  Arena init("initial parameters", table.layout(DType::f32), {.zero_fill = true});
  for (size_t k = 0; k < table.size(); ++k) {
    const Tensor t = init.tensor(table.entries()[k].name);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<float>()[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(k) + 0.13 * i));
  }
  return init;
}

// How loaded_master loads the engines.
enum class Loading {
  full_arena,           // load_full_parameters
  per_tensor,           // load_parameter last to first, each from its own buffer, then finish_loading
  per_tensor_but_first  // the same, leaving out table entry 0
};

// The full master gathered after a world-2 engine of `options` is loaded from initial_parameters.
std::vector<float> loaded_master(const ZeroEngineOptions& options, Loading loading) {
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  const Arena init = initial_parameters(table);
  Arena out("gathered master", table.layout(DType::f32), {.zero_fill = true});
  test::Comms comms = make_in_process_group(kWorld);
  test::expect_all_succeeded(test::run_ranks(comms, [&](Communicator& comm) {
    ZeroEngine engine(table, config, comm, options);
    if (loading == Loading::full_arena) {
      engine.load_full_parameters(init);
    } else {
      const size_t first = loading == Loading::per_tensor_but_first ? 1 : 0;
      for (size_t k = table.size(); k-- > first;) {
        const Tensor whole = init.tensor(table.entries()[k].name);
        const std::vector<float> values(whole.data_as<float>(), whole.data_as<float>() + whole.numel());
        engine.load_parameter(k, values);
      }
      engine.finish_loading();
    }
    engine.gather_full_master(comm.rank() == 0 ? &out : nullptr);
  }));
  const Tensor flat = out.flat(DType::f32);
  return {flat.data_as<float>(), flat.data_as<float>() + flat.numel()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ZeroLoadParameters, TensorByTensorEqualsTheFullArenaForEveryStageAndOffload) {
  const ParameterTable table(testing::offload_tiny_config());
  const Arena init = initial_parameters(table);
  const Tensor init_flat = init.flat(DType::f32);
  const std::vector<float> expected(init_flat.data_as<float>(),
                                    init_flat.data_as<float>() + init_flat.numel());
  for (int stage = 0; stage <= 3; ++stage) {
    std::vector<ZeroOffload> offloads = {{}};
    if (stage >= 1) offloads.push_back({.optimizer = true});
    if (stage == 3) offloads.push_back({.optimizer = true, .param = true});
    for (const ZeroOffload& offload : offloads) {
      const ZeroEngineOptions options{.stage = stage, .device = DeviceKind::cpu, .offload = offload};
      const std::vector<float> full = loaded_master(options, Loading::full_arena);
      const std::vector<float> per_tensor = loaded_master(options, Loading::per_tensor);
      const std::string what = "stage " + std::to_string(stage) +
                               (offload.optimizer ? " offload_optimizer" : "") +
                               (offload.param ? " offload_param" : "");
      EXPECT_TRUE(bitwise_equal(per_tensor, full)) << what;
      // Both are the values loaded (the comparison above is not two engines left at zero).
      EXPECT_TRUE(bitwise_equal(full, expected)) << what;
    }
  }
}

// A tensor not loaded keeps its zeros: the comparison above can fail.
TEST(ZeroLoadParameters, ATensorLeftOutStaysZero) {
  const ParameterTable table(testing::offload_tiny_config());
  const ZeroEngineOptions options{.stage = 3, .device = DeviceKind::cpu};
  const std::vector<float> full = loaded_master(options, Loading::full_arena);
  const std::vector<float> partial = loaded_master(options, Loading::per_tensor_but_first);
  const ArenaLayout layout = table.layout(DType::f32);
  const ArenaSlot& first = layout.slots()[0];
  ASSERT_EQ(first.name, table.entries()[0].name);
  for (size_t i = 0; i < full.size(); ++i) {
    const bool in_first = i >= first.offset / sizeof(float) && i < first.end() / sizeof(float);
    ASSERT_EQ(partial[i], in_first ? 0.0f : full[i]) << i;
  }
  EXPECT_FALSE(bitwise_equal(partial, full));
}

TEST(ZeroLoadParameters, WrongSizeOrTensorIsAnError) {
  const DebertaConfig config = testing::offload_tiny_config();
  const ParameterTable table(config);
  auto comms = make_in_process_group(1);
  ZeroEngine engine(table, config, *comms[0], {.stage = 0, .device = DeviceKind::cpu});
  const std::vector<float> values(static_cast<size_t>(table.entries()[0].numel()) + 1, 0.0f);
  try {
    engine.load_parameter(0, values);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(table.entries()[0].name), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.load_parameter(table.size(), values), Error);
}

}  // namespace
}  // namespace zt::optim
