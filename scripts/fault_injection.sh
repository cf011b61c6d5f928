#!/usr/bin/env bash
# Fault injection for train_mrpc (issue 13): a small CPU run is interrupted at random moments — SIGKILL,
# SIGINT, SIGTERM, or a full disk emulated by a file size limit (ulimit -f) — and resumed with
# --resume_from_checkpoint until it finishes; its model.h5 and MRPC.tsv must then equal an uninterrupted
# run's bit for bit, and no temp file may be left. Each iteration injects 1 to 3 faults.
#
#   scripts/fault_injection.sh            # 50 iterations
#   scripts/fault_injection.sh 5          # 5 iterations
#   ZT_FI_SEED=7 scripts/fault_injection.sh
#
# Checks per interrupted attempt (what the trainer must do; see runtime/signals.h, runtime/atomic_file.h,
# app/run/run_directory.h):
#   SIGKILL   exit status 137 (nothing else is possible)
#   SIGINT    130 / SIGTERM 143, and once training is under way the stop handler's line ("received: stopping
#             after this optimizer step"), i.e. a graceful stop with a checkpoint rather than a death
#   disk full exit status 2 with one "error:" line (no SIGXFSZ death, no crash in HDF5's close)
# and per iteration: the resumed run finishes with exit status 0, model.h5 and MRPC.tsv are bitwise the
# reference's (compared as the safetensors convert_hf export writes: raw f32 tensors in table order),
# metrics.jsonl has the reference's number of lines, and no *.tmp-<pid> file is left in the directory.
# Prints one line per iteration and a summary; exit status 1 when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

