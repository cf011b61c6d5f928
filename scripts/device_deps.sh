#!/usr/bin/env bash
# Libraries the GPU machine lacks, gathered here for the device tool to carry (it copies only the repo): the
# static liburing and its headers (the disk tier's io_uring backend, runtime/direct_io.h; Debian's
# liburing-dev, installed by scripts/setup.sh). Writes the git-ignored .device-deps/; pass it to a run with
# carry [".device-deps"], where scripts/device_cmake_flags.sh points CMake at it.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$(find /usr/lib /usr/lib64 -name liburing.a 2>/dev/null | head -1)
[[ -n "$lib" && -f /usr/include/liburing.h ]] || { echo "liburing-dev is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
rm -rf .device-deps/liburing
mkdir -p .device-deps/liburing/lib .device-deps/liburing/include
cp "$lib" .device-deps/liburing/lib/
cp -r /usr/include/liburing.h /usr/include/liburing .device-deps/liburing/include/
echo "liburing $(dpkg-query -W -f='${Version}' liburing-dev 2>/dev/null || echo '?') -> .device-deps/liburing"
