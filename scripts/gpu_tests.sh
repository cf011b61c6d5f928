#!/usr/bin/env bash
# On the GPU machine: builds build-gpu (Release, scripts/device_cmake_flags.sh's sm_90a flags; Ninja for a new
# build folder, an existing one's generator kept) and runs every GPU-labelled test — a device session's
# first call. The ctest output also stays in .ab-last/ctest_gpu.txt (git-ignored, so it is kept on a warm
# machine between calls).
#
#   scripts/gpu_tests.sh              # build, then ctest -L gpu -j4 (~160 s on the H200)
#   scripts/gpu_tests.sh --build      # build only
#
# GPU_TESTS_TIMEOUT_S (default 420) bounds the ctest run (not ZT_*: bench_train_step records those as
# switches). Results: $OUT/build.log, $OUT/ctest_gpu.txt. Exit status: 1 if the build fails, else ctest's.
# Carry .device-deps (scripts/device_deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/gpu-tests-out}
mkdir -p "$out" .ab-last
start=$(date +%s)

generator=()
[[ ! -f build-gpu/CMakeCache.txt ]] && command -v ninja >/dev/null && generator=(-G Ninja)  # keep an existing one
# shellcheck disable=SC2046  # the flags are words
if ! { cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) \
  >"$out/build.log" 2>&1 && cmake --build build-gpu -j"$(nproc)" >>"$out/build.log" 2>&1; }; then
  tail -40 "$out/build.log"
  exit 1
fi
echo "built: $(($(date +%s) - start)) s"
[[ ${1:-} == --build ]] && exit 0

rm -f .ab-last/ctest_gpu.txt  # a call cut before the copy below leaves no record (not an older tree's)
# The tree first, then ctest's own output.
echo "# zerotrain $(git describe --always --dirty 2>/dev/null || echo unknown)" >"$out/ctest_gpu.txt"
(cd build-gpu && timeout "${GPU_TESTS_TIMEOUT_S:-420}" ctest -L gpu -j4 --timeout 280 --output-on-failure \
  >>"$out/ctest_gpu.txt" 2>&1)
status=$?
cp "$out/ctest_gpu.txt" .ab-last/ctest_gpu.txt
echo "ctest -L gpu exit $status after $(($(date +%s) - start)) s: $(grep -E 'tests passed' "$out/ctest_gpu.txt" | tail -1)"
grep -A40 'The following tests FAILED' "$out/ctest_gpu.txt"
exit "$status"
