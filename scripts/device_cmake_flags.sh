#!/usr/bin/env bash
# CMake flags for a build on the GPU machine: the libraries scripts/device_deps.sh carried in .device-deps/
# (liburing, static). Prints nothing when that folder is absent (the disk tier then says it runs on its
# thread-pool backend).
cd "$(dirname "$0")/.." || exit 1
if [[ -f .device-deps/liburing/lib/liburing.a && ! -f /usr/include/liburing.h ]]; then
  echo "-DLIBURING_INCLUDE_DIR=$PWD/.device-deps/liburing/include -DLIBURING_LIBRARY=$PWD/.device-deps/liburing/lib/liburing.a"
fi
