#!/usr/bin/env bash
# Where the step's time goes at the shapes issue 16 still misses, in one device call (~4 minutes on an H200):
# the step profile (bench_train_step --profile: device time per segment over 10 steps) and, on a one-layer
# model, Nsight Compute's time of every kernel (scripts/ncu_kernel_times.py), at bs 8 seq 128 (the 3x goal),
# bs 8 and 16 seq 512 (the 1.5x goals) and bs 40 seq 128 (the reference the earlier profiles are at). Each
# shape is skipped once the time budget is spent; everything lands in $OUT (or ./gpu-profile-out).
#
#   scripts/gpu_profile_sweep.sh                         # budget 480 s
#   ZT_PROFILE_BUDGET_S=300 scripts/gpu_profile_sweep.sh
#   ZT_PROFILE_SHAPES="8x512 16x512" scripts/gpu_profile_sweep.sh   # some shapes only (BATCHxSEQ)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/gpu-profile-out}
mkdir -p "$out"
budget=${ZT_PROFILE_BUDGET_S:-480}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
export NCCL_NVLS_ENABLE=0

# shellcheck disable=SC2046  # the flags are words
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target bench_train_step >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
bench=build-gpu/bin/bench_train_step
echo "built: $(($(date +%s) - start)) s"

read -r -a shapes <<<"${ZT_PROFILE_SHAPES:-8x128 8x512 16x512 40x128}"
for shape in "${shapes[@]}"; do
  IFS=x read -r batch seq <<<"$shape"
  name="bs${batch}_seq${seq}"
  if (($(left) < 60)); then
    echo "skipped (time budget): $name" | tee -a "$out/skipped.txt"
    continue
  fi
  timeout 120 "$bench" --batch "$batch" --seq "$seq" --dtype bf16 --dropout 0.1 --steps 10 --profile \
    >"$out/profile_$name.json" 2>"$out/profile_$name.txt"
  echo "$name profile: exit $?, step_ms $(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["step_ms"])' "$out/profile_$name.json" 2>/dev/null)"
  if command -v ncu >/dev/null && (($(left) > 60)); then
    timeout 180 ncu --clock-control none --metrics gpu__time_duration.sum --csv "$bench" --batch "$batch" \
      --seq "$seq" --dtype bf16 --dropout 0.1 --steps 1 --layers 1 >"$out/ncu_$name.csv" 2>"$out/ncu_$name.err"
    python3 scripts/ncu_kernel_times.py "$out/ncu_$name.csv" >"$out/ncu_$name.txt" 2>&1
    echo "$name ncu: $(tail -1 "$out/ncu_$name.txt")"
  fi
done
echo "done: $(($(date +%s) - start)) s"
