// zt_bench's kernels: each benchmarked entry point as a Setup (bench_env.h) made at the small validation
// shape or the xlarge training shape, with its minimal traffic and arithmetic (the formula is at each one).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/relative_position.h"
#include "model/config.h"
#include "tools/zt_bench/cuda/bench_env.h"

namespace zt_bench {

// Sizes a kernel is set up at: the small validation shape or the xlarge training shape.
struct Dims {
  int64_t B, L, D, N, I, V, K;  // batch, length, hidden, heads, intermediate, vocab, conv kernel
  float eps, hidden_dropout, attention_dropout;
  zt::kernels::RelativePositionConfig positions;
  zt::DebertaConfig model;  // whose parameter arena AdamW and grad_stats run over
  int64_t R() const { return B * L; }
};

Dims xlarge_dims(int64_t batch, int64_t seq);
// Buckets 16 over 64 positions: L 19 runs past the bucket midpoint 8 into the log buckets.
Dims validation_dims();

struct Kernel {
  const char* name;
  const char* dtype;  // storage, for the table
  DType storage;      // f32: outputs that are f32 too are held to 1e-5
  Setup (*setup)(Env&, const Dims&);
};

// Every kernel zt_bench knows, in the table's order.
std::span<const Kernel> kernel_table();

}  // namespace zt_bench
