// The whole DeBERTa model under a StreamScope and an AllocatorScope, as one rank of several on a GPU runs it.
//   - On the scope's stream the step computes what it computes on the legacy stream, bit for bit, and the
//     loss read back at the end of forward (copy_tensor on the scope's stream) is the same number.
//   - Backward, and forward without labels, captured into CUDA graphs on the scope's (blocking) stream: a
//     capture breaks on any launch, copy or memset left on the legacy stream and on any synchronization
//     (tests/support/stream_capture.h), so a clean capture shows that every op of the model follows the
//     current stream; replaying the graphs reproduces the eager gradients and logits bitwise.
// Forward with labels is not captured: it ends by reading the loss to the host, a synchronization. The word
// embeddings' gradient is the one exception to "bitwise": its scatter-add uses float atomics, so rows of
// ids that occur more than once may differ in the last bits (kernels/cuda/embedding.cuh); it is compared
// with the f32 tolerance instead.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"
#include "tests/model/golden_case.h"
#include "tests/support/gpu.h"
#include "tests/support/stream_capture.h"
#include "tests/support/tolerance.h"

namespace zt {
namespace {

constexpr const char* kFixture = "deberta_tiny.h5";
constexpr DropoutSchedule kSchedule{.training = true, .seed = 1234, .step = 3};

// Elements whose bits differ between two f32 vectors of one size (NaN payloads included).
size_t differing_bits(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  size_t differing = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    differing += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  }
  return differing;
}

constexpr const char* kAtomicGradient = "deberta.embeddings.word_embeddings.weight";

using Gradients = std::map<std::string, std::vector<float>>;

Gradients all_gradients(const golden::GoldenCase& c) {
  Gradients out;
  for (const ParameterInfo& p : c.table.entries()) out[p.name] = golden::host_values(c.grads.tensor(p.name));
  return out;
}

// Gradients that differ from `want`: in any bit, or beyond the f32 tolerance for the atomic one. Returns the
// names, for the failure message.
std::string differing_gradients(const Gradients& got, const Gradients& want) {
  std::string names;
  for (const auto& [name, values] : want) {
    const bool same =
        name == kAtomicGradient
            ? test::compare(got.at(name), values, test::tolerance_for(DType::f32)).mismatches == 0
            : differing_bits(got.at(name), values) == 0;
    if (!same) names += " " + name;
  }
  return names;
}

TEST(DebertaStreamsGpu, StepFollowsTheCurrentStreamAndCapturesIntoGraphs) {
  ZT_SKIP_WITHOUT_GPU();
  float legacy_loss = 0;
  std::vector<float> legacy_logits;
  Gradients legacy_grads;
  {
    golden::GoldenCase reference(kFixture, DeviceKind::cuda, DType::bf16);
    legacy_loss = reference.model.forward(reference.params, reference.inputs(), kSchedule);
    reference.model.backward(reference.params, reference.grads);
    legacy_logits = golden::host_values(reference.model.logits());
    legacy_grads = all_gradients(reference);
  }

  DeviceAllocator allocator(make_cuda_memory_backend(0));
  AllocatorScope use_allocator(allocator);
  test::BlockingStream stream;
  StreamScope on_stream(stream);
  golden::GoldenCase c(kFixture, DeviceKind::cuda, DType::bf16);  // arenas in `allocator`, copies on `stream`
  EXPECT_GT(allocator.stats().in_use[static_cast<size_t>(MemoryCategory::other)], 0u);

  const float loss = c.model.forward(c.params, c.inputs(), kSchedule);
  EXPECT_EQ(std::memcmp(&loss, &legacy_loss, sizeof loss), 0) << loss << " vs " << legacy_loss;
  c.model.backward(c.params, c.grads);
  const Gradients eager_grads = all_gradients(c);
  EXPECT_EQ(differing_gradients(eager_grads, legacy_grads), "");

  // Backward of the same forward again, captured; gradients accumulate, so they start from zero as above.
  kernels::fill(c.grads.flat(DType::f32), 0.0f);
  test::CapturedGraph backward(stream, [&] { c.model.backward(c.params, c.grads); });
  ASSERT_TRUE(backward.ok()) << "backward left the scope's stream: " << backward.error();
  EXPECT_GT(backward.node_count(), 50u);  // two layers' worth of kernels and GEMMs
  EXPECT_NE(differing_gradients(all_gradients(c), eager_grads), "") << "the capture must not run backward";
  backward.replay(stream);
  EXPECT_EQ(differing_gradients(all_gradients(c), eager_grads), "");

  // Forward without labels (nothing read back), run eagerly once so every scratch size is cached.
  const DebertaBatch unlabeled{c.inputs().input_ids, c.inputs().attention_mask, Tensor()};
  EXPECT_EQ(c.model.forward(c.params, unlabeled, kSchedule), 0.0f);
  const std::vector<float> eager_logits = golden::host_values(c.model.logits());
  EXPECT_EQ(differing_bits(eager_logits, legacy_logits), 0u);
  kernels::fill(c.model.logits(), 9.0f);
  test::CapturedGraph forward(stream, [&] { c.model.forward(c.params, unlabeled, kSchedule); });
  ASSERT_TRUE(forward.ok()) << "forward left the scope's stream: " << forward.error();
  EXPECT_GT(forward.node_count(), 50u);
  forward.replay(stream);
  EXPECT_EQ(differing_bits(golden::host_values(c.model.logits()), eager_logits), 0u);
}

}  // namespace
}  // namespace zt

#else
TEST(DebertaStreamsGpu, NeedsCuda) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
