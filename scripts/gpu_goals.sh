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
#
# GOALS_BUDGET_S (default 540) bounds the whole call (not ZT_*: bench_train_step records those as switches).
# To start over (another commit: --resume refuses the old file), remove .goals/goals.json.
# Results: $OUT/goals.json (a copy), $OUT/goals.txt, $OUT/ctest_gpu.txt. Carry .whl (scripts/fetch_wheels.sh)
# and .device-deps (scripts/device_deps.sh).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-$PWD/goals-out}
budget=${GOALS_BUDGET_S:-540}
start=$(date +%s)
left() { echo $((budget - ($(date +%s) - start))); }
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

mkdir -p "$out" .goals

timeout "$(left)" scripts/gpu_tests.sh --build || exit 1
if [[ ${GOALS_TESTS:-0} == 1 ]] && (($(left) > 240)); then  # ~160 s for all of them on the H200
  GPU_TESTS_TIMEOUT_S=$(($(left) - 60)) scripts/gpu_tests.sh || echo "(ctest exit $?)"
fi

# Each torch.compile shape takes ~1-2.5 minutes; bench_vs_torch rewrites the file after every run, so a call
# cut by the budget keeps what it finished, and --resume skips it next time.
if (($(left) > 150)); then
  timeout "$(($(left) - 15))" python3 scripts/bench_vs_torch.py \
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
