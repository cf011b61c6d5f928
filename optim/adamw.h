// AdamW over flat fp32 buffers, with the exact arithmetic of torch.optim.AdamW (single-tensor path,
// foreach=False, fused=False, amsgrad=False), so a replay of torch agrees to float rounding.
//
// One step t = t + 1, then for every element of every tensor range (hyper-parameters are doubles, as
// Python floats are; each is rounded to float where torch rounds it, shown as f(...)):
//   p = p * f(1 - lr*wd)                       only for ranges with weight_decay (decoupled, before Adam)
//   m = m + f(1 - b1) * (g - m)                torch's lerp(m, g, 1-b1); for 1-b1 >= 0.5 lerp's other form
//   v = v * f(b2);  v = v + (f(1 - b2) * g) * g
//   d = sqrt(v) / f(sqrt(1 - b2^t)) + f(eps)
//   p = p + (f(-lr / (1 - b1^t)) * m) / d
// Defaults are torch's: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01.
//
// Buffers: params (fp32 master), grads, exp_avg (m), exp_avg_sq (v) are flat arrays of one length and one
// layout; `ranges` says which elements to update and whether each tensor decays (biases and LayerNorm
// weights do not, as in run_glue_no_trainer: the caller decides per tensor). A ZeRO shard passes the parts
// of tensors it owns as ranges over its own flat buffers. Elements outside every range are not touched.
//
// Optionally the updated params are also written as bf16 or f16 (round to nearest even) into a 16-bit
// buffer of the same layout, in the same pass while they are still in cache (the offload path's copy-back).
//
// The work is split into fixed-size blocks run on the process's persistent thread pool
// (runtime/thread_pool.h); the result does not depend on the number of threads (every element's arithmetic
// is independent).
//
// The inner loop has three bodies chosen at run time (CpuIsa): scalar, AVX2 (8 lanes) and AVX-512 (16
// lanes), each a vector loop with the scalar loop as its tail. They compute the same bits: every statement
// above is one IEEE-754 operation (mul, add, sub, div, sqrt, each correctly rounded in any lane width), the
// vector bodies issue them in the same order, and none of the three contracts a multiply and an add into an
// FMA (the files are compiled with -ffp-contract=off; an FMA would round once where torch rounds twice).
// The 16-bit copy uses the runtime's rounding in every body (f16: F16C's round-to-nearest-even, NaN lanes
// redone by the runtime's float_to_f16, which keeps no payload).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

#include "runtime/dtype.h"

namespace zt::optim {

struct AdamWHyper {
  double lr = 1e-3;  // used by step() when no learning rate is given; schedules pass theirs per step
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// One tensor (or the part of one a shard owns) inside the flat buffers: elements [offset, offset + numel).
struct TensorRange {
  int64_t offset = 0;
  int64_t numel = 0;
  bool weight_decay = true;  // false for biases and LayerNorm weights
};

// Flat buffers of equal length and layout. grads are read only.
struct AdamWBuffers {
  std::span<float> params;       // in/out: fp32 master weights
  std::span<const float> grads;  // in: unscaled, clipped gradients
  std::span<float> exp_avg;      // in/out: m, zero before the first step
  std::span<float> exp_avg_sq;   // in/out: v, zero before the first step
};

// Where to write a 16-bit copy of the updated params (same layout as params), or nothing.
using Params16Out = std::variant<std::monostate, std::span<bf16>, std::span<f16>>;

// The per-step scalars of the formula above, rounded to float where torch rounds them. t >= 1.
struct AdamWStepScalars {
  float decay_factor;           // f(1 - lr*wd), applied to ranges with weight_decay
  float m_weight;               // f(1 - b1), lerp weight
  bool m_weight_is_small;       // 1 - b1 < 0.5: torch's lerp uses m + w*(g-m), otherwise g - (g-m)*(1-w)
  float beta2;                  // f(b2)
  float v_weight;               // f(1 - b2)
  float bias_correction2_sqrt;  // f(sqrt(1 - b2^t)), computed as torch does: (1 - b2^t) ** 0.5
  float eps;                    // f(eps)
  float neg_step_size;          // f(-lr / (1 - b1^t))
};
AdamWStepScalars adamw_step_scalars(const AdamWHyper& hyper, double lr, int64_t t);

// Throws unless every range lies inside buffers of `size` elements and no two overlap (an element updated
// twice would take two steps); messages start with `op`.
void check_adamw_ranges(std::span<const TensorRange> ranges, int64_t size, const char* op);

// Applies one update with the given scalars to elements [0, n) of the raw arrays (no threads, no checks):
// the scalar reference every other body equals bit for bit. grad_scale != 1 multiplies each gradient first
// (g = grad_scale * g: fp16 unscaling, 1/world and clipping folded into one factor, as the GPU AdamW does);
// grads are not written.
void adamw_update_elements(const AdamWStepScalars& s, bool weight_decay, int64_t n, float* params,
                           const float* grads, float* exp_avg, float* exp_avg_sq, float grad_scale = 1.0f);

// The CPU AdamW's inner-loop bodies. best_cpu_isa(): the widest this CPU (and OS) supports; every body
// gives the same bits, so the choice only changes speed.
enum class CpuIsa { scalar, avx2, avx512 };
CpuIsa best_cpu_isa();
bool cpu_supports(CpuIsa isa);
std::string_view cpu_isa_name(CpuIsa isa);

class AdamW {
 public:
  // num_threads 0: all hardware threads. Throws on hyper-parameters torch rejects (negative lr, eps or
  // weight_decay; betas outside [0, 1)).
  explicit AdamW(AdamWHyper hyper = {}, int num_threads = 0);

  // One optimizer step: advances t, then updates every range with learning rate lr.
  void step(const AdamWBuffers& buffers, std::span<const TensorRange> ranges, double lr,
            Params16Out params16 = {}, float grad_scale = 1.0f);
  void step(const AdamWBuffers& buffers, std::span<const TensorRange> ranges) {
    step(buffers, ranges, hyper_.lr);
  }

  // The same step in pieces, for an update that arrives bucket by bucket: begin_step() advances t once,
  // then update() is called for each bucket's ranges with that t.
  void begin_step() { ++step_count_; }
  // grad_scale: every gradient is multiplied by it first (see adamw_update_elements).
  void update(const AdamWBuffers& buffers, std::span<const TensorRange> ranges, double lr,
              Params16Out params16 = {}, float grad_scale = 1.0f) const;

  int64_t step_count() const { return step_count_; }  // t: steps taken (torch's state['step'])
  void set_step_count(int64_t t);                     // when resuming from a checkpoint
  const AdamWHyper& hyper() const { return hyper_; }
  int num_threads() const { return num_threads_; }
  // The same results at any count (the blocks are elementwise; test ResultDoesNotDependOnThreadCount).
  void set_num_threads(int num_threads);
  // The inner-loop body (best_cpu_isa() at construction). set_isa refuses a body this CPU cannot run; tests
  // force each body through it.
  CpuIsa isa() const { return isa_; }
  void set_isa(CpuIsa isa);

 private:
  AdamWHyper hyper_;
  int num_threads_;
  CpuIsa isa_;
  int64_t step_count_ = 0;
};

}  // namespace zt::optim
