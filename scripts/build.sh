#!/usr/bin/env bash
# Configures and builds zerotrain into ./build (Release, every core). CUDA code is compiled for sm_90a
# wherever nvcc exists.
#   scripts/build.sh                          every target (the tools and every test)
#   scripts/build.sh --target train_mrpc      that target and what it links only
# Other arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
targets=() configure=()
while (($#)); do
  if [[ $1 == --target ]]; then
    (($# >= 2)) || { echo "scripts/build.sh: --target needs a name" >&2; exit 2; }
    targets+=("$2")
    shift 2
  else
    configure+=("$1")
    shift
  fi
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${configure[@]}"
cmake --build build -j"$jobs" ${targets[@]:+--target "${targets[@]}"}
