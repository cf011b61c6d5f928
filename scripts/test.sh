#!/usr/bin/env bash
# Sets up, builds and runs every test. GPU-labelled tests report "skipped" on machines without a GPU.
#   scripts/test.sh            all tests
#   scripts/test.sh -L gpu     only the GPU tests (on the GPU machine: scripts/device/run.sh tests)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" "$@"
