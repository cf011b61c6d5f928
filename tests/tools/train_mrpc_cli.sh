#!/usr/bin/env bash
# train_mrpc end to end, as a user runs it: resuming with changed settings (said or refused), resuming a
# finished run (left alone), and a FIFO as --train_file (read once). Run by ctest:
#   tests/tools/train_mrpc_cli.sh TRAIN_MRPC DATA_DIR CASE
# CASE: resume_refused, resume_changed, resume_finished, resume_unfinished_outputs, fifo_train_file.
# Exit status 0 when every check of the case holds; otherwise the failed check and the run's last lines.
set -uo pipefail
bin=$1 data=$2 case=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/zt_train_mrpc_cli.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Twenty dev rows for evaluation and test keep each run a few seconds long.
head -21 "$data/dev.tsv" >"$work/small.tsv"
common=(--device cpu --validation_file "$work/small.tsv" --test_file "$work/small.tsv" --checkpointing_steps 1
        --seed 42)
log="$work/run.log"

fail() {
  echo "FAILED ($case): $*"
  tail -5 "$log"
  exit 1
}
# train_mrpc ARGS...: runs it into $log, sets rc.
train() {
  "$bin" "${common[@]}" "$@" >"$log" 2>&1
  rc=$?
}
expect_rc() { ((rc == $1)) || fail "exit status $rc, expected $1"; }
expect_line() { grep -qE -- "$1" "$log" || fail "no line matching '$1'"; }

out="$work/out"
case $case in
  resume_refused)
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    cp "$out/metrics.jsonl" "$work/metrics.before"
    # Another seed changes the data order: refused before training, naming the checkpoint and the setting.
    train --max_train_steps 3 --seed 7 --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 2
    expect_line "error: cannot resume from .*step_2.h5"
    expect_line "seed 42 -> 7: that changes the data order"
    grep -q "resumed from" "$log" && fail "a refused resume loaded the checkpoint"
    cmp -s "$out/metrics.jsonl" "$work/metrics.before" || fail "a refused resume changed metrics.jsonl"
    [[ ! -e $out/step_3.h5 ]] || fail "a refused resume trained"
    ;;
  resume_changed)
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    # A changed learning rate and step budget: allowed, and said.
    train --max_train_steps 3 --learning_rate 2e-4 --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 0
    expect_line "^continuing with changed learning_rate [0-9.e-]+ -> 0.0002, not bitwise the original run$"
    expect_line "^continuing with changed max_train_steps 2 -> 3, not bitwise the original run$"
    expect_line "resumed from .*step_2.h5: step 2"
    expect_line "done: 3 optimizer steps"
    (($(wc -l <"$out/metrics.jsonl") == 1)) || fail "metrics.jsonl has $(wc -l <"$out/metrics.jsonl") lines, expected 1"
    ;;
  resume_finished)
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    cp "$out/metrics.jsonl" "$work/metrics.before"
    cp "$out/model.h5" "$work/model.before"
    train --max_train_steps 2 --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 0
    expect_line "the run is finished: .*step_2.h5 is at optimizer step 2 of 2"
    grep -qE "^(epoch 1:|done:)" "$log" && fail "a finished run trained or evaluated again"
    cmp -s "$out/metrics.jsonl" "$work/metrics.before" || fail "resuming a finished run changed metrics.jsonl"
    cmp -s "$out/model.h5" "$work/model.before" || fail "resuming a finished run rewrote model.h5"
    ;;
  resume_unfinished_outputs)
    # Killed after the last step's checkpoint, before model.h5 (and here after the epoch's metrics line and
    # in the middle of a second copy of it): the resume writes the final outputs, metrics.jsonl keeps one
    # line per epoch, and the model is the uninterrupted run's.
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    cp "$out/metrics.jsonl" "$work/metrics.before"
    cp "$out/model.h5" "$work/model.before"
    rm "$out/model.h5"
    head -c 20 "$work/metrics.before" >>"$out/metrics.jsonl"
    train --max_train_steps 2 --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 0
    expect_line "training is complete at optimizer step 2; writing the run's final evaluation and outputs"
    expect_line "metrics.jsonl: dropped 2 lines written after the checkpoint"
    [[ -f $out/model.h5 ]] || fail "no model.h5"
    (($(wc -l <"$out/metrics.jsonl") == 1)) || fail "metrics.jsonl has $(wc -l <"$out/metrics.jsonl") lines, expected 1"
    # The epoch's train_loss and evaluation are the uninterrupted run's (the timings are not).
    strip_timing() { sed -E 's/"(epoch_seconds|train_samples_per_s)":[^,}]*//g' "$1"; }
    [[ $(strip_timing "$out/metrics.jsonl") == $(strip_timing "$work/metrics.before") ]] ||
      fail "metrics line differs: $(cat "$out/metrics.jsonl") vs $(cat "$work/metrics.before")"
    ;;
  fifo_train_file)
    # A FIFO has its rows once: the train file must be read once.
    mkfifo "$work/train.fifo"
    cat "$data/train.tsv" >"$work/train.fifo" &
    writer=$!
    # A second open of the FIFO would wait for a writer forever: timeout ends that (exit status 124).
    timeout 240 "$bin" "${common[@]}" --max_train_steps 2 --train_file "$work/train.fifo" >"$log" 2>&1
    rc=$?
    kill "$writer" 2>/dev/null
    expect_rc 0
    expect_line "done: 2 optimizer steps"
    ;;
  *)
    echo "unknown case $case"
    exit 2
    ;;
esac
echo "ok ($case)"
