#!/usr/bin/env bash
# The flash backward against a base tree in one call (device, repository root; outputs in $OUT):
#   docs/bench/2026-12-06-h100-flash/backward/run.sh BASE_TREE (copied to the tree root's scripts/ or run by path)
# builds zt_bench there and zt_bench, the flash GPU tests and bench_train_step here (in parallel), runs the
# tests, the attention core per layer (zt_bench --only flash) at 4x2048, 1x8192, 16x512 and 40x128 with
# base and here in turn, then one training step timing at 4 x 2048 here.
set -u
base=${1:?base tree}
out=${OUT:-/tmp/flash_backward_ab}
mkdir -p "$out"
deps=$PWD/.device-deps
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/summary.txt"; }
build() {  # TREE LOG TARGETS...
  local tree=$1 log=$2
  shift 2
  cmake -S "$tree" -B "$tree/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLIBURING_INCLUDE_DIR="$deps/liburing/include" -DLIBURING_LIBRARY="$deps/liburing/lib/liburing.a" >"$log" 2>&1 &&
    cmake --build "$tree/build-gpu" -j8 --target "$@" >>"$log" 2>&1
}
build "$base" "$out/build_base.log" zt_bench &
base_pid=$!
build . "$out/build.log" zt_bench test_flash_disentangled_attention_gpu bench_train_step ||
  { grep -B2 -A8 error "$out/build.log" | head -60; exit 1; }
wait "$base_pid" || { grep -B2 -A8 error "$out/build_base.log" | head -60; exit 1; }
say "built; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
timeout 120 build-gpu/bin/test_flash_disentangled_attention_gpu >"$out/tests.txt" 2>&1
say "tests exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED' "$out/tests.txt" | head -20 | tee -a "$out/summary.txt"
for shape in 4x2048 1x8192 16x512 40x128; do
  IFS=x read -r batch seq <<<"$shape"
  for tree in "$base" .; do
    timeout 60 "$tree/build-gpu/bin/zt_bench" --only flash --batch "$batch" --seq "$seq" --reps 5 >"$out/core.tmp" 2>&1
    { echo "## $shape $tree"; cat "$out/core.tmp"; } >>"$out/core.txt"
    say "$shape $tree: $(grep -E '^attention_(forward|backward)_flash ' "$out/core.tmp" |
      awk '{print $1, $(NF-5), $(NF-4)}' | tr '\n' ' ') $(grep -cE '^\[.*\] .* ok ' "$out/core.tmp") ok"
  done
done
rm -f "$out/core.tmp"
timeout 60 build-gpu/bin/bench_train_step --dtype bf16 --batch 4 --seq 2048 --dropout 0.1 --steps 3 --warmup 1 \
  >"$out/step_4x2048.json" 2>"$out/step_4x2048.err"
say "step 4x2048 exit $?: $(head -c 400 "$out/step_4x2048.json")"
