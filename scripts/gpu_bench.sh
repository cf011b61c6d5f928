#!/usr/bin/env bash
# The performance record in one device call (about 9 minutes on an H200): builds natively, times every kernel
# (zt_bench), profiles zerotrain's step, then runs scripts/bench_vs_torch.py for the issue's table — bs 40 bf16
# with HF eager, torch.compile and zerotrain first (the required comparison), then bs 8 and bs 64 bf16 and bs 40
# fp16 against torch.compile while the time budget allows (each torch.compile shape costs 1.5-2 minutes).
# Everything lands in $OUT (or ./gpu-bench-out); the last lines printed are the tables.
#
#   scripts/gpu_bench.sh                     # budget 540 s
#   ZT_GPU_BENCH_BUDGET_S=300 scripts/gpu_bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/gpu-bench-out}
mkdir -p "$out"
budget=${ZT_GPU_BENCH_BUDGET_S:-540}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
bench=build-gpu/bin/bench_train_step

build-gpu/bin/zt_bench --reps 20 --json "$out/zt_bench.json" >"$out/zt_bench.txt" 2>"$out/zt_bench.err"
"$bench" --batch 40 --seq 128 --dtype bf16 --steps 10 --profile >"$out/profile_bs40_bf16.json" \
  2>"$out/profile_bs40_bf16.txt"

side_by_side() {  # name, then bench_vs_torch.py arguments
  local name=$1
  shift
  python3 scripts/bench_vs_torch.py --zt-bin "$bench" --json-out "$out/$name.json" "$@" >"$out/$name.txt" 2>&1
}
side_by_side bs40_bf16 --batches 40 --dtypes bf16
for run in "bs8_bf16 --batches 8 --dtypes bf16" "bs64_bf16 --batches 64 --dtypes bf16" \
  "bs40_fp16 --batches 40 --dtypes fp16"; do
  if (($(left) < 150)); then
    echo "skipped (time budget): $run" | tee -a "$out/skipped.txt"
    continue
  fi
  # shellcheck disable=SC2086
  side_by_side $run --impls compile,zerotrain --timeout-s $(($(left) - 20))
done

echo "== kernels (zt_bench)"
tail -22 "$out/zt_bench.txt"
echo "== zerotrain step profile, bs 40 bf16"
head -14 "$out/profile_bs40_bf16.txt"
for f in "$out"/bs*.txt; do
  echo "== $(basename "$f" .txt)"
  grep -E '^ *[0-9]+ +[0-9]+ +(bf16|fp16)|^GOAL' "$f"
done
