#!/usr/bin/env bash
# Issue 16's goals on the GPU machine, across as many device calls as they take: builds (a no-op on a warm
# machine that built already), optionally runs the GPU tests, then `bench_vs_torch.py --goals --resume` into
# .goals/goals.json (git-ignored, so it stays on a warm machine between calls): each call continues where the
# last stopped, and the table comes from one file of one tree. A fresh machine starts from scratch unless the
# last goals.json is put into .goals/ here and `.goals` carried. Stops inside the time budget either way.
#
#   GOALS_TESTS=1 scripts/gpu_goals.sh        # first call: build, ctest -L gpu, then shapes while time lasts
#   scripts/gpu_goals.sh                      # later calls (two or three at the twelfth session's speeds): the
#                                             # remaining shapes, then the verdict of all five
#   GOALS_SWITCHES=auto scripts/gpu_goals.sh  # after scripts/gpu_tests.sh and a gpu_step_variants.sh A/B of
#                                             # switches in earlier calls on this machine: with the switches
#                                             # scripts/pick_switches.py chooses from those two (.ab-last/)
#   GOALS_SWITCHES="ZT_A=1 ZT_B=1" scripts/gpu_goals.sh     # with these
#
# The switches go into the environment of every run (bench_vs_torch records them, and --resume keeps a file to
# one set: later calls must name the same, and auto chooses the same again from the same files).
# GOALS_BUDGET_S (default 540) bounds the whole call (not ZT_*: bench_train_step records those as switches).
# To start over (another commit, other switches: --resume refuses the old file), remove .goals/goals.json.
# Results: $OUT/goals.json (a copy), $OUT/goals.txt, $OUT/ctest_gpu.txt. Carry .whl (scripts/fetch_wheels.sh)
# and .device-deps (scripts/device_deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/goals-out}
budget=${GOALS_BUDGET_S:-540}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

# The switches first: a bad GOALS_SWITCHES ends the call before any time goes into the build.
switches=${GOALS_SWITCHES:-}
if [[ $switches == auto ]]; then
  tree=$(git describe --always --dirty 2>/dev/null || echo unknown)
  if [[ -f .ab-last/ab.log && -f .ab-last/ctest_gpu.txt ]]; then
    switches=$(python3 scripts/pick_switches.py .ab-last/ab.log --ctest .ab-last/ctest_gpu.txt --tree "$tree")
  else
    echo "GOALS_SWITCHES=auto: no .ab-last/ab.log and .ab-last/ctest_gpu.txt on this machine (scripts/gpu_tests.sh" \
      "and gpu_step_variants.sh in earlier calls write them): no switches"
    switches=
  fi
fi
read -r -a switch_words <<<"$switches"
for word in "${switch_words[@]}"; do
  [[ $word =~ ^ZT_[A-Z0-9_]+=[^[:space:]]*$ ]] || { echo "GOALS_SWITCHES: '$word' is not ZT_NAME=value"; exit 2; }
done
echo "switches: ${switches:-none}"
mkdir -p "$out" .goals

timeout "$(left)" scripts/gpu_tests.sh --build || exit 1
if [[ ${GOALS_TESTS:-0} == 1 ]] && (($(left) > 240)); then  # ~160 s for all of them on the H200
  GPU_TESTS_TIMEOUT_S=$(($(left) - 60)) scripts/gpu_tests.sh || echo "(ctest exit $?)"  # without the switches
fi

# Each torch.compile shape takes ~1-2.5 minutes; bench_vs_torch rewrites the file after every run, so a call
# cut by the budget keeps what it finished, and --resume skips it next time.
if (($(left) > 150)); then
  timeout "$(($(left) - 15))" env "${switch_words[@]}" python3 scripts/bench_vs_torch.py \
    --zt-bin build-gpu/bin/bench_train_step --goals \
    --timeout-s 240 --json-out .goals/goals.json --resume >>"$out/goals.txt" 2>&1
fi
if [[ -f .goals/goals.json ]]; then
  cp .goals/goals.json "$out/goals.json"
  python3 scripts/bench_vs_torch.py --verdict-from .goals/goals.json 2>&1 | tee -a "$out/goals.txt" | tail -12
else
  echo "no goals measured yet (.goals/goals.json absent)"
fi
echo "done: $(($(date +%s) - start)) s"
