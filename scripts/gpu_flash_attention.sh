#!/usr/bin/env bash
# On the GPU machine: the flash attention's checks and timings in one call (issue 39). Builds only what it
# runs (build-gpu, Release, scripts/device_cmake_flags.sh), then, most wanted first (each stage appends to
# its file as it goes, so a call cut short still returns what ran):
#   1. the attention GPU tests (flash, stored) — $OUT/tests.txt;
#   2. training steps, xlarge bf16 dropout 0.1 (bench_train_step JSON lines, $OUT/steps.jsonl): 4 x 2048,
#      40 x 128 with the stored and the flash attention, 1 x 8192, 16 x 512 with both, and 1 x 16384 on a
#      repeated batch (loss finite and falling);
#   3. the attention core per layer (zt_bench --only attention; past 1024 --only flash) at 40 x 128,
#      16 x 512, 4 x 2048, 1 x 8192 — $OUT/core.txt;
#   4. determinism at L 2048: two runs of 2 layers x 3 steps on a repeated batch, losses compared.
# Carry .device-deps.
#   scripts/gpu_flash_attention.sh [--quick | --short]
#     --quick: the tests and the first four steps only; --short: without the 1 x 16384 run (about 3 minutes)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/gpu-flash-out}
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*" | tee -a "$out/log.txt"; }

generator=()
[[ ! -f build-gpu/CMakeCache.txt ]] && command -v ninja >/dev/null && generator=(-G Ninja)
# shellcheck disable=SC2046  # the flags are words
if ! { cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) \
  >"$out/build.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" --target test_flash_disentangled_attention_gpu \
    test_disentangled_attention_gpu bench_train_step zt_bench \
    >>"$out/build.log" 2>&1; }; then
  tail -40 "$out/build.log"
  exit 1
fi
stamp "built; GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"

for t in test_flash_disentangled_attention_gpu test_disentangled_attention_gpu; do
  timeout 240 "build-gpu/bin/$t" >>"$out/tests.txt" 2>&1
  stamp "$t exit $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/tests.txt" | tail -2 | tr '\n' ' ')"
done
grep -E '^\[  FAILED  \]' "$out/tests.txt" | head -20

step() {  # bench_train_step flags...: one JSON line (or the error) into steps.jsonl
  timeout 150 build-gpu/bin/bench_train_step --dtype bf16 --dropout 0.1 "$@" >>"$out/steps.jsonl" \
    2>>"$out/steps.err"
  stamp "step $* exit $?: $(tail -1 "$out/steps.jsonl" |
    grep -o '"step_ms":[0-9.]*\|"peak_gib":[0-9.]*\|"attention":"[a-z]*"\|"losses":\[[^]]*\]' | tr '\n' ' ')"
}
step --batch 4 --seq 2048 --steps 3 --warmup 1
step --batch 40 --seq 128 --attention stored --steps 6 --warmup 2
step --batch 40 --seq 128 --attention flash --steps 6 --warmup 2
step --batch 1 --seq 8192 --steps 3 --warmup 1
[[ ${1:-} == --quick ]] && exit 0
step --batch 16 --seq 512 --attention stored --steps 4 --warmup 2
step --batch 16 --seq 512 --attention flash --steps 4 --warmup 2
[[ ${1:-} == --short ]] || step --batch 1 --seq 16384 --steps 4 --warmup 0 --repeat_batch --lr 1e-4

for shape in "40 128" "16 512" "4 2048" "1 8192"; do
  read -r batch seq <<<"$shape"
  only=attention
  ((seq > 1024)) && only=flash  # the stored attention stops at 1024
  timeout 120 build-gpu/bin/zt_bench --only "$only" --batch "$batch" --seq "$seq" --reps 5 >>"$out/core.txt" 2>&1
  stamp "core $batch x $seq exit $?"
done

for run in 1 2; do
  timeout 120 build-gpu/bin/bench_train_step --dtype bf16 --batch 2 --seq 2048 --layers 2 --steps 3 --warmup 0 \
    --repeat_batch >"$out/determinism_$run.json" 2>&1
done
a=$(grep -o '"losses":\[[^]]*\]' "$out/determinism_1.json")
b=$(grep -o '"losses":\[[^]]*\]' "$out/determinism_2.json")
stamp "determinism at L 2048: $([[ -n $a && $a == "$b" ]] && echo same || echo DIFFERENT) ($a vs $b)"
