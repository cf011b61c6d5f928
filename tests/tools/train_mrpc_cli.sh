#!/usr/bin/env bash
# train_mrpc end to end, as a user runs it: resuming with changed settings (said or refused), resuming a
# finished run (left alone), a FIFO as --train_file (read once), and what must not pass silently (issue 38):
# step counts at world size 2, unlabeled data, resuming into another run's directory, a concurrent run, a
# diverged last step, a damaged stored configuration, unfinished sharded checkpoints. Run by ctest:
#   tests/tools/train_mrpc_cli.sh TRAIN_MRPC DATA_DIR CASE
# CASE: resume_refused, resume_changed, resume_finished, resume_unfinished_outputs, fifo_train_file,
#   world_size_steps, unlabeled_data, resume_into_another_run, concurrent_run, diverged_step,
#   damaged_training_config, damaged_checkpoint_lookup, unfinished_sharded_checkpoint.
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
  world_size_steps)
    # 200 rows in micro-batches of 16 at world 2: 13 micro-batches, 6 per rank, 6 steps; the plan, the
    # schedule and the loop agree, so the run ends at the schedule's end and a resume says it is finished.
    head -201 "$data/train.tsv" >"$work/train200.tsv"
    steps_args=(--train_file "$work/train200.tsv" --world_size 2 --per_device_train_batch_size 16
                --num_train_epochs 1 --log_every 1 --output_dir "$out")
    train "${steps_args[@]}"
    expect_rc 0
    expect_line "^  num_training_steps +6 "
    expect_line "done: 6 optimizer steps"
    train "${steps_args[@]}" --resume_from_checkpoint "$out"
    expect_rc 0
    expect_line "the run is finished: .*step_6.h5 is at optimizer step 6 of 6"
    train --train_file "$work/train200.tsv" --world_size 64 --num_train_epochs 1
    expect_rc 2
    expect_line "error: --world_size 64 leaves ranks without data: 200 training rows make"
    ;;
  unlabeled_data)
    # GLUE's unlabeled test file trained with loss 0 and gradient 0, or scored 0 of 0 rows.
    "$bin" --device cpu --max_train_steps 1 --train_file "$data/test_glue_unlabeled.tsv" \
      --validation_file "$work/small.tsv" >"$log" 2>&1
    rc=$?
    expect_rc 2
    expect_line "error: --train_file .*test_glue_unlabeled.tsv has no labels"
    "$bin" --device cpu --max_train_steps 1 --validation_file "$data/test_glue_unlabeled.tsv" \
      --test_file "$work/small.tsv" >"$log" 2>&1
    rc=$?
    expect_rc 2
    expect_line "error: --validation_file .*test_glue_unlabeled.tsv has no labels"
    ;;
  resume_into_another_run)
    train --max_train_steps 2 --output_dir "$work/a"
    expect_rc 0
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    cp "$out/metrics.jsonl" "$work/metrics.before"
    cp "$out/model.h5" "$work/model.before"
    train --max_train_steps 3 --output_dir "$out" --resume_from_checkpoint "$work/a/step_2.h5"
    expect_rc 2
    expect_line "error: --output_dir .* holds .* of another run than the checkpoint .*a/step_2.h5"
    cmp -s "$out/metrics.jsonl" "$work/metrics.before" || fail "the refused resume changed metrics.jsonl"
    cmp -s "$out/model.h5" "$work/model.before" || fail "the refused resume changed model.h5"
    [[ ! -e $out/step_3.h5 ]] || fail "the refused resume trained"
    # Continuing that run in an empty directory is allowed.
    train --max_train_steps 3 --output_dir "$work/c" --resume_from_checkpoint "$work/a/step_2.h5"
    expect_rc 0
    expect_line "done: 3 optimizer steps"
    ;;
  concurrent_run)
    # A second run with --overwrite_output_dir while the first is running deleted the live run's files.
    "$bin" "${common[@]}" --max_train_steps 20 --output_dir "$out" >"$work/first.log" 2>&1 &
    first=$!
    for ((i = 0; i < 600; i++)); do
      [[ -e $out/.zerotrain.lock ]] && break
      sleep 0.1
    done
    [[ -e $out/.zerotrain.lock ]] || { kill "$first"; fail "the running run holds no lock file in its --output_dir"; }
    train --max_train_steps 2 --output_dir "$out" --overwrite_output_dir
    expect_rc 2
    expect_line "error: --output_dir .* is in use by another run \\(process $first\\)"
    wait "$first"
    rc=$?
    log="$work/first.log"
    expect_rc 0
    expect_line "done: 20 optimizer steps"
    [[ -f $out/model.h5 && -f $out/step_20.h5 ]] || fail "the first run's outputs are missing"
    [[ ! -e $out/.zerotrain.lock ]] || fail "the lock file is left after the run"
    ;;
  diverged_step)
    # A last step whose update breaks the weights: caught by the evaluation, nothing written from them.
    train --max_train_steps 1 --learning_rate 1e30 --output_dir "$out"
    expect_rc 2
    expect_line "error: training diverged at optimizer step 1: the evaluation of its weights on .* gives loss -?nan"
    [[ ! -e $out/model.h5 && ! -e $out/MRPC.tsv ]] || fail "model.h5 or MRPC.tsv written from diverged weights"
    # Step 1's update breaks the weights, step 2's loss is the first not finite: step 2 is named.
    train --max_train_steps 3 --learning_rate 1e30
    expect_rc 2
    expect_line "error: training diverged at optimizer step 2: the loss of its micro-batch .* the step before it \\(1\\) had loss"
    ;;
  damaged_training_config)
    # One byte of the stored configuration text changed: a damaged file, not a changed setting.
    train --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    python3 - "$out/step_2.h5" <<'PY' || fail "no learning_rate in the stored configuration"
