// The update of the owned blocks where the optimizer state stays with the engine's device (no offload), as
// one of two strategies (the offloaded one is OffloadedOptimizer):
//   HostAdamW    the CPU backend: the gradients scaled in place by the clip coefficient (1/W was divided
//                already), then the SIMD AdamW block by block (optim/adamw.h);
//   DeviceAdamW  the GPU: one AdamW kernel per block with 1/(loss_scale W) and the clip folded in, writing
//                the 16-bit compute copy in the same pass (the split master's kernel where the master is
//                split), and zeroing the gradients the next window accumulates into; in unit order on the
//                compute stream, or with the optimizer stream (ZeroStreams) in the forward's order there,
//                each unit's end recorded for the next pass to wait for.
#pragma once

#include <memory>
#include <vector>

#include "optim/adamw.h"
#include "optim/zero/device_state.h"
#include "optim/zero/gradient_reducer.h"
#include "optim/zero/owned_blocks.h"
#include "optim/zero/unit_order.h"
#include "optim/zero/zero_plan.h"
#include "optim/zero/zero_streams.h"

namespace zt::optim {

class ResidentAdamW {
 public:
  virtual ~ResidentAdamW() = default;
  // The step's update (after AdamW::begin_step) with clip coefficient `coef` (1: none); true while the
  // update is still in flight on the optimizer stream (nothing may follow it in this step).
  // clear_gradients false: the gradients the next window accumulates into are left for the caller to clear
  // (a partial offload, whose host part's downloads may still read them).
  virtual bool update(double lr, double coef, double loss_scale, bool clear_gradients) = 0;
};

// The strategy for `device`, updating `blocks` (every owned block, or a partial offload's device parts).
// Every reference must outlive it.
std::unique_ptr<ResidentAdamW> make_resident_adamw(DeviceKind device, const ZeroPlan& plan,
                                                   const std::vector<OwnedBlock>& blocks,
                                                   const DeviceState& state, GradientReducer& reducer,
                                                   AdamW& adamw, ZeroStreams& streams,
                                                   const UnitOrder& order);

// The factor the GPU folds into the gradients: 1 / (loss_scale W) times min(1, coef), in double.
double device_gradient_factor(double coef, double loss_scale, int world_size);

}  // namespace zt::optim
