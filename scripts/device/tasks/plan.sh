# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# plan [--quick] [--parts LIST]: issue 40's goals (scripts/plan_goals.py says what each part measures, how a
# plan is judged to fit a cap, how the grid is pruned and how its time is modelled), the parts in order of
# value; every result line lands in the summary as it comes. Each part prints its expected seconds first.
# Time model (plan_goals.py, "Time"; fitted to the 42 runs of docs/bench/2026-12-06-h100-plan): a
# bench_train_step run takes 5.2 s + 0.94 s per planned host GiB (pinning) + its steps (the slower of the two
# H100 hosts; the other: 3.9 s + 0.60 s/GiB); its timeout 1.5 x (start-up + pinning) + 5 s + its steps at
# twice the predicted step, or what a winner of its caps could still need. Expected seconds on one H100
# (`python3 scripts/plan_goals.py expect --bin build-cpu/bin --work /tmp/x --figures
# docs/bench/2026-12-06-h100-plan/call2_machine_figures.json`, call 2's calibration):
#   calibrate 50   train_mrpc --calibrate: the figures every --auto_plan reads (each point's sustained clock:
#                  1.5 s of load and 0.4 s of timing a point; its figures can be judged before a grid:
#                  python3 scripts/plan_offline.py --bin build-gpu/bin --figures .plan/machine_figures.json
#                  --state docs/bench/2026-12-06-h100-session19/call2_plan_goals_state.json)
#   g128 74        the grid and the auto plan at caps 12/16/24/40 GiB, global batch 128 seq 128 (6 plans, 4
#                  fallbacks measured only where their edge plan needs them)
#   g40 47         ... global batch 40 (4 plans + 3 fallbacks)
#   g512 157       ... global batch 512 (9 plans + 3 fallbacks; seven offload plans pin 7-15 GiB: 16-24 s each)
#   g16x512 68     ... global batch 16 at seq 512 (5 plans + 3; capped reruns where a reserved peak is over a cap)
#   partial 1      from the grid: where only offload fits, the best partial against the best full offload
#                  (PLAN_RATIO_SWEEP=1: the ratios 0.75/0.5/0.25 at one cap's full offload plan, +43 s)
#   delayed 20     the delayed update at batch 40 against max(forward + backward, CPU update) (one offload run)
#   ds 66          DeepSpeed's ZeRO-2 + offload at global batches 40/128/512 and its largest batch per cap
#                  (3 one-step probes a cap), the model built on the GPU (on the CPU its engine took 68.9 s);
#                  its CPU Adam compiled beside a fresh build (below) (.ds/ from scripts/fetch_deepspeed.sh)
#   large 171      not a goal: the 6.2 B model, ZeRO-3 + both offloads, 12-20 steps on a repeated batch: the
#                  losses. Its start-up (125-160 s on the H200) is mostly pinning 104.5 GiB and the host init.
#   summary 1      the goals table again (always runs)
# A fresh build of the three targets takes ~60 s (call 2; call 1: 36 s), DeepSpeed's CPU Adam beside it ~40 s
# more (waited for before the first part, so that no measurement shares the CPU with it); warm ~1 s.
# Issue 40's goals in ONE run: two back-to-back device calls on the same machine (the second within 30 s of
# the first's end), 730 s of budget, 790 s of device time at most (the expected: 454 + 108 s). The first holds
# every goal but DeepSpeed's anchor, so a second call that finds no machine costs only the anchor:
#   1: run(timeout_s=580, carry=[".device-deps"]) from main's tree (from a worktree copy .wt-NAME add it to
#      the carry and start with `cd .wt-NAME && ln -s ../.device-deps ../.ds . &&`):
#      PLAN_BUDGET_S=550 scripts/device/run.sh plan --parts calibrate,g128,g40,g512,g16x512,partial,delayed,summary
#      (expected 454 s: build 60, calibrate 50, g128 74, g40 47, g512 133, g16x512 68, partial 1, delayed 20,
#      summary 1; the budget is 1.21 x the expected)
#   2: run(timeout_s=210, carry=[".device-deps", ".ds"]): PLAN_BUDGET_S=180 scripts/device/run.sh plan --parts ds,summary
#      (expected 108 s: DeepSpeed's CPU Adam compiled on the warm build 41, ds 66, summary 1; the budget holds
#      DeepSpeed's engine as slow as call 2's, +49 s: the model built on the GPU is not yet measured in this
#      anchor)
#   the 6.2 B run on its own: PLAN_BUDGET_S=210 scripts/device/run.sh plan --parts large (timeout_s 240)
# (`plan_goals.py expect` prints these lines from the model; the CPU test checks that they fit 850 s.)
# Budgets: PLAN_BUDGET_S is the call's (default 480 s since the call began, the build included); a part run by
# plan_goals.py gets what the call has left - 5 and budgets itself (min(1.25 x expected + 10 s, that): a grid
# plan that could win may overrun its part, never the call); DeepSpeed's part, last in its call, all of it.
# The state (measured plans, the table, the figures) is kept in .plan/ on the device, so a later call on a
# warm machine continues with other --parts (remove .plan to start over). --quick: a 2-layer model, one cap
# (3 GiB: offload, accumulation), two batches, a 4-layer large model, DeepSpeed at one batch and cap: a smoke
# run of every code path. PLAN_MARGIN (default 1.15), PLAN_PER_CAP (2): the grid keeps per cap the
# PLAN_PER_CAP fastest families predicted within the margin of the best and each placement kind's fastest.
targets=(bench_train_step train_mrpc bench_cpu_adam)
plan_quick=0
plan_parts=calibrate,g128,g40,g512,g16x512,partial,delayed,ds,large,summary
task_args() {
  while (($#)); do
    case $1 in
    --quick) plan_quick=1 ;;
    --parts)
      (($# >= 2)) || refuse "plan --parts needs a list"
      plan_parts=$2
      shift
      ;;
    *) refuse "plan takes [--quick] [--parts LIST] (got: $*)" ;;
    esac
    shift
  done
  local p
  for p in ${plan_parts//,/ }; do
    [[ $p =~ ^(calibrate|g128|g40|g512|g16x512|partial|delayed|large|ds|summary)$ ]] || refuse "plan: unknown part '$p'"
  done
  plan_start_ds_jit
}
# DeepSpeed's CPU Adam is compiled (~40 s of CPU) beside a fresh build rather than inside the timed ds part:
# only when .ds/ is carried and the extension is not compiled yet, bounded at 100 s; task_run waits for it
# before the first part, so that no measurement shares the CPU with it.
plan_jit_pid=
plan_start_ds_jit() {
  ((dry_run)) && return 0
  [[ -d .ds/wheels ]] || return 0
  compgen -G "/tmp/tx/cpu_adam/*.so" >/dev/null && return 0
  timeout -k 5 100 bash scripts/device/ds_plan_anchor.sh --out /tmp/ds_jit --jit-only >/tmp/ds_jit.log 2>&1 &
  plan_jit_pid=$!
}
plan_wait_ds_jit() {
  [[ -n $plan_jit_pid ]] || return 0
  local t=$SECONDS
  wait "$plan_jit_pid"
  say "plan: DeepSpeed's CPU Adam compiled beside the build (exit $?, waited $((SECONDS - t)) s after it):" \
    "$(tail -n 1 /tmp/ds_jit.log)"
  cp /tmp/ds_jit.log "$work/ds_jit.log" 2>/dev/null
  plan_jit_pid=
}
# plan_part NAME EXPECTED COMMAND...: runs the part when chosen and the call has >= 15 s (or the part's
# expected seconds, the header's) left, with what the call has left - 5 (plan_goals.py budgets its parts
# within it; DeepSpeed's anchor is its call's last timed part); its lines go to the summary.
plan_part() {
  local name=$1 expected=$2 left budget
  shift 2
  [[ ,$plan_parts, == *,$name,* ]] || return 0
  left=$((${PLAN_BUDGET_S:-480} - ($(date +%s) - start)))
  budget=$((left - 5))
  if ((budget < expected && budget < 15)) && [[ $name != summary ]]; then  # the summary only reads the state
    say "plan $name: skipped, ${left} s left in the call (expected ${expected} s)"
    return 0
  fi
  if ((dry_run)); then
    echo "run: timeout $((budget + 20)) $* --budget-s $budget    # part $name, expected ${expected} s"
    return 0
  fi
  say "plan $name: expected ${expected} s, budget ${budget} s ($(elapsed) into the call)"
  timeout -k 5 $((budget + 20)) "$@" --budget-s "$budget" 2>>"$work/$name.err" |
    while IFS= read -r line; do say "$line"; done
  cp -r "$state"/. "$work/state/" 2>/dev/null
  pack
}
task_run() {
  state=${PLAN_STATE_DIR:-.plan}
  ((dry_run)) || mkdir -p "$state" "$work/state"
  local driver=(python3 scripts/plan_goals.py --bin "$bin" --work "$state" --figures "$state/machine_figures.json"
    --margin "${PLAN_MARGIN:-1.15}" --per-cap "${PLAN_PER_CAP:-2}")
  ((plan_quick)) && driver+=(--quick --caps 3 --warmup 1 --steps 2)
  plan_wait_ds_jit
  plan_part calibrate 50 "${driver[@]}" calibrate
  if ((plan_quick)); then
    plan_part g128 20 "${driver[@]}" grid 16 128
    plan_part g16x512 15 "${driver[@]}" grid 4 512
  else
    plan_part g128 74 "${driver[@]}" grid 128 128
    plan_part g40 47 "${driver[@]}" grid 40 128
    plan_part g512 133 "${driver[@]}" grid 512 128
    plan_part g16x512 68 "${driver[@]}" grid 16 512
  fi
  if [[ ${PLAN_RATIO_SWEEP:-0} == 1 ]]; then
    plan_part partial 44 "${driver[@]}" partial --ratio-sweep
  else
    plan_part partial 1 "${driver[@]}" partial
  fi
  plan_part delayed 20 "${driver[@]}" delayed
  if [[ ,$plan_parts, == *,ds,* ]]; then
    if [[ -d .ds/wheels ]]; then
      local ds_args=(--out "$work/ds")
      ((plan_quick)) && ds_args+=(--batches 40 --caps 24 --steps 1)
      plan_part ds 66 bash scripts/device/ds_plan_anchor.sh "${ds_args[@]}"
    else
      say "plan ds: skipped (no .ds/wheels: scripts/fetch_deepspeed.sh, carry .ds)"
    fi
  fi
  plan_part large 171 "${driver[@]}" large
  plan_part summary 1 "${driver[@]}" summary
  return 0
}
