#!/usr/bin/env bash
# Several variants of the xlarge training step timed side by side in one device call — trees, switches and
# flags together (scripts/gpu_step_ab.sh is the two-variant case):
#
#   git archive main | (mkdir -p .ab-base && tar -x -C .ab-base)       # here, before the call (carry it)
#   AB_TESTS="test_trainer_gpu test_gemm_gpu" scripts/gpu_step_variants.sh \
#     "main|.ab-base||" "new|.||" "new+overlap|.||--overlap_optimizer" "new+tune|.|ZT_GEMM_AUTOTUNE=1|"
#
# Each variant is label|tree|env words|bench_train_step flags. Every distinct tree is built once
# (build-gpu/ inside it); the GPU tests named in AB_TESTS run from the first variant's tree that is "." before
# any timing. Then for each batch in AB_BATCHES (default "40 8"; seq AB_SEQ (128), bf16, dropout 0.1, 20 steps,
# AB_COMMON extra flags for every run) the variants run in turn, AB_REPS rounds (default 3), so drift on the
# machine shows in every column; then one profiled step of each variant at AB_PROFILE_BATCH (default 8).
# One line per run in $OUT/ab.log and a summary (mean step ms per variant, ratio to the first variant); the
# log names each variant's tree, env and flags first, and a copy stays in .ab-last/ab.log once the timed runs
# are done (git-ignored: kept on a warm machine).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/ab-out}
logs=/tmp/ab
mkdir -p "$out" "$logs"
log="$out/ab.log"
export NCCL_NVLS_ENABLE=0
say() { echo "$*" | tee -a "$log"; }
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start)) s"; }
(($# >= 1)) || { say "usage: $0 'label|tree|env|flags' ..."; exit 2; }
read -r -a batches <<<"${AB_BATCHES:-40 8}"
read -r -a common <<<"${AB_COMMON:-}"
read -r -a tests <<<"${AB_TESTS:-}"
reps=${AB_REPS:-3}

labels=() trees=() envs=() flags=()
for spec in "$@"; do
  IFS='|' read -r label tree env_words flag_words <<<"$spec"
  [[ -d $tree ]] || { say "variant $label: no tree $tree"; exit 2; }
  labels+=("$label") trees+=("$tree") envs+=("$env_words") flags+=("$flag_words")
done
mkdir -p .ab-last && rm -f .ab-last/ab.log  # a call cut before the timings end leaves no record
say "# zerotrain $(git describe --always --dirty 2>/dev/null || echo unknown)"
for i in "${!labels[@]}"; do say "variant ${labels[$i]}: tree ${trees[$i]} env ${envs[$i]} flags ${flags[$i]}"; done

built=()
for tree in "${trees[@]}"; do
  [[ " ${built[*]} " == *" $tree "* ]] && continue
  targets=(bench_train_step)
  [[ $tree == . ]] && targets+=("${tests[@]}")
  build_log="$logs/build_$(basename "$(realpath "$tree")").log"
  # shellcheck disable=SC2046  # the flags are words
  (cd "$tree" && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release $(scripts/device_cmake_flags.sh) \
    >"$build_log" 2>&1 && cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" >>"$build_log" 2>&1) ||
    { say "build of $tree failed:"; grep -B2 -A8 "error" "$build_log" | head -40 | tee -a "$out/tests.txt"; exit 1; }
  built+=("$tree")
done
say "built ${built[*]}: $(elapsed)"

for t in "${tests[@]}"; do
  timeout 300 build-gpu/bin/"$t" --gtest_brief=1 >"$logs/$t.txt" 2>&1
  say "$t exit $?: $(grep -E '^\[  (PASSED|FAILED)' "$logs/$t.txt" | tr '\n' ' ')"
  grep -B5 -A20 -E 'Failure|FAILED' "$logs/$t.txt" | head -80 >>"$out/tests.txt"
done

run() {  # variant index, bench flags... ; prints the JSON line's fields or FAILED
  local i=$1 env_words flag_words
  shift
  read -r -a env_words <<<"${envs[$i]}"
  read -r -a flag_words <<<"${flags[$i]}"
  env "${env_words[@]}" timeout 150 "${trees[$i]}/build-gpu/bin/bench_train_step" --seq "${AB_SEQ:-128}" --dtype bf16 \
    --dropout 0.1 "${common[@]}" "$@" "${flag_words[@]}" 2>"$logs/err.txt"
}
for bs in "${batches[@]}"; do
  for rep in $(seq "$reps"); do
    for i in "${!labels[@]}"; do
      line=$(run "$i" --batch "$bs" --steps 20 | tail -1)
      if [[ "$line" == \{* ]]; then
        say "bs$bs ${labels[$i]} #$rep: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("step_ms", r["step_ms"], "peak_gib", r["peak_gib"], "loss_last", r["losses"][-1])')"
      else
        say "bs$bs ${labels[$i]} #$rep: FAILED $(tail -3 "$logs/err.txt" | tr '\n' ' ')"
      fi
    done
  done
done
cp "$log" .ab-last/ab.log  # the timed runs, kept before the profiles
pbs=${AB_PROFILE_BATCH:-8}
for i in "${!labels[@]}"; do
  run "$i" --batch "$pbs" --steps 10 --profile >/dev/null 2>&1
  cp "$logs/err.txt" "$out/profile_bs${pbs}_${labels[$i]//[^A-Za-z0-9_.-]/_}.txt"
done
say "done: $(elapsed)"
python3 - "$log" "${labels[@]}" <<'EOF' | tee -a "$log"
import re, sys
from statistics import mean
log, labels = sys.argv[1], sys.argv[2:]
runs = {}
for line in open(log):
    m = re.match(r"bs(\d+) (.+) #\d+: step_ms ([\d.]+)", line)
    if m:
        runs.setdefault((int(m[1]), m[2]), []).append(float(m[3]))
for bs in sorted({b for b, _ in runs}, reverse=True):
    first = runs.get((bs, labels[0]))
    for label in labels:
        ms = runs.get((bs, label))
        if not ms:
            continue
        ratio = f" ({mean(ms) / mean(first):.4f} of {labels[0]})" if first else ""
        print(f"summary bs{bs} {label}: mean {mean(ms):.2f} ms over {len(ms)}{ratio}")
EOF
cp "$log" .ab-last/ab.log
