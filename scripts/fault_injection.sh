#!/usr/bin/env bash
# Fault injection for train_mrpc (issues 13 and 38): a small CPU run is interrupted at random moments —
# SIGKILL, SIGINT, SIGTERM, or a full disk emulated by a file size limit (ulimit -f) — and resumed with
# --resume_from_checkpoint until it finishes; its model.h5 and MRPC.tsv must then equal an uninterrupted
# run's bit for bit, and no temp file may be left. Each iteration injects 1 to 3 faults into one setup, the
# setups taken in turn:
#   w1          1 rank, stage 0 (single-file step_<N>.h5 checkpoints)
#   w2-zero2    2 in-process ranks, ZeRO-2 (sharded step_<N>.zero/ checkpoints)
#   w3-zero3    3 ranks, ZeRO-3
#   w2-nvme     2 ranks, ZeRO-2 with the optimizer state in the disk tier (offload_optimizer device nvme)
#   w3-nvme3    3 ranks, ZeRO-3 with both offloads, parameters and optimizer state on disk
#
#   scripts/fault_injection.sh            # 50 iterations
#   scripts/fault_injection.sh 5          # 5 iterations
#   ZT_FI_SEED=7 ZT_FI_SETUPS="w2-zero2 w3-zero3" ZT_FI_BIN=build-cpu/bin scripts/fault_injection.sh
#
# Checks per interrupted attempt (what the trainer must do; see runtime/signals.h, runtime/atomic_file.h,
# app/run/run_directory.h):
#   SIGKILL   exit status 137 (nothing else is possible)
#   SIGINT    130 / SIGTERM 143, and once training is under way the stop handler's line ("received: stopping
#             after this optimizer step"), i.e. a graceful stop with a checkpoint rather than a death
#   disk full exit status 2 with one "error:" line (no SIGXFSZ death, no crash in HDF5's close)
# and per iteration: the resumed run finishes with exit status 0, model.h5 and MRPC.tsv are bitwise the
# setup's reference's (compared as the safetensors convert_hf export writes: raw f32 tensors in table order),
# metrics.jsonl has the reference's number of lines, and no *.tmp-<pid> file, step_<N>.zero.tmp/ directory
# or lock file is left in the directory.
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
# Small: 40 train rows of 8 make 5 micro-batches an epoch (not a multiple of 2 or 3 ranks: epoch ends cut
# windows), 20 rows for evaluation and the test predictions.
data=${ZT_FI_DATA:-data/glue_mrpc}
head -41 "$data/train.tsv" >"$work/train.tsv"
head -21 "$data/dev.tsv" >"$work/dev.tsv"
base_args=(--device cpu --train_file "$work/train.tsv" --validation_file "$work/dev.tsv" --test_file "$work/dev.tsv"
           --per_device_train_batch_size 8 --max_length 64 --max_train_steps 12 --checkpointing_steps 2
           --seed 42)

cat >"$work/zero2.json" <<'JSON'
{"zero_optimization": {"stage": 2}}
JSON
cat >"$work/zero3.json" <<'JSON'
{"zero_optimization": {"stage": 3}}
JSON
cat >"$work/nvme2.json" <<JSON
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "$work/nvme"}}}
JSON
cat >"$work/nvme3.json" <<JSON
{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "$work/nvme"},
                       "offload_param": {"device": "nvme", "nvme_path": "$work/nvme"}}}
JSON
mkdir -p "$work/nvme"
declare -A setup_args=(
  [w1]=""
  [w2-zero2]="--world_size 2 --deepspeed_config $work/zero2.json"
  [w3-zero3]="--world_size 3 --deepspeed_config $work/zero3.json"
  [w2-nvme]="--world_size 2 --deepspeed_config $work/nvme2.json --host_memory_limit 256MiB"
  [w3-nvme3]="--world_size 3 --deepspeed_config $work/nvme3.json --host_memory_limit 256MiB"
)
read -r -a setups <<<"${ZT_FI_SETUPS:-w1 w2-zero2 w3-zero3 w2-nvme w3-nvme3}"
for setup in "${setups[@]}"; do
  [[ -v "setup_args[$setup]" ]] || { echo "fault_injection: unknown setup $setup" >&2; exit 2; }
