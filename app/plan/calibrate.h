// `train_mrpc --calibrate`: the host side of the cost model measured on this machine and kept in the
// --machine_figures file, the figures that differ most between hosts (the CPU AdamW ran 3.92 and 5.45 G
// parameters/s on two H200 hosts, docs/PERFORMANCE.md) and that decide between offload and accumulation.
//   cpu_adamw_gparams  the real CPU AdamW (optim/adamw.h, all threads, the bf16 copy written as the offloaded
//                      update writes it) over `elements` parameters, the best of `repeats`
//   host_gbps          a sum of squares over the f32 gradients on all threads (the host norm pass)
// The GPU figures (GEMM rate, HBM and PCIe bandwidth) keep the values passed in. TODO(issue 40): measure them
// too where a GPU is present (a GEMM of the layer's shape, a copy kernel, pinned copies both ways).
#pragma once

#include <cstdint>

#include "app/plan/cost_model.h"

namespace zt::plan {

MachineFigures calibrate_host(MachineFigures base, int64_t elements = int64_t{64} << 20, int repeats = 3);

}  // namespace zt::plan