iterations=${1:-50}
bin=${ZT_FI_BIN:-build/bin}
RANDOM=${ZT_FI_SEED:-13}
for tool in train_mrpc convert_hf; do
  [[ -x $bin/$tool ]] || { echo "fault_injection: build $bin/$tool first (scripts/build.sh)" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/zt_fault_injection.XXXXXX")
trap 'rm -rf "$work"' EXIT
train_args=(--device cpu --max_train_steps 30 --checkpointing_steps 5 --num_train_epochs 1 --seed 42)

# The uninterrupted reference, and its duration: faults land uniformly within it.
start=$(date +%s.%N)
"$bin/train_mrpc" "${train_args[@]}" --output_dir "$work/reference" >"$work/reference.log" 2>&1 || {
  echo "fault_injection: the reference run failed:" >&2
  tail -5 "$work/reference.log" >&2
  exit 2
}
duration=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
"$bin/convert_hf" export "$work/reference/model.h5" "$work/reference_hf" >/dev/null 2>&1
reference_lines=$(wc -l <"$work/reference/metrics.jsonl")
echo "reference run: ${duration} s; ${iterations} iterations follow"

# A fraction of the reference duration, uniformly random.
random_moment() { awk -v r="$RANDOM" -v d="$duration" 'BEGIN { printf "%.2f", 0.05 + r / 32768 * d }'; }

failures=0
declare -A faults=() checks_failed=()
fail() {  # iteration, check, detail
  echo "  iteration $1: FAILED $2: $3"
  checks_failed[$2]=$((${checks_failed[$2]:-0} + 1))
  failed=1
}

# One attempt of the run in $out, resuming when a checkpoint exists, else starting over. $1: fault (none,
# KILL, INT, TERM, FSIZE). Sets rc and leaves the output in $log.
attempt() {
  local fault=$1 resume=()
  if compgen -G "$out/step_*.h5" >/dev/null; then
    resume=(--resume_from_checkpoint "$out")
  else
    rm -rf "$out"  # nothing to resume: a fresh start, as a user would do
  fi
  log="$work/attempt.log"
  if [[ $fault == FSIZE ]]; then
    # Below one checkpoint (about 18 MB), so the first checkpoint write fails part way.
    local blocks=$((1000 + RANDOM % 15000))
    (ulimit -f "$blocks" && exec "$bin/train_mrpc" "${train_args[@]}" --output_dir "$out" "${resume[@]}") \
      >"$log" 2>&1
    rc=$?
    return
  fi
  # A script's background jobs start with SIGINT ignored (the trainer keeps an ignored signal ignored):
  # restore the default so SIGINT reaches it as from a terminal.
  env --default-signal=INT,TERM "$bin/train_mrpc" "${train_args[@]}" --output_dir "$out" "${resume[@]}" \
    >"$log" 2>&1 &
  local pid=$!
  if [[ $fault != none ]]; then
    sleep "$(random_moment)"
    kill -s "$fault" "$pid" 2>/dev/null
  fi
  { wait "$pid"; } 2>/dev/null  # without bash's "Killed" report
  rc=$?
}

for ((i = 1; i <= iterations; i++)); do
  out="$work/run"
  rm -rf "$out"
  failed=0
  summary=""
  fault_count=$((1 + RANDOM % 3))
  for ((k = 0; k < fault_count; k++)); do
    kinds=(KILL INT TERM FSIZE)
    fault=${kinds[RANDOM % 4]}
    faults[$fault]=$((${faults[$fault]:-0} + 1))
    attempt "$fault"
    summary+="$fault->$rc "
    if ((rc == 0)); then break; fi  # finished before the fault landed
    case $fault in
      KILL) ((rc == 137)) || fail "$i" "sigkill-status" "exit status $rc" ;;
      INT | TERM)
        expected=$([[ $fault == INT ]] && echo 130 || echo 143)
        ((rc == expected)) || fail "$i" "signal-status" "$fault gave exit status $rc, expected $expected"
        # Training is under way once a checkpoint was written or one was resumed (the progress bar prints
        # only at the end of an epoch when output is not a terminal).
        if grep -qE "checkpoint: |resumed from" "$log" && ! grep -q "received: stopping" "$log"; then
          fail "$i" "graceful-stop" "$fault during training ended the run without the stop handler"
        fi
        ;;
      FSIZE)
        ((rc == 2)) || fail "$i" "disk-full-status" "exit status $rc, expected 2"
        (($(grep -c "error:" "$log") == 1)) || fail "$i" "disk-full-message" "$(tail -1 "$log")"
        ;;
    esac
  done
  attempts=0
  while [[ ! -f $out/model.h5 || $rc != 0 ]]; do
    if ((++attempts > 3)); then
      fail "$i" "resume" "no finished run after 3 resumes: $(tail -1 "$log")"
      break
    fi
    attempt none
    summary+="resume->$rc "
  done
  if [[ -f $out/model.h5 && $rc == 0 ]]; then
    rm -rf "$work/run_hf"
    "$bin/convert_hf" export "$out/model.h5" "$work/run_hf" >/dev/null 2>&1
    cmp -s "$work/reference_hf/model.safetensors" "$work/run_hf/model.safetensors" ||
      fail "$i" "bitwise-model" "model.h5 differs from the uninterrupted run's"
    cmp -s "$work/reference/MRPC.tsv" "$out/MRPC.tsv" || fail "$i" "bitwise-predictions" "MRPC.tsv differs"
    lines=$(wc -l <"$out/metrics.jsonl")
    ((lines == reference_lines)) || fail "$i" "metrics" "metrics.jsonl has $lines lines, the reference $reference_lines"
  fi
  leftovers=$(find "$out" -name '*.tmp-*' 2>/dev/null | wc -l)
  ((leftovers == 0)) || fail "$i" "temp-files" "$leftovers temp files left: $(find "$out" -name '*.tmp-*' | head -3)"
  ((failed == 0)) || failures=$((failures + 1))
  printf '%3d %s %s\n' "$i" "$([[ $failed == 0 ]] && echo ok || echo FAILED)" "$summary"
done

echo "faults injected: KILL ${faults[KILL]:-0}, INT ${faults[INT]:-0}, TERM ${faults[TERM]:-0}, disk full ${faults[FSIZE]:-0}"
for check in "${!checks_failed[@]}"; do echo "check $check failed ${checks_failed[$check]} times"; done
echo "iterations: $iterations, failed: $failures"
((failures == 0))
