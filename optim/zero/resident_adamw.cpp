#include "optim/zero/resident_adamw.h"

#include <algorithm>

#include "optim/grad_clip.h"
#include "optim/zero/buffer_views.h"
#include "runtime/check.h"

#ifdef ZT_WITH_CUDA
#include "optim/cuda/adamw.cuh"
#endif

namespace zt::optim {

using namespace zero_views;  // NOLINT: the engine's buffer views

namespace {

// What both strategies read: the blocks, their state and gradients, the AdamW's hyperparameters and step.
struct ResidentParts {
  const ZeroPlan& plan;
  const std::vector<OwnedBlock>& blocks;
  const DeviceState& state;
  GradientReducer& reducer;
  AdamW& adamw;
  ZeroStreams& streams;
  const UnitOrder& order;
};

class HostAdamW final : public ResidentAdamW {
 public:
  explicit HostAdamW(ResidentParts parts) : p_(parts) {}

  bool update(double lr, double coef, double, bool clear_gradients) override {
    if (coef < 1.0)
      for (const OwnedBlock& b : p_.blocks)
        scale_in_place(host_span(p_.reducer.block_gradients(b)), static_cast<float>(coef));
    for (const OwnedBlock& b : p_.blocks) {
      p_.adamw.update({host_span(view(p_.state.master(), DType::f32, b.master, b.numel)),
                       host_span(p_.reducer.block_gradients(b)),
                       host_span(view(*p_.state.exp_avg, DType::f32, b.moments, b.numel)),
                       host_span(view(*p_.state.exp_avg_sq, DType::f32, b.moments, b.numel))},
                      b.ranges, lr);
    }
    if (clear_gradients) p_.reducer.clear_after_step();
    return false;
  }

 private:
  ResidentParts p_;
};

#ifdef ZT_WITH_CUDA
class DeviceAdamW final : public ResidentAdamW {
 public:
  explicit DeviceAdamW(ResidentParts parts) : p_(parts) {}

  bool update(double lr, double coef, double loss_scale, bool clear_gradients) override {
    const DeviceState& st = p_.state;
    const double factor = device_gradient_factor(coef, loss_scale, p_.plan.world_size);
    const AdamWStepScalars scalars = adamw_step_scalars(p_.adamw.hyper(), lr, p_.adamw.step_count());
    const bool overlapped = p_.streams.optimizer_overlap();
    const cudaStream_t stream = overlapped ? p_.streams.optimizer_stream_after_compute() : work_stream();
    for (const size_t u : p_.order.order(overlapped ? UnitPhase::forward : UnitPhase::update)) {
      const OwnedBlock& b = p_.blocks[u];
      // Zeroed for the next window unless its first backward writes them.
      const bool zero_grads =
          (p_.plan.stage == 0 && !p_.reducer.overwritten_by_backward(u)) || p_.plan.direct_gradients;
      const Tensor grads = p_.reducer.block_gradients(b);
      const Tensor m = view(*st.exp_avg, DType::f32, b.moments, b.numel);
      const Tensor v = view(*st.exp_avg_sq, DType::f32, b.moments, b.numel);
      if (st.split) {
        ZT_CHECK(b.master == b.compute, "ZeRO engine: the split master needs the compute copy's offsets");
        gpu::adamw_update_split_master(scalars, st.split_master(b.master, b.numel), grads, m, v, b.ranges,
                                       stream, static_cast<float>(factor), zero_grads);
      } else {
        gpu::adamw_update(
            scalars, view(st.master(), DType::f32, b.master, b.numel), grads, m, v, b.ranges,
            p_.plan.mixed() ? view(*st.compute_copy, p_.plan.compute, b.compute, b.numel) : Tensor(), stream,
            static_cast<float>(factor), zero_grads);
      }
      if (overlapped) p_.streams.record_unit_updated(u);
    }
    if (overlapped) return true;  // no stage 1, no all-gather after it with overlap_optimizer
    if (p_.plan.stage == 1 && clear_gradients) p_.reducer.clear_after_step();
    return false;
  }

 private:
  ResidentParts p_;
};
#endif

}  // namespace

double device_gradient_factor(double coef, double loss_scale, int world_size) {
  double factor = 1.0 / loss_scale;
  if (world_size > 1) factor /= world_size;
  factor *= std::min(1.0, coef);
  return factor;
}

std::unique_ptr<ResidentAdamW> make_resident_adamw(DeviceKind device, const ZeroPlan& plan,
                                                   const std::vector<OwnedBlock>& blocks,
                                                   const DeviceState& state, GradientReducer& reducer,
                                                   AdamW& adamw, ZeroStreams& streams,
                                                   const UnitOrder& order) {
  const ResidentParts parts{plan, blocks, state, reducer, adamw, streams, order};
  if (device == DeviceKind::cpu) return std::make_unique<HostAdamW>(parts);
#ifdef ZT_WITH_CUDA
  return std::make_unique<DeviceAdamW>(parts);
#else
  ZT_FAIL("CUDA training needs a CUDA build");
#endif
}

}  // namespace zt::optim
