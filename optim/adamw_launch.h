// The GPU AdamW's launch shape (optim/cuda/adamw.cuh), and the switch that bounds it for the overlapped
// AdamW (ZeroEngineOptions::overlap_optimizer). Plain C++, so the parsing is tested without a GPU.
//
// Why a bounded grid: by default the AdamW launches one 256-thread block per 8192-element chunk (tens of
// thousands of blocks for a large model), which fills every SM. Run beside the next step's forward on a
// stream of its own, it then takes the register file the forward's GEMM CTAs need (measured on the H200:
// the forward 4.9 ms longer). A bounded grid (e.g. 33 blocks x 512 threads, a quarter of 132 SMs) loops
// over the chunks and leaves the other SMs to the forward. Every element's arithmetic is the same in any
// shape, so the results are bitwise those of the default launch.
#pragma once

#include <string_view>

namespace zt::optim {

// blocks: the grid (each block loops over chunks blockIdx.x, + gridDim.x, ...), 0 = one block per chunk;
// threads: a block's threads, a multiple of 32 in [32, 1024], 0 = the default 256.
struct AdamWLaunch {
  int blocks = 0;
  int threads = 0;
};

// The environment variable that bounds the overlapped AdamW's grid: "BLOCKS,THREADS", e.g. "33,512".
inline constexpr const char* kOverlapAdamWGridVariable = "ZT_OVERLAP_ADAMW_GRID";

// `text` as the value of `variable`: empty gives the default launch {0, 0}; otherwise exactly two positive
// decimal integers separated by a comma (no spaces or signs), blocks <= 65535, threads a multiple of 32 and
// <= 1024. Anything else throws zt::Error naming the variable and the expected form.
AdamWLaunch parse_adamw_grid(std::string_view text, std::string_view variable);

// ZT_OVERLAP_ADAMW_GRID parsed once per process (thread-safe), with one info line when it bounds the grid;
// unset or empty: the default launch. A malformed value throws (on every call).
AdamWLaunch overlap_adamw_launch();

}  // namespace zt::optim
