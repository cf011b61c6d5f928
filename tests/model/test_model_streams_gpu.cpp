// The whole DeBERTa model under a StreamScope and an AllocatorScope, as one rank of several on a GPU runs it.
//   - On the scope's stream the step computes what it computes on the legacy stream, bit for bit, and the
//     loss read back at the end of forward (copy_tensor on the scope's stream) is the same number.
//   - Backward, and forward without labels, captured into CUDA graphs on the scope's (blocking) stream: a
//     capture breaks on any launch, copy or memset left on the legacy stream and on any synchronization
//     (tests/support/stream_capture.h), so a clean capture shows that every op of the model follows the
//     current stream; replaying the graphs reproduces the eager gradients and logits bitwise.
// Forward with labels is not captured: it ends by reading the loss to the host, a synchronization.
#include <gtest/gtest.h>

#ifdef ZT_WITH_CUDA

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/elementwise.h"
#include "runtime/device_allocator.h"
#include "runtime/stream.h"
#include "tests/model/golden_case.h"
#include "tests/support/gpu.h"
#include "tests/support/stream_capture.h"

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

std::vector<float> all_gradients(const golden::GoldenCase& c) {
  return golden::host_values(c.grads.flat(DType::f32));
}

TEST(DebertaStreamsGpu, StepFollowsTheCurrentStreamAndCapturesIntoGraphs) {
  ZT_SKIP_WITHOUT_GPU();
  float legacy_loss = 0;
  std::vector<float> legacy_logits, legacy_grads;
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
  const std::vector<float> eager_grads = all_gradients(c);
  EXPECT_EQ(differing_bits(eager_grads, legacy_grads), 0u);

  // Backward of the same forward again, captured; gradients accumulate, so they start from zero as above.
  kernels::fill(c.grads.flat(DType::f32), 0.0f);
  test::CapturedGraph backward(stream, [&] { c.model.backward(c.params, c.grads); });
  ASSERT_TRUE(backward.ok()) << "backward left the scope's stream: " << backward.error();
  EXPECT_GT(backward.node_count(), 50u);  // two layers' worth of kernels and GEMMs
  EXPECT_NE(differing_bits(all_gradients(c), eager_grads), 0u) << "the capture must not have run backward";
  backward.replay(stream);
  EXPECT_EQ(differing_bits(all_gradients(c), eager_grads), 0u);

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
