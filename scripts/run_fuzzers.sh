#!/usr/bin/env bash
# Builds the libFuzzer targets of the checkpoint readers (tests/fuzz) with clang in their own build folder and
# runs each for a bounded time over its seed corpus. Exits non-zero if a target crashes, leaks, hits a
# sanitizer report or times out; the offending input is left under <build>/fuzz-artifacts/.
#
#   scripts/run_fuzzers.sh                 # 20 s per target, build folder build-fuzz
#   FUZZ_SECONDS=300 FUZZ_BUILD_DIR=/tmp/f scripts/run_fuzzers.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-20}
targets=(fuzz_safetensors fuzz_zip fuzz_pickle)

cxx=${FUZZ_CXX:-$(command -v clang++ || command -v clang++-14 || true)}
cc=${FUZZ_CC:-$(command -v clang || command -v clang-14 || true)}
if [[ -z "$cxx" || -z "$cc" ]]; then
  echo "run_fuzzers: clang not found (scripts/setup.sh installs it)" >&2
  exit 1
fi

cmake -S "$root" -B "$build" -DZT_CUDA=OFF -DZT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  # New inputs go to a scratch corpus in the build folder; the committed seeds are only read.
  work="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts"
  mkdir -p "$work" "$artifacts"
  echo "run_fuzzers: $t for ${seconds}s"
  if ! "$build/bin/$t" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$artifacts/$t-" "$work" "$root/tests/fuzz/corpus/$t" \
      >"$build/$t.log" 2>&1; then
    echo "run_fuzzers: $t FAILED; see $build/$t.log and $artifacts" >&2
    tail -n 40 "$build/$t.log" >&2
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$build/$t.log" | sed "s/^/  $t /" || true
done
exit $status
