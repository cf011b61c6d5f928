# shellcheck shell=bash disable=SC2034,SC2154  # sourced by scripts/device/run.sh, which sets the rest
# plan [--quick] [--parts LIST]: issue 40's goals in one call (scripts/plan_goals.py says what each part
# measures), the parts in order of value, each under its own budget (seconds) so a call cut short keeps what
# it measured; every result line lands in the summary as it comes:
#   calibrate 30  train_mrpc --calibrate: this machine's CPU and GPU figures, which every --auto_plan reads
#   g128 80       the grid and the auto plan at caps 12/16/24/40 GiB, global batch 128 seq 128
#   g40 50        ... global batch 40
#   g512 110      ... global batch 512
#   g16x512 55    ... global batch 16 at seq 512
#   partial 30    where only offload fits: the best partial against the best full offload, then a ratio sweep
#   delayed 30    the delayed update at batch 40 against max(forward + backward, CPU update)
#   ds 120        DeepSpeed's ZeRO-2 + offload at global batches 40/128/512 and its largest batch per cap
#                 (.ds/ from scripts/fetch_deepspeed.sh, carry [".ds", ".device-deps"]; skipped without it)
#   large 150     the 6.2 B model, ZeRO-3 + both offloads, 20 steps on a repeated batch: the losses
#   summary       the goals table again
# Expected on one H100 (a fresh machine builds in ~35 s; a run of bench_train_step costs ~5-9 s besides its
# steps): calibrate 5, g128 ~70, g40 ~40, g512 ~100, g16x512 ~50, partial ~5 (+ ~30 for a ratio sweep),
# delayed ~25, ds ~110 (JIT ~40, engine ~25), large ~120 (pinning 104 GiB ~65, 20 steps ~50): ~600 s in
# all. In two calls of <= 500 s: --parts calibrate,g128,g40,g512,g16x512,partial,delayed (~370 s), then on
# the warm machine --parts ds,large,summary (~250 s).
# The whole call stops starting parts at PLAN_BUDGET_S (default 480 s since the call began, the build
# included); a part gets min(its budget, what is left). The state (measured plans, the table, the figures)
# is kept in .plan/ on the device, so a later call on a warm machine continues with other --parts (remove
# .plan to start over). --quick: a 2-layer model, one cap (3 GiB: offload, accumulation), two batches, a
# 4-layer large model, DeepSpeed at one batch and cap: a smoke run of every code path. PLAN_MARGIN (default
# 1.15), PLAN_PER_CAP (2): the grid keeps per cap the PLAN_PER_CAP fastest families predicted within the
# margin of the best and each placement kind's fastest (28 plans for the four batches).
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
}
# plan_part NAME BUDGET COMMAND...: runs the part when chosen and time is left; its lines go to the summary.
plan_part() {
  local name=$1 budget=$2 left
  shift 2
  [[ ,$plan_parts, == *,$name,* ]] || return 0
  left=$((${PLAN_BUDGET_S:-480} - ($(date +%s) - start)))
  ((budget > left - 5)) && budget=$((left - 5))
  if ((budget < 15)); then
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
  plan_part calibrate 30 "${driver[@]}" calibrate
  if ((plan_quick)); then
    plan_part g128 40 "${driver[@]}" grid 16 128
    plan_part g16x512 20 "${driver[@]}" grid 4 512
  else
    plan_part g128 80 "${driver[@]}" grid 128 128
    plan_part g40 50 "${driver[@]}" grid 40 128
    plan_part g512 110 "${driver[@]}" grid 512 128
    plan_part g16x512 55 "${driver[@]}" grid 16 512
  fi
  plan_part partial 30 "${driver[@]}" partial
  plan_part delayed 30 "${driver[@]}" delayed
  if [[ ,$plan_parts, == *,ds,* ]]; then
    if [[ -d .ds/wheels ]]; then
      local ds_args=(--out "$work/ds")
      ((plan_quick)) && ds_args+=(--batches 40 --caps 24 --steps 1)
      plan_part ds 120 bash scripts/device/ds_plan_anchor.sh "${ds_args[@]}"
    else
      say "plan ds: skipped (no .ds/wheels: scripts/fetch_deepspeed.sh, carry .ds)"
    fi
  fi
  plan_part large 150 "${driver[@]}" large
  plan_part summary 20 "${driver[@]}" summary
  return 0
}
