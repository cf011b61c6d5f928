# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# goals: the goals table (scripts/bench_vs_torch.py --goals: seq 128 bs 40/8/64, seq 512 bs 8/16; torch.compile,
# disentangled-flash where .whl is carried, zerotrain) into .goals/goals.json, continued across calls
# (--resume: a call cut by its budget keeps what it finished; the next call on a warm machine, or a fresh one
# given that file in .goals/ and carry ".goals", runs the rest). Remove .goals/goals.json to start over
# (--resume refuses a file of another tree). GOALS_BUDGET_S (default 540) bounds the call.
targets=(bench_train_step)
task_run() {
  local budget=${GOALS_BUDGET_S:-540} left
  left=$((budget - ($(date +%s) - start)))
  ((dry_run)) || mkdir -p .goals
  # Each torch.compile shape takes ~1-2.5 minutes: start one only with time for it.
  if ((left > 150)); then
    x --timeout $((left - 15)) --to "$work/goals.txt" python3 scripts/bench_vs_torch.py --zt-bin $bin/bench_train_step \
      --goals --timeout-s 240 --json-out .goals/goals.json --resume
  else
    say "goals: ${left} s left after the build, too few for a shape"
  fi
  if ((dry_run)); then
    x python3 scripts/bench_vs_torch.py --verdict-from .goals/goals.json
    return 0
  fi
  [[ -f .goals/goals.json ]] || { say "no goals measured yet (.goals/goals.json absent)"; return 1; }
  cp .goals/goals.json "$work/goals.json"
  python3 scripts/bench_vs_torch.py --verdict-from .goals/goals.json >"$work/verdict.txt" 2>&1
  tail -12 "$work/verdict.txt" | tee -a "$summary"
  pack
}
