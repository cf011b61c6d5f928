#!/usr/bin/env bash
# Configures and builds zerotrain into ./build (Release, both cores). CUDA code is compiled for sm_90a
# wherever nvcc exists. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$jobs"