import re, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
match = re.search(rb"  learning_rate +([0-9])", data)
if not match:
    sys.exit(1)
data[match.start(1)] = ord("7") if data[match.start(1)] != ord("7") else ord("3")
open(path, "wb").write(data)
PY
    train --max_train_steps 3 --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 2
    expect_line "error: checkpoint .*step_2.h5 is damaged: its stored training configuration .* fails its checksum"
    grep -q "continuing with changed" "$log" && fail "the damage read as a changed setting"
    ;;
  damaged_checkpoint_lookup)
    # A flipped byte in a tensor name of a sharded checkpoint fails HDF5's metadata checksum: a damaged file,
    # not "checkpoint ?: tensor ... incomplete or of another model".
    echo '{"zero_optimization": {"stage": 2}}' >"$work/zero2.json"
    train --world_size 2 --deepspeed_config "$work/zero2.json" --max_train_steps 2 --output_dir "$out"
    expect_rc 0
    python3 - "$out/step_2.zero/rank_0_of_2.h5" <<'PY' || fail "no tensor name in the rank file"
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
at = data.find(b"query_proj.weight")
if at < 0:
    sys.exit(1)
data[at + 3] ^= 0x20
open(path, "wb").write(data)
PY
    train --world_size 2 --deepspeed_config "$work/zero2.json" --max_train_steps 3 --output_dir "$out" \
      --resume_from_checkpoint "$out"
    expect_rc 2
    expect_line "error: HDF5 file .*step_2.zero/rank_0_of_2.h5 is damaged: looking up '.*' fails"
    grep -q "incomplete or of another model" "$log" && fail "the damage read as a missing tensor"
    ;;
  unfinished_sharded_checkpoint)
    # ZeRO-2 at world 2 writes step_<N>.zero/ through step_<N>.zero.tmp/: one left by a killed run is removed
    # when the next run starts, and a write that fails (a full disk) removes its own.
    echo '{"zero_optimization": {"stage": 2}}' >"$work/zero2.json"
    zero=(--world_size 2 --deepspeed_config "$work/zero2.json" --max_train_steps 2)
    train "${zero[@]}" --output_dir "$out"
    expect_rc 0
    [[ -d $out/step_2.zero ]] || fail "no sharded checkpoint step_2.zero"
    mkdir "$out/step_3.zero.tmp" && echo x >"$out/step_3.zero.tmp/rank_0_of_2.h5"
    train "${zero[@]}" --output_dir "$out" --resume_from_checkpoint "$out"
    expect_rc 0
    expect_line "removed .*step_3.zero.tmp"
    [[ ! -e $out/step_3.zero.tmp ]] || fail "step_3.zero.tmp is left"
    # A file size limit below one rank's file: the first checkpoint write fails.
    (ulimit -f 2000 && exec "$bin" "${common[@]}" "${zero[@]}" --output_dir "$work/full") >"$log" 2>&1
    rc=$?
    expect_rc 2
    leftovers=$(find "$work/full" -name '*.zero.tmp*' | wc -l)
    ((leftovers == 0)) || fail "$leftovers unfinished checkpoint directories left after the failed write"
    ;;
  *)
    echo "unknown case $case"
    exit 2
    ;;
esac
echo "ok ($case)"
