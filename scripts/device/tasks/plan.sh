# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# plan [--quick] [--parts LIST]: issue 40's goals (scripts/plan_goals.py says what each part measures, how a
# plan is judged to fit a cap and how the grid is pruned), the parts in order of value, each under its own
# budget (seconds) so a call cut short keeps what it measured; every result line lands in the summary as it
# comes. Budget, then what it took or should take on one H100 (docs/bench/2026-12-06-h100-plan: a
# bench_train_step run costs ~3.5 s of start-up, an offload plan ~9.5 s more to pin its ~14 GB):
#   calibrate 10  (3)   train_mrpc --calibrate: this machine's figures, which every --auto_plan reads
#   g128 70       (~60) the grid and the auto plan at caps 12/16/24/40 GiB, global batch 128 seq 128 (7 plans)
#   g40 40        (~32) ... global batch 40 (4 plans)
#   g512 105      (~95) ... global batch 512 (7 plans, steps of 0.7-1.1 s: 1 warm-up + 3 timed)
#   g16x512 65    (~55) ... global batch 16 at seq 512 (6 plans + the capped reruns: 16x1 at 24, 8x2 ckpt at 16)
#   partial 10    (~1)  from the grid: where only offload fits, the best partial against the best full offload
#                       (the ratio sweep runs only with >= 30 s of budget left: PLAN_PARTIAL_S=60)
#   delayed 35    (~28) the delayed update at batch 40 against max(forward + backward, CPU update), and the
#                       same step with --delayed_landing whole (two offload runs)
#   ds 75         (~60) DeepSpeed's ZeRO-2 + offload at global batches 40/128/512 and its largest batch per cap
#                       (<= 5 one-step probes a cap); its CPU Adam compiled beside the build (below), else +40
#                       (.ds/ from scripts/fetch_deepspeed.sh, carry [".ds", ".device-deps"]; skipped without it)
#   large 180     (~170) the 6.2 B model, ZeRO-3 + both offloads, 20 steps on a repeated batch: the losses. Its
#                       start-up, measured at 125-160 s on the H200 (docs/bench/2026-12-03-h200-session*/big),
#                       is mostly pinning 104.5 GiB (cudaHostAlloc, ~1.5 GB/s: ~70 s) and the host init; the
#                       steps 2.13 s each (the CPU AdamW of 6.2 B: 1.39 s). Pinning is kept: without it the
#                       start-up saves ~60 s but every step moves ~37 GB pageable (9-15 GB/s against 54):
#                       ~+2.8 s a step, ~+56 s over 20 steps; a wash, and the pinned run is the one the
#                       estimate's 104.48 GiB host figure checks
#   summary       (~1)  the goals table again (always runs)
# Two back-to-back calls, 560 s in all, the build included (~40 s fresh, ~1 s warm):
#   1: PLAN_BUDGET_S=320 scripts/device/run.sh plan --parts calibrate,g128,g40,g512,g16x512,partial,delayed
#      (~315 s: build 40 + 3 + 60 + 32 + 95 + 55 + 1 + 28); a fresh build also compiles DeepSpeed's CPU Adam
#      beside it when .ds/ is carried (ds_plan_anchor.py --jit-only, waited for before the first part)
#   2: on the warm machine, PLAN_BUDGET_S=240 scripts/device/run.sh plan --parts ds,large,summary (~232 s)
# The call stops starting parts at PLAN_BUDGET_S (default 480 s since the call began, the build included); a
# part gets min(its budget, what is left - 5). The state (measured plans, the table, the figures) is kept in
# .plan/ on the device, so a later call on a warm machine continues with other --parts (remove .plan to start
# over). --quick: a 2-layer model, one cap (3 GiB: offload, accumulation), two batches, a 4-layer large
# model, DeepSpeed at one batch and cap: a smoke run of every code path. PLAN_MARGIN (default 1.15),
# PLAN_PER_CAP (2): the grid keeps per cap the PLAN_PER_CAP fastest families predicted within the margin of
# the best and each placement kind's fastest (24 plans for the four batches, and up to 8 fallbacks measured
# only where needed).
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
# plan_part NAME BUDGET COMMAND...: runs the part when chosen and time is left; its lines go to the summary.
plan_part() {
  local name=$1 budget=$2 wanted=$2 left
  shift 2
  [[ ,$plan_parts, == *,$name,* ]] || return 0
  left=$((${PLAN_BUDGET_S:-480} - ($(date +%s) - start)))
  ((budget > left - 5)) && budget=$((left - 5))
  if ((budget < wanted && budget < 15)) && [[ $name != summary ]]; then  # the summary only reads the state
    say "plan $name: skipped, ${left} s left in the call"
    return 0
  fi
  if ((dry_run)); then
    echo "run: timeout $((budget + 20)) $* --budget-s $budget    # part $name"
    return 0
  fi
  say "plan $name: budget ${budget} s ($(elapsed) into the call)"
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
  plan_part calibrate 10 "${driver[@]}" calibrate
  if ((plan_quick)); then
    plan_part g128 40 "${driver[@]}" grid 16 128
    plan_part g16x512 20 "${driver[@]}" grid 4 512
  else
    plan_part g128 70 "${driver[@]}" grid 128 128
    plan_part g40 40 "${driver[@]}" grid 40 128
    plan_part g512 105 "${driver[@]}" grid 512 128
    plan_part g16x512 65 "${driver[@]}" grid 16 512
  fi
  plan_part partial "${PLAN_PARTIAL_S:-10}" "${driver[@]}" partial
  plan_part delayed 35 "${driver[@]}" delayed
  if [[ ,$plan_parts, == *,ds,* ]]; then
    if [[ -d .ds/wheels ]]; then
      local ds_args=(--out "$work/ds")
      ((plan_quick)) && ds_args+=(--batches 40 --caps 24 --steps 1)
      plan_part ds 75 bash scripts/device/ds_plan_anchor.sh "${ds_args[@]}"
    else
      say "plan ds: skipped (no .ds/wheels: scripts/fetch_deepspeed.sh, carry .ds)"
    fi
  fi
  plan_part large 180 "${driver[@]}" large
  plan_part summary 10 "${driver[@]}" summary
  return 0
}