done

# The uninterrupted reference of each setup, and its duration: faults land uniformly within it.
declare -A duration=() reference_lines=()
for setup in "${setups[@]}"; do
  read -r -a extra <<<"${setup_args[$setup]}"
  start=$(date +%s.%N)
  "$bin/train_mrpc" "${base_args[@]}" "${extra[@]}" --output_dir "$work/reference-$setup" \
    >"$work/reference-$setup.log" 2>&1 || {
    echo "fault_injection: the reference run of $setup failed:" >&2
    tail -5 "$work/reference-$setup.log" >&2
    exit 2
  }
  duration[$setup]=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
  "$bin/convert_hf" export "$work/reference-$setup/model.h5" "$work/reference-$setup-hf" >/dev/null 2>&1
  reference_lines[$setup]=$(wc -l <"$work/reference-$setup/metrics.jsonl")
  echo "reference run $setup: ${duration[$setup]} s"
done
echo "${iterations} iterations follow"

# A fraction of the setup's reference duration, uniformly random.
random_moment() { awk -v r="$RANDOM" -v d="${duration[$setup]}" 'BEGIN { printf "%.2f", 0.05 + r / 32768 * d }'; }

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
    # Below one checkpoint file (a rank's file of a sharded one; a swap file of the disk tier), so a write
    # fails part way.
    local blocks=$((500 + RANDOM % 8000))
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

declare -A setup_iterations=() setup_failures=()
for ((i = 1; i <= iterations; i++)); do
  setup=${setups[(i - 1) % ${#setups[@]}]}
  read -r -a extra <<<"${setup_args[$setup]}"
  train_args=("${base_args[@]}" "${extra[@]}")
  setup_iterations[$setup]=$((${setup_iterations[$setup]:-0} + 1))
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
    cmp -s "$work/reference-$setup-hf/model.safetensors" "$work/run_hf/model.safetensors" ||
      fail "$i" "bitwise-model" "model.h5 differs from the uninterrupted run's"
    cmp -s "$work/reference-$setup/MRPC.tsv" "$out/MRPC.tsv" || fail "$i" "bitwise-predictions" "MRPC.tsv differs"
    lines=$(wc -l <"$out/metrics.jsonl")
    ((lines == reference_lines[$setup])) ||
      fail "$i" "metrics" "metrics.jsonl has $lines lines, the reference ${reference_lines[$setup]}"
  fi
  leftovers=$(find "$out" \( -name '*.tmp-*' -o -name '*.zero.tmp' -o -name .zerotrain.lock \) 2>/dev/null | wc -l)
  ((leftovers == 0)) || fail "$i" "temp-files" "$leftovers temp files left: $(find "$out" \( -name '*.tmp-*' \
    -o -name '*.zero.tmp' -o -name .zerotrain.lock \) | head -3)"
  if ((failed != 0)); then
    failures=$((failures + 1))
    setup_failures[$setup]=$((${setup_failures[$setup]:-0} + 1))
  fi
  printf '%3d %-9s %s %s\n' "$i" "$setup" "$([[ $failed == 0 ]] && echo ok || echo FAILED)" "$summary"
done

echo "faults injected: KILL ${faults[KILL]:-0}, INT ${faults[INT]:-0}, TERM ${faults[TERM]:-0}, disk full ${faults[FSIZE]:-0}"
for check in "${!checks_failed[@]}"; do echo "check $check failed ${checks_failed[$check]} times"; done
for setup in "${setups[@]}"; do
  echo "setup $setup: ${setup_iterations[$setup]:-0} iterations, ${setup_failures[$setup]:-0} failed"
done
echo "iterations: $iterations, failed: $failures"
((failures == 0))
