#!/usr/bin/env bash
# The flash backward, one kernel against the rows + keys kernels (ZT_FLASH_BACKWARD_TWO_KERNELS=1) in one
# build: the flash GPU tests, the core per layer at the issue's shapes, then ncu on one backward launch.
# Usage (device, repository root): scripts/device/flash_backward_ab.sh [tests|bench|ncu ...]; outputs in $OUT.
set -u
out=${OUT:-/tmp/flash_backward_ab}
mkdir -p "$out"
deps=$PWD/.device-deps
start=$(date +%s)
say() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/summary.txt"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLIBURING_INCLUDE_DIR="$deps/liburing/include" \
  -DLIBURING_LIBRARY="$deps/liburing/lib/liburing.a" >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target zt_bench test_flash_disentangled_attention_gpu >>"$out/build.log" 2>&1 ||
  {
    grep -B2 -A8 -E "error" "$out/build.log" | head -60
    exit 1
  }
say "built"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee -a "$out/summary.txt"
for part in "${@:-tests bench ncu}"; do
  case $part in
  tests)
    for two in 0 1; do
      ZT_FLASH_BACKWARD_TWO_KERNELS=$two timeout 150 build-gpu/bin/test_flash_disentangled_attention_gpu \
        >"$out/tests_two$two.txt" 2>&1
      say "tests two_kernels=$two exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_two$two.txt" | tr '\n' ' ')"
      grep -E '^\[  FAILED' "$out/tests_two$two.txt" | head -20 | tee -a "$out/summary.txt"
    done
    ;;
  bench)
    for shape in 4x2048 1x8192 16x512 40x128; do
      IFS=x read -r batch seq <<<"$shape"
      for two in 1 0; do
        ZT_FLASH_BACKWARD_TWO_KERNELS=$two timeout 60 build-gpu/bin/zt_bench --only flash --batch "$batch" \
          --seq "$seq" --reps 5 >"$out/core.tmp" 2>&1
        { echo "## $shape ZT_FLASH_BACKWARD_TWO_KERNELS=$two"; cat "$out/core.tmp"; } >>"$out/core.txt"
        say "$shape two_kernels=$two: $(grep -E '^attention_(forward|backward)_flash ' "$out/core.tmp" |
          awk '{print $1, $(NF-5), $(NF-4)}' | tr '\n' ' ') $(grep -cE '^\[.*\] .* ok ' "$out/core.tmp") ok"
      done
    done
    rm -f "$out/core.tmp"
    ;;
  ncu)
    timeout 120 ncu --set full -k regex:flash_attention_backward -s 2 -c 1 build-gpu/bin/zt_bench \
      --only backward_flash --batch 4 --seq 2048 --reps 1 >"$out/ncu_backward_4x2048.txt" 2>&1
    say "ncu exit $?"
    ;;
  esac
done
